"""Next run times of job schedulers, equal to the millisecond to BullMQ 6.7 for Node.

BullMQ computes a cron scheduler's next iteration with the npm package cron-parser (5.10.4 in
BullMQ 6.7.6, the pinned Node peer), which does its date arithmetic with luxon 3.7. This module
is an independent evaluator of the same semantics
(docs/protocol/flows-dedup-schedulers.md#job-schedulers). No cron library for Python matches
cron-parser: the day-of-month / day-of-week rule, ``L`` on both fields, ``#``, the
name aliases and, above all, what happens on daylight-saving days all differ. Those outcomes are
not a clean rule but a consequence of the order in which cron-parser walks the calendar (month,
then day, then hour, minute, second) and of how luxon resolves a wall-clock time that is missing
or repeated. So the search here walks in that same order over a cursor with luxon's arithmetic:

* a time zone offset is always that of the instant; changing a wall-clock field re-resolves the
  wall time with the *current* offset as the first guess (a missing time moves forward by the
  gap; a repeated time keeps the occurrence with the current offset);
* adding an hour, minute or second adds that many milliseconds; adding a day or a month adds
  it on the wall clock; each is followed by truncation to the start of the unit;
* on a day whose offset changes, hours are walked one at a time. Unless the hour field lists
  all 24 hours, a scheduled hour skipped by spring-forward runs once, at the first matching
  minute and second of the hour the clock lands on, and a repeated fall-back hour runs once
  (patterns with every hour run in both repeated hours);
* the search gives up (no next time) after 9999 steps, as cron-parser does.

``tests/test_cron.py`` checks all of this against the real BullMQ in one Node process: about
5,400 (pattern, zone, instant) cases and 9,000 iterations, including the DST weekends of
Europe/London and America/New_York (and eight more zones with other kinds of change), leap
days, ``L``, ``#``, day combinations, seconds, names, steps, start and end dates, chains of
successive iterations, every zone name Python lists, and which expressions are refused. A
call costs about 10-25 µs for everyday patterns; patterns that run once in years cost more
(about 0.3 ms for ``0 12 29 2 *``), as on Node.

Accepted syntax, as cron-parser (non-strict, as BullMQ calls it): 1 to 6 fields (fewer than 6
are completed from the left with ``0 * * * * *``, so 5 fields = minute precision and 6 fields
have seconds first); ``*``, ``?``, lists, ranges of two ends (``1-2-3``, ``*-5`` and ``1-5?``
are refused: ``*`` and ``?`` are a range already), steps (``a/n`` means ``a-max/n``); three-letter
names in any case, month names in the month field and weekday names in the day of week only
(``MON`` as a month or ``JUL#2`` as a weekday is refused, as cron-parser 5.10.4 does); weekday
``0``-``7``; ``L`` in day of month (last day) and ``nL`` in day of week (last such weekday);
``n#k`` in day of week (k-th such weekday, k 1-5); ``@yearly``, ``@annually``, ``@monthly``,
``@weekly``, ``@daily``, ``@hourly``, ``@minutely``, ``@secondly``, ``@weekdays``,
``@weekends``. Day of month and day of week combine with OR when both are restricted (neither
is exactly ``*`` or ``?``). cron-parser 5.10.4 has no ``W``; it is refused there too.

Refused although cron-parser accepts them (so nothing may drift):

* ``H`` (hashed values): BullMQ passes no ``hashSeed``, so Node draws them at random;
* a ``#`` occurrence that is not plain digits (cron-parser reads it with JavaScript's
  ``Number``, so it would take ``2.0``, ``0x2`` or ``1.5``);
* characters outside printable ASCII and ASCII blanks (JavaScript splits fields on Unicode
  blanks too);
* time zone names the Python tz database does not list, and luxon's extra spellings
  (``utc+3``, ``local``, lower-case IANA names). ``tz=None`` means the process's local zone, as
  on Node (luxon's system zone).

:func:`validate_cron` also refuses a pattern that can never run (a day of month that none of
its months has, e.g. ``0 0 31 2,4 *``): BullMQ accepts it and silently writes nothing.
:func:`next_cron_ms` returns None for it, as Node does.

Iteration times are integers in Unix epoch milliseconds.
"""

from __future__ import annotations

import re
import time
from datetime import date, datetime
from functools import lru_cache
from zoneinfo import ZoneInfo, available_timezones

from .errors import InvalidOptionError

__all__ = ["FORMS", "next_cron_ms", "validate_cron"]

_SEC = 1000
_MIN = 60 * _SEC
_HOUR = 60 * _MIN
_DAY = 24 * _HOUR
_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
#: cron-parser's month lengths (February 29: a day 29 is never refused up front).
_MONTH_DAYS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_LOOP_LIMIT = 10_000
#: Instants this module accepts (years 1970 to about 8900), inside what datetime handles.
_MAX_MS = 218_000_000_000_000

_PREDEFINED = {
    "@yearly": "0 0 0 1 1 *",
    "@annually": "0 0 0 1 1 *",
    "@monthly": "0 0 0 1 * *",
    "@weekly": "0 0 0 * * 0",
    "@daily": "0 0 0 * * *",
    "@hourly": "0 0 * * * *",
    "@minutely": "0 * * * * *",
    "@secondly": "* * * * * *",
    "@weekdays": "0 0 0 * * 1-5",
    "@weekends": "0 0 0 * * 0,6",
}
_MONTH_NAMES = {
    m: i + 1
    for i, m in enumerate(
        ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
    )
}
_DAY_NAMES = {d: i for i, d in enumerate(["sun", "mon", "tue", "wed", "thu", "fri", "sat"])}
_ALLOWED_TEXT = re.compile(r"[\x20-\x7e\t\n\v\f\r]*")
_BLANKS = " \t\n\v\f\r"
_SPLIT = re.compile(r"[ \t\n\v\f\r]+")
_NAME = re.compile(r"[a-zA-Z]{3}")
_DIGITS = re.compile(r"[0-9]+")
_LAST_TOKEN = re.compile(r"[0-9]{0,2}L")


class _Field:
    """Bounds, extra characters and name aliases of one cron field."""

    __slots__ = ("chars", "hi", "last", "lo", "name", "names")

    def __init__(
        self, name: str, lo: int, hi: int, last: bool, names: dict[str, int] | None = None
    ) -> None:
        self.name, self.lo, self.hi, self.last, self.names = name, lo, hi, last, names
        self.chars = re.compile(r"[?,*0-9/L-]+" if last else r"[?,*0-9/-]+")


_SECOND = _Field("second", 0, 59, False)
_MINUTE = _Field("minute", 0, 59, False)
_HOUR_F = _Field("hour", 0, 23, False)
_DOM = _Field("day of month", 1, 31, True)
_MONTH = _Field("month", 1, 12, False, _MONTH_NAMES)
_DOW = _Field("day of week", 0, 7, True, _DAY_NAMES)


# ---------------------------------------------------------------------------- parsing ---


class _Spec:
    """A parsed expression: the value sets cron-parser builds, and its day-matching flags."""

    __slots__ = (
        "dom",
        "dom_last",
        "dom_wild",
        "dow",
        "dow_last",
        "dow_last_days",
        "dow_nth",
        "dow_wild",
        "hours",
        "hours_full",
        "minutes",
        "months",
        "never",
        "seconds",
    )

    seconds: tuple[int, ...]
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    hours_full: bool
    months: frozenset[int]
    dom: frozenset[int]
    dom_last: bool
    dom_wild: bool
    dow: frozenset[int]
    dow_last: bool
    dow_last_days: frozenset[int]
    dow_nth: int
    dow_wild: bool
    never: bool


#: What a cron pattern is, told by every refusal of something that is not one at all (and by
#: the CLI's ``--cron`` help).
FORMS = (
    "5 fields (minute hour day-of-month month day-of-week) or 6 with seconds first, e.g. "
    "'0 12 * * *' for every day at noon, or a shortcut such as @daily"
)
_FIELD_NAMES = ("second", "minute", "hour", "day of month", "month", "day of week")


def _refuse(pattern: str, why: str, *, forms: bool = False) -> InvalidOptionError:
    """The refusal of ``pattern``; with fewer than 5 fields it says how they were read (the
    leading fields are left out), and with ``forms`` what a cron pattern is."""
    count = len(_SPLIT.split(pattern.strip(_BLANKS))) if pattern.strip(_BLANKS) else 0
    if 0 < count < 5 and pattern not in _PREDEFINED:
        fields = "its one field is" if count == 1 else f"its {count} fields are"
        why += f" ({fields} read as: {', '.join(_FIELD_NAMES[6 - count :])})"
    if forms:
        why += f"; a cron pattern is {FORMS}"
    return InvalidOptionError(f"cron pattern {pattern!r}: {why}")


def _js_int(text: str) -> int | None:
    """JavaScript ``parseInt(text, 10)`` on the characters a field can hold (None for NaN)."""
    match = _DIGITS.match(text)
    return int(match.group()) if match else None


def _range(field: _Field, text: str, step: int | None, pattern: str) -> list[int | str] | int | str:
    parts = text.split("-")
    if len(parts) == 1:
        return int(text) if _DIGITS.fullmatch(text) else text
    lo, hi = _js_int(parts[0]), _js_int(parts[1])
    if lo is None or hi is None or lo < field.lo or hi > field.hi:
        raise _refuse(pattern, f"{field.name} range {text!r} is outside {field.lo}-{field.hi}")
    if lo > hi:
        raise _refuse(pattern, f"{field.name} range {text!r} is reversed")
    if step is None or step <= 0:
        raise _refuse(pattern, f"{field.name} step must be a positive number")
    out: list[int | str] = []
    if field is _DOW and hi % 7 == 0 and (hi - lo) % step == 0:
        out.append(0)
    out.extend(v for v in range(lo, hi + 1, step) if v not in out)
    return out


def _field_values(field: _Field, text: str, pattern: str) -> list[int | str]:
    written = text.split(",")  # the list items as written, for messages
    names = field.names
    if names is not None:

        def alias(match: re.Match[str]) -> str:
            name = match.group()
            value = names.get(name.lower())
            if value is not None:
                return str(value)
            if name.lower() in _MONTH_NAMES or name.lower() in _DAY_NAMES:
                kind, own = ("day", "month") if field is _MONTH else ("month", "day")
                raise _refuse(
                    pattern, f"{name!r} is a {kind} name; the {field.name} takes {own} names only"
                )
            raise _refuse(pattern, f"unknown name {name!r} in the {field.name}", forms=True)

        text = _NAME.sub(alias, text)
    if "H" in text:
        raise _refuse(pattern, "hashed values (H) are not supported: BullMQ draws them at random")
    if not field.chars.fullmatch(text):
        raise _refuse(pattern, f"invalid characters in the {field.name} field {text!r}", forms=True)
    text = re.sub(r"[*?]", f"{field.lo}-{field.hi}", text)
    values: list[int | str] = []
    for atom, as_written in zip(text.split(","), written):
        if not atom:
            raise _refuse(pattern, f"empty list item in the {field.name}")
        pieces = atom.split("/")
        if len(pieces) > 2:
            raise _refuse(pattern, f"invalid step {atom!r} in the {field.name}")
        if pieces[0].count("-") > 1:  # a range has two ends; '*' and '?' are one already
            written_range = as_written.split("/")[0]
            hint = (
                f" ('*' and '?' already are the range {field.lo}-{field.hi})"
                if re.search(r"[*?]", written_range)
                else ""
            )
            raise _refuse(
                pattern, f"{field.name} range {written_range!r} has more than two ends{hint}"
            )
        if len(pieces) == 2:
            left = pieces[0] if "-" in pieces[0] else f"{pieces[0]}-{field.hi}"
            result = _range(field, left, _js_int(pieces[1]), pattern)
        else:
            result = _range(field, atom, 1, pattern)
        if isinstance(result, list):
            values.extend(result)
        elif isinstance(result, str) and field.last and "L" in result:
            values.append(result)
        else:
            number = result if isinstance(result, int) else _js_int(result)
            if number is None or not field.lo <= number <= field.hi:
                raise _refuse(
                    pattern, f"{field.name} value {result!r} is outside {field.lo}-{field.hi}"
                )
            values.append(number % 7 if field is _DOW else number)
    for value in values:
        if isinstance(value, str) and not _LAST_TOKEN.fullmatch(value):
            raise _refuse(pattern, f"invalid {field.name} value {value!r}")
    if len(set(values)) != len(values):
        raise _refuse(pattern, f"duplicate values in the {field.name}")
    if field is _DOW and "L" in values:
        raise _refuse(pattern, "a bare L is not allowed in the day of week (use e.g. 5L)")
    return values


def _nth(raw_dow: str, pattern: str) -> tuple[str, int]:
    parts = raw_dow.split("#")
    if len(parts) == 1:
        return raw_dow, 0
    if re.search(r"[,\-/]", raw_dow) or len(parts) > 2:
        raise _refuse(pattern, "'#' cannot be combined with lists, ranges or steps")
    if not _DIGITS.fullmatch(parts[1]):
        raise _refuse(pattern, "the occurrence after '#' must be a number from 1 to 5")
    nth = int(parts[1])
    if not 1 <= nth <= 5:
        raise _refuse(pattern, "the occurrence after '#' must be a number from 1 to 5")
    return parts[0], nth


def _numbers(values: list[int | str]) -> list[int]:
    return sorted(v for v in values if isinstance(v, int))


def _parse(pattern: str) -> _Spec:
    if not isinstance(pattern, str) or not pattern:
        raise InvalidOptionError(
            f"cron pattern must be a non-empty string, got {pattern!r}; a cron pattern is {FORMS}"
        )
    return _parse_text(pattern)


@lru_cache(maxsize=512)
def _parse_text(pattern: str) -> _Spec:
    if not _ALLOWED_TEXT.fullmatch(pattern):
        raise _refuse(pattern, "only printable ASCII characters are supported")
    expression = _PREDEFINED.get(pattern, pattern)
    if len(expression) > 1024:
        raise _refuse(pattern, "longer than 1024 characters")
    atoms = _SPLIT.split(expression.strip(_BLANKS))
    if len(atoms) > 6:
        raise _refuse(pattern, f"{len(atoms)} fields: more than 6 fields", forms=True)
    atoms = ["0", "*", "*", "*", "*", "*"][: 6 - len(atoms)] + atoms
    raw_sec, raw_min, raw_hour, raw_dom, raw_month, raw_dow = atoms

    spec = _Spec()
    spec.seconds = tuple(_numbers(_field_values(_SECOND, raw_sec, pattern)))
    spec.minutes = tuple(_numbers(_field_values(_MINUTE, raw_min, pattern)))
    hours = _numbers(_field_values(_HOUR_F, raw_hour, pattern))
    spec.hours, spec.hours_full = tuple(hours), len(hours) == 24
    months = _numbers(_field_values(_MONTH, raw_month, pattern))
    dom_values = _field_values(_DOM, raw_dom, pattern)
    dow_text, spec.dow_nth = _nth(raw_dow, pattern)
    dow_values = _field_values(_DOW, dow_text, pattern)

    spec.months = frozenset(months)
    spec.dom = frozenset(_numbers(dom_values))
    spec.dom_last = "L" in raw_dom
    spec.dom_wild = raw_dom in ("*", "?")
    spec.dow = frozenset(_numbers(dow_values))
    spec.dow_last = "L" in raw_dow
    spec.dow_last_days = frozenset(int(str(v)[0]) % 7 for v in dow_values)
    spec.dow_wild = raw_dow in ("*", "?")
    # A day of month no chosen month has, with the day of week unrestricted, never matches:
    # cron-parser refuses it for a single month and runs out of steps otherwise.
    unreachable = all(d > max(_MONTH_DAYS[m - 1] for m in months) for d in spec.dom)
    if unreachable and not spec.dom_last and spec.dow_wild:
        if len(months) == 1:
            raise _refuse(pattern, "the day of month never occurs in that month")
        spec.never = True
    else:
        spec.never = False
    return spec


# ------------------------------------------------------------------------------ zones ---


class _Zone:
    """UTC offsets (seconds) of instants (whole seconds) in one zone."""

    __slots__ = ("_cache", "_fixed", "_zone")

    def __init__(self, zone: ZoneInfo | None, fixed: int | None = None) -> None:
        self._zone = zone
        self._fixed = fixed
        self._cache: dict[int, int] = {}

    def offset(self, sec: int) -> int:
        if self._fixed is not None:
            return self._fixed
        if self._zone is None:  # the process's zone: not cached, TZ may be changed (tzset)
            return time.localtime(sec).tm_gmtoff
        known = self._cache.get(sec)
        if known is not None:
            return known
        delta = datetime.fromtimestamp(sec, self._zone).utcoffset()
        assert delta is not None
        found = delta.days * 86400 + delta.seconds
        if len(self._cache) >= 4096:
            self._cache.clear()
        self._cache[sec] = found
        return found


#: Zones that are one fixed offset by definition (UTC and the Etc/GMT±n family).
_FIXED = re.compile(r"(Etc/)?(UTC|UCT|GMT|GMT0|GMT[+-][0-9]{1,2}|Zulu|Universal|Greenwich)")


#: Listed by the Python tz database but unknown to Node's (ICU): Node fails on them.
_NOT_ON_NODE = frozenset({"Factory", "localtime", "posixrules"})


@lru_cache(maxsize=1)
def _zone_names() -> frozenset[str]:
    return frozenset(available_timezones())


def _zone(tz: str | None) -> _Zone:
    if tz is not None and (
        not isinstance(tz, str) or tz not in _zone_names() or tz in _NOT_ON_NODE
    ):
        raise InvalidOptionError(
            f"tz must be an IANA time zone name such as 'Europe/London' or 'UTC', got {tz!r}"
        )
    return _known_zone(tz)


@lru_cache(maxsize=256)
def _known_zone(tz: str | None) -> _Zone:
    if tz is None:
        return _Zone(None)
    info = ZoneInfo(tz)
    if _FIXED.fullmatch(tz):
        delta = datetime.fromtimestamp(0, info).utcoffset()
        assert delta is not None
        return _Zone(info, delta.days * 86400 + delta.seconds)
    return _Zone(info)


# ----------------------------------------------------------------------------- cursor ---


def _local_ms(y: int, mo: int, d: int, h: int, mi: int, s: int, ms: int) -> int:
    """Milliseconds of a wall-clock time read as UTC; month and day may overflow."""
    y, mo = y + (mo - 1) // 12, (mo - 1) % 12 + 1
    days = date(y, mo, 1).toordinal() - _EPOCH_ORDINAL + d - 1
    return days * _DAY + h * _HOUR + mi * _MIN + s * _SEC + ms


def _days_in_month(y: int, mo: int) -> int:
    if mo == 2:
        return 29 if (y % 4 == 0 and y % 100 != 0) or y % 400 == 0 else 28
    return _MONTH_DAYS[mo - 1]


class _Cursor:
    """A moving instant with its wall-clock fields in one zone (a luxon DateTime, in effect),
    plus the daylight-saving marks the search leaves on it."""

    __slots__ = (
        "d",
        "dst_end",
        "dst_landing",
        "dst_start",
        "h",
        "hours_full",
        "mi",
        "midnight",
        "mo",
        "ms",
        "off",
        "s",
        "ts",
        "wd",
        "y",
        "zone",
    )

    def __init__(self, zone: _Zone, ts: int, hours_full: bool) -> None:
        self.zone = zone
        self.hours_full = hours_full
        self.dst_start: int | None = None
        self.dst_landing: int | None = None
        self.dst_end: int | None = None
        self.move(ts, zone.offset(ts // _SEC))

    def move(self, ts: int, off: int) -> None:
        """Go to instant ``ts``, whose UTC offset is ``off``."""
        self.ts, self.off = ts, off
        days, rest = divmod(ts + off * _SEC, _DAY)
        self.midnight = days * _DAY
        day = date.fromordinal(days + _EPOCH_ORDINAL)
        self.y, self.mo, self.d, self.wd = day.year, day.month, day.day, (days + 4) % 7
        self.h, rest = divmod(rest, _HOUR)
        self.mi, rest = divmod(rest, _MIN)
        self.s, self.ms = divmod(rest, _SEC)

    def go_wall(self, local: int) -> None:
        """Go to a wall-clock time, trying the current offset first (luxon's rule): a missing
        time moves on by the gap, a repeated one keeps the current offset if it can."""
        offset = self.zone.offset
        guess = self.off
        utc = local - guess * _SEC
        o2 = offset(utc // _SEC)
        if o2 == guess:
            self.move(utc, o2)
            return
        utc -= (o2 - guess) * _SEC
        o3 = offset(utc // _SEC)
        if o2 == o3:
            self.move(utc, o3)
            return
        utc = local - min(o2, o3) * _SEC
        self.move(utc, offset(utc // _SEC))

    def set_time(self, h: int, mi: int, s: int, ms: int) -> None:
        """Set the wall-clock time of day, keeping the date."""
        self.go_wall(self.midnight + h * _HOUR + mi * _MIN + s * _SEC + ms)

    def next_month(self) -> None:
        y, mo = (self.y + 1, 1) if self.mo == 12 else (self.y, self.mo + 1)
        day = min(self.d, _days_in_month(y, mo))
        self.go_wall(_local_ms(y, mo, day, self.h, self.mi, self.s, self.ms))
        self.go_wall(_local_ms(self.y, self.mo, 1, 0, 0, 0, 0))

    def next_day(self) -> None:
        self.go_wall(self.ts + self.off * _SEC + _DAY)
        self.set_time(0, 0, 0, 0)

    def plus(self, millis: int) -> None:
        ts = self.ts + millis
        self.move(ts, self.zone.offset(ts // _SEC))

    def advance(self, unit: int) -> None:
        """Add an hour, minute or second, truncate, and note a DST jump or repeat."""
        hour, off = self.h, self.off
        self.plus(unit)
        if unit == _HOUR:
            self.set_time(self.h, 0, 0, 0)
        elif unit == _MIN:
            self.set_time(self.h, self.mi, 0, 0)
        crossed = (self.h - hour) % 24
        if self.off > off and crossed >= 2:
            if not self.hours_full:
                self.dst_start, self.dst_landing = (hour + 1) % 24, self.h
        elif crossed == 0 and self.mi == 0 and self.s == 0 and not self.hours_full:
            self.dst_end = self.h

    def day_offsets_differ(self) -> bool:
        """Whether the offset at the start of this wall-clock day differs from its end."""
        probe = _Cursor(self.zone, self.ts, True)
        probe.set_time(0, 0, 0, 0)
        first = probe.off
        probe.move(self.ts, self.off)
        probe.next_day()
        return first != self.zone.offset((probe.ts - 1) // _SEC)


# ----------------------------------------------------------------------------- search ---


def _after(values: tuple[int, ...], current: int) -> int | None:
    for value in values:
        if value > current:
            return value
    return None


def _day_matches(spec: _Spec, c: _Cursor) -> bool:
    last_day = _days_in_month(c.y, c.mo)
    dom = c.d in spec.dom or (spec.dom_last and c.d == last_day)
    if not spec.dom_wild and not spec.dow_wild:
        if dom:
            return True
    elif spec.dow_wild:
        return dom
    dow = c.wd in spec.dow and (spec.dow_nth == 0 or (c.d + 6) // 7 == spec.dow_nth)
    if not dow and spec.dow_last:
        dow = c.d > last_day - 7 and c.wd in spec.dow_last_days
    return dow


class _Search:
    """One forward search, as one ``next()`` of a freshly parsed cron-parser expression."""

    __slots__ = ("c", "dst_days", "spec")

    def __init__(self, spec: _Spec, c: _Cursor) -> None:
        self.spec, self.c = spec, c
        self.dst_days: dict[tuple[int, int, int], bool] = {}

    def is_dst_day(self) -> bool:
        c = self.c
        key = (c.y, c.mo, c.d)
        known = self.dst_days.get(key)
        if known is None:
            known = self.dst_days[key] = c.day_offsets_differ()
        return known

    def hour_ready(self) -> bool:
        """True when the cursor's hour may run; else moves the cursor on and returns False."""
        spec, c = self.spec, self.c
        hour = c.h
        if c.dst_start is not None and c.dst_landing == hour:
            skipped = c.dst_start
            while skipped != hour:
                if skipped in spec.hours:
                    return True
                skipped = (skipped + 1) % 24
        if c.dst_end == hour:
            c.dst_end = None
            c.advance(_HOUR)
            return False
        if hour in spec.hours:
            return True
        c.dst_start = c.dst_landing = None
        target = _after(spec.hours, hour)
        if target is None:
            c.next_day()
            return False
        if self.is_dst_day():
            for _ in range(target - hour):
                c.advance(_HOUR)
                if c.h >= target:
                    break
        else:
            c.set_time(target, c.mi, c.s, c.ms)
        c.set_time(c.h, spec.minutes[0], c.s, c.ms)
        c.set_time(c.h, c.mi, spec.seconds[0], c.ms)
        return False

    def run(self, start: int | None, end: int | None) -> int | None:
        spec, c = self.spec, self.c
        origin = c.ts
        if c.ms > 0:
            c.set_time(c.h, c.mi, c.s, 0)
            c.advance(_SEC)
        for _ in range(_LOOP_LIMIT - 1):
            if (start is not None and c.ts < start) or (end is not None and c.ts > end):
                return None
            if c.mo not in spec.months:
                c.next_month()
            elif not _day_matches(spec, c):
                c.next_day()
            elif not self.hour_ready():
                pass
            elif c.mi not in spec.minutes:
                minute = _after(spec.minutes, c.mi)
                if minute is None:
                    c.advance(_HOUR)
                    minute = spec.minutes[0]
                c.set_time(c.h, minute, c.s, c.ms)
                c.set_time(c.h, c.mi, spec.seconds[0], c.ms)
            elif c.s not in spec.seconds:
                second = _after(spec.seconds, c.s)
                if second is None:
                    c.advance(_MIN)
                    second = spec.seconds[0]
                c.set_time(c.h, c.mi, second, c.ms)
            elif c.ts == origin:
                c.advance(_SEC)
            else:
                return c.ts
        return None


# --------------------------------------------------------------------------------- API ---


def validate_cron(pattern: str, tz: str | None) -> None:
    """Check a cron pattern and time zone before a scheduler is written.

    Args:
        pattern: the cron expression (5 fields, or 6 with seconds first, or a ``@`` name).
        tz: an IANA time zone name, or None for the local zone of the process.

    Raises:
        InvalidOptionError: the pattern is malformed, uses a feature echomq does not evaluate
            exactly as BullMQ (see the module docstring), can never run (a day of month none
            of its months has; BullMQ would silently write nothing), or ``tz`` is unknown.
    """
    if _parse(pattern).never:
        raise _refuse(pattern, "it never runs: none of its months has that day of month")
    _zone(tz)


def next_cron_ms(
    pattern: str,
    after_ms: int,
    tz: str | None,
    *,
    start_ms: int | None = None,
    end_ms: int | None = None,
) -> int | None:
    """The next iteration time of a cron scheduler, as BullMQ 6.7 computes it.

    This is BullMQ's default repeat strategy: cron-parser's ``next()`` from
    ``max(start_ms, after_ms)`` (strictly later, whole seconds), in ``tz``, bounded by
    ``start_ms``/``end_ms``; a result before ``after_ms`` is raised to ``after_ms``.
    ``immediately`` is the caller's business (the first iteration then runs at once).

    Args:
        pattern: the cron expression.
        after_ms: BullMQ's "now": ``max(now, prevMillis)`` of the iteration being continued.
        tz: IANA time zone name, or None for the local zone of the process.
        start_ms: the scheduler's ``startDate`` (ms), if any.
        end_ms: the scheduler's ``endDate`` (ms), if any.

    Returns:
        Epoch milliseconds of the next iteration, or None when there is none (past
        ``end_ms``, or a pattern that never matches).

    Raises:
        InvalidOptionError: as :func:`validate_cron`, or ``after_ms`` out of range.
    """
    spec = _parse(pattern)
    zone = _zone(tz)
    if isinstance(after_ms, bool) or not isinstance(after_ms, int) or not 0 <= after_ms < _MAX_MS:
        raise InvalidOptionError(f"after_ms must be epoch milliseconds, got {after_ms!r}")
    start = start_ms or None
    end = end_ms or None
    current = after_ms if start is None or start <= after_ms else start
    if end is not None and current > end:
        current = end
    if spec.never:
        return None
    found = _Search(spec, _Cursor(zone, current, spec.hours_full)).run(start, end)
    if found is None:
        return None
    return max(found, after_ms)
