"""echomq._cron against the real BullMQ 6.7.6 for Node (cron-parser 5.10.4), differentially.

Every question goes to Node in ONE run of tests/interop/node/cron_oracle.mjs (a module fixture
collects the batches of all tests first), which calls BullMQ's own default repeat strategy.
A case is (pattern, tz, after, startDate, endDate, n): the next n iterations, each computed
from the previous one as a worker continuing the scheduler would. Any difference fails with the
case shown. Node runs with TZ=America/New_York so that tz=None (the process's zone) is tested
too; the Python side sets the same TZ for those cases.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, available_timezones

import pytest
from redis import Redis as SyncRedis

from echomq._cron import next_cron_ms, validate_cron
from echomq.errors import InvalidOptionError

INTEROP = Path(__file__).resolve().parent / "interop"
if str(INTEROP) not in sys.path:
    sys.path.insert(0, str(INTEROP))

import nodepeer  # noqa: E402

ORACLE = INTEROP / "node" / "cron_oracle.mjs"
LOCAL_TZ = "America/New_York"
SEED = 20260307

pytestmark = pytest.mark.timeout(300)  # the first test waits for the one Node run

Case = tuple[str, int, str | None, int | None, int | None, int]
Outcome = tuple[str, Any]
Marks = dict[str, list[int]]

#: Zones with daylight saving that exercise different shapes of transition: the two required
#: ones, the southern hemisphere, a 30-minute shift, transitions at midnight, odd offsets.
DST_ZONES = [
    "Europe/London",
    "America/New_York",
    "Europe/Berlin",
    "Australia/Sydney",
    "Australia/Lord_Howe",
    "America/Santiago",
    "America/Havana",
    "Pacific/Chatham",
    "America/St_Johns",
    "Asia/Beirut",
]
FLAT_ZONES = ["UTC", "Asia/Kolkata", "Asia/Kathmandu", "Asia/Tokyo", "Etc/GMT+5"]
RANDOM_ZONES: list[str | None] = [*DST_ZONES, *FLAT_ZONES]

#: Times of day, where daylight saving matters: every DST zone and change gets them all.
TIME_PATTERNS = [
    "* * * * *",
    "*/15 * * * *",
    "0 * * * *",
    "30 * * * *",
    "0 0 * * *",
    "0 1 * * *",
    "30 1 * * *",
    "0 2 * * *",
    "30 2 * * *",
    "59 2 * * *",
    "0 3 * * *",
    "*/15 2 * * *",
    "*/20 1 * * *",
    "0 1,2 * * *",
    "30 0,1,2,3 * * *",
    "15 0 * * *",
    "0 23 * * *",
    "0 22-23,0-2 * * *",
    "*/7 1-3 * * *",
    "0 0-23/5 * * *",
    "5-50/15 * * * *",
    "*/10 * * * * *",
    "0 */7 * * * *",
    "59 59 23 * * *",
    "30 30 1 * * *",
    "0 30 2 * * *",
    "* 30 2 * * *",
    "*/20 * 2 * * *",
    "0 0,30 1-3 * * *",
    "@daily",
    "@hourly",
    "@minutely",
    "@secondly",
    "0 9 * * MON-FRI",
    "45 23 * * SAT",
    "0 0 * * 0",
]

#: Days, weeks, months, names, L and #: zones without DST and a few instants in London and
#: New York (cron-parser steps day by day through them, which is slow on Node).
DAY_PATTERNS = [
    "0 0 * * 7",
    "0 0 * * 5-7",
    "0 0 * * 1-5/2",
    "0 0 1 * *",
    "0 0 L * *",
    "0 0 * * 5L",
    "0 0 * * 0L,3",
    "0 0 * * 0#1",
    "0 0 * * SUN#2",
    "0 0 * * 1#5",
    "0 0 31 * *",
    "0 0 29,30,31 * *",
    "0 0 1,15 * 1",
    "0 0 L * 5",
    "0 0 15 * 5#3",
    "0 0 ? * MON",
    "0 0 1-31 * MON",
    "0 0 * * ?",
    "0 0 * JAN,JUL *",
    "0 0 1 */3 *",
    "0 0 1 feb-apr *",
    "@weekly",
    "@monthly",
    "@yearly",
    "@annually",
    "@weekdays",
    "@weekends",
]

HAND_PATTERNS = TIME_PATTERNS + DAY_PATTERNS

#: Patterns that run rarely or never: cron-parser needs thousands of steps (and Node up to
#: seconds) for them, so they get a few cases only.
RARE_PATTERNS = ["0 0 * 2 1#5", "0 12 29 2 *", "0 0 29 2 1", "0 12 L 2 *", "0 0 31 2,4 *"]

#: Refused by both (malformed for cron-parser too).
MALFORMED = [
    "0 0 30 2 *",
    "0 0 31 4 *",
    "* * * * * * *",
    "60 * * * *",
    "* 24 * * *",
    "* * 0 * *",
    "* * 32 * *",
    "* * * 13 *",
    "* * * 0 *",
    "* * * * 8",
    "5-1 * * * *",
    "*/0 * * * *",
    "*/ * * * *",
    "/5 * * * *",
    "1,,2 * * * *",
    "1,1 * * * *",
    "0 0 * * 0,7",
    "* * * * L",
    "* * * * 1#6",
    "* * * * 1#0",
    "* * * * 1-2#2",
    "* * * * 1#2#3",
    "* * W * *",
    "* * 15W * *",
    "* * LW * *",
    "* * L-2 * *",
    "* * L5 * *",
    "* * 123L * *",
    "* * * FOO *",
    "* * * * MONDAY",
    "* * * JANUARY *",
    # cron-parser 5.10.4 resolves month names in the month field only, day names in the day of
    # week only (5.10.3 took either in both).
    "0 0 * MON *",
    "0 0 * Sun *",
    "0 0 * * jan",
    "0 0 * * JUL#2",
    "0 0 L * DEC",
    "0 0 * * monjan",
    # ... and refuses ranges of more than two parts ('*' and '?' are a range already).
    "1-2-3 * * * *",
    "*-5 * * * *",
    "1-5? * * * *",
    "?-? * * * *",
    "1-2- * * * *",
    "1-2-3/5 * * * *",
    "*-5/2 * * * *",
    "1-2,3-4-5 * * * *",
    "0 0 * JAN-FEB-MAR *",
    "0 0 1-2-3L * *",
    "0 0 * * 5L-7-9",
    "* * * * * ?-",
    "x- * * * *",
    "a * * * *",
    "*5 * * * *",
    "1-2/3/4 * * * *",
    "   ",
    "@reboot",
    "@DAILY",
    "0 0 1 1 * 2026",
    "0 0 31 2 L",
]

#: Accepted by cron-parser but refused by echomq (see the _cron module docstring).
REFUSED_ACCEPTED = [
    "H * * * *",
    "H(0-29)/10 * * * *",
    "0 H * * *",
    "0 0 * * 5#2.0",
    "0 0 * * 5#0x2",
    "0 0 * * 5#1.5",
    "0\u00a00 * * *",
]

#: Odd spellings cron-parser accepts and echomq evaluates identically.
ODD_ACCEPTED = [
    "0 9 * *",
    "5",
    "0 0 * JANFEB *",
    "0 0 * jan-Mar *",
    "0 0 * * Mon,tue",
    "*/5-3 * * * *",
    "1-2/3-4 * * * *",
    "0 0 5L-10 * *",
    "0 0 99L * *",
    "0 0 * * 12L",
    "0 0 * * 5L#2",
    "0 0 * * ?#3",
    "0 0 L,15 * *",
    "0 0 1-10/3L * *",
    "\t0  0 * * *\n",
    "0 0 29 2 *",
    "0 0 28,31 2 *",
    "0 0 30 2 1",
    "0 0 * 2 SUN#5",
]


# ------------------------------------------------------------------------- helpers ---


def epoch_s(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> int:
    return int(datetime(year, month, day, hour, minute, second, tzinfo=timezone.utc).timestamp())


def epoch_ms(*args: int) -> int:
    return epoch_s(*args) * 1000


def transitions(tz: str, years: range) -> list[int]:
    """Instants (ms) where the zone's UTC offset changes."""
    zone = ZoneInfo(tz)

    def offset(sec: int) -> Any:
        return datetime.fromtimestamp(sec, zone).utcoffset()

    found = []
    start, stop = epoch_s(years.start, 1, 1), epoch_s(years.stop, 1, 1)
    for day in range(start, stop, 86400):
        if offset(day) != offset(day + 86400):
            lo, hi = day, day + 86400
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (mid, hi) if offset(mid) == offset(lo) else (lo, mid)
            found.append(hi * 1000)
    return found


AROUND = [
    -26 * 3600_000,
    -3 * 3600_000,
    -3600_001,
    -3600_000,
    -1800_000,
    -1000,
    -1,
    0,
    1,
    999,
    1800_000,
    3600_000,
    7200_000,
    22 * 3600_000,
]


class Batch:
    """The cases of all tests, asked from Node once."""

    def __init__(self) -> None:
        self.cases: list[Case] = []
        self._answers: list[dict[str, Any]] | None = None

    def add(self, case: Case) -> int:
        assert self._answers is None
        self.cases.append(case)
        return len(self.cases) - 1

    def answer(self, index: int) -> Outcome:
        if self._answers is None:
            self._answers = ask_node(self.cases)
        got = self._answers[index]
        return ("error", None) if "error" in got else ("next", got["next"])


def ask_node(cases: list[Case]) -> list[dict[str, Any]]:
    nodepeer.require_node_modules()
    binary = nodepeer.node_binary()
    assert binary is not None and nodepeer.node_available(), "node >= 20 is required"
    env = {**os.environ, "TZ": LOCAL_TZ}
    proc = subprocess.run(
        [binary, str(ORACLE)],
        input=json.dumps({"cases": cases}),
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    answers: list[dict[str, Any]] = json.loads(proc.stdout)["answers"]
    assert len(answers) == len(cases)
    return answers


def python_outcome(case: Case) -> Outcome:
    pattern, after, tz, start, end, n = case
    results: list[int | None] = []
    now = after
    try:
        for _ in range(n):
            nxt = next_cron_ms(pattern, now, tz, start_ms=start, end_ms=end)
            results.append(nxt)
            if nxt is None:
                break
            now = nxt
    except InvalidOptionError:
        return ("error", None)
    return ("next", results)


def show(value: int | None) -> str:
    if value is None:
        return "None"
    return datetime.fromtimestamp(value / 1000, timezone.utc).isoformat(timespec="milliseconds")


def compare(batch: Batch, indices: list[int]) -> list[str]:
    """Descriptions of every case where Python and Node disagree."""
    bad = []
    for index in indices:
        case = batch.cases[index]
        py, js = python_outcome(case), batch.answer(index)
        if py != js:
            got = [show(v) for v in py[1]] if py[0] == "next" else "error"
            want = [show(v) for v in js[1]] if js[0] == "next" else "error"
            bad.append(f"{case!r} (after {show(case[1])}): python {got} != node {want}")
    return bad


@pytest.fixture
def local_tz() -> Iterator[None]:
    """The process's zone is LOCAL_TZ, as Node's is, while tz=None cases are evaluated."""
    saved = os.environ.get("TZ")
    os.environ["TZ"] = LOCAL_TZ
    time.tzset()
    try:
        yield
    finally:
        if saved is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = saved
        time.tzset()


# -------------------------------------------------------------------- case building ---


def random_field(rng: random.Random, lo: int, hi: int, names: list[str] | None) -> str:
    def value() -> str:
        if names and rng.random() < 0.3:
            return rng.choice(names)
        return str(rng.randint(lo, hi))

    kind = rng.random()
    if kind < 0.3:
        return "*"
    if kind < 0.4:
        return value()
    if kind < 0.55:
        picks = sorted(rng.sample(range(lo, hi + 1), k=min(hi - lo + 1, rng.randint(2, 4))))
        return ",".join(str(v) for v in picks)
    if kind < 0.7:
        a = rng.randint(lo, hi)
        return f"{a}-{rng.randint(a, hi)}"
    if kind < 0.8:
        return f"*/{rng.randint(1, max(1, (hi - lo) // 2))}"
    if kind < 0.9:
        a = rng.randint(lo, hi)
        b = rng.randint(a, hi)
        return f"{a}-{b}/{rng.randint(1, max(1, b - a + 1))}"
    a = rng.randint(lo, hi)
    return f"{a}/{rng.randint(1, max(1, hi - a + 1))}"


MONTHS = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
DAYS = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]


def random_pattern(rng: random.Random) -> str:
    second = random_field(rng, 0, 59, None)
    minute = random_field(rng, 0, 59, None)
    hour = random_field(rng, 0, 23, None)
    # A restricted month only with days every month has, and no 5th weekday: patterns that
    # run once in years (or never) cost Node up to seconds each; RARE_PATTERNS covers them.
    month = random_field(rng, 1, 12, MONTHS) if rng.random() < 0.4 else "*"
    top = 31 if month == "*" else 28
    dom = "*"
    roll = rng.random()
    if roll < 0.25:
        dom = random_field(rng, 1, top, None)
    elif roll < 0.32:
        dom = rng.choice(
            ["L", "L,15", "1,L", "?"] + (["29", "30", "31", "28-31"] if top == 31 else [])
        )
    dow = "*"
    roll = rng.random()
    if roll < 0.25:
        dow = random_field(rng, 0, 7, DAYS)
    elif roll < 0.4:
        dow = rng.choice(
            [
                f"{rng.randint(0, 7)}L",
                f"{rng.randint(0, 7)}#{rng.randint(1, 4 if month != '*' else 5)}",
                f"{rng.choice(DAYS)}#{rng.randint(1, 4 if month != '*' else 5)}",
                "MON-FRI",
                "SAT,SUN",
                "?",
            ]
        )
    fields = [minute, hour, dom, month, dow]
    if rng.random() < 0.35:
        fields.insert(0, second)
    elif rng.random() < 0.5:
        fields[0] = str(rng.randint(0, 59))  # minute-level patterns that run rarely
    return " ".join(fields)


def random_instant(rng: random.Random, tz: str | None, marks: Marks) -> int:
    zone_marks = marks.get(tz or LOCAL_TZ, [])
    if zone_marks and rng.random() < 0.6:
        base = rng.choice(zone_marks) + rng.randint(-48 * 3600, 48 * 3600) * 1000
        return base + rng.choice([0, 0, rng.randint(0, 999)])
    return rng.randint(epoch_ms(2000, 1, 1), epoch_ms(2060, 1, 1)) + rng.choice([0, 1, 500])


FUZZ_TOKENS = [
    "*",
    "?",
    "-",
    "/",
    ",",
    "L",
    "#",
    "W",
    "0",
    "1",
    "2",
    "5",
    "7",
    "12",
    "15",
    "29",
    "31",
    "59",
    "60",
    "MON",
    "jan",
    "Sun",
    "FOO",
    "5L",
    "1#2",
    "*/5",
    "1-5",
]


def fuzz_pattern(rng: random.Random) -> str:
    """Mostly broken expressions: the two parsers must refuse and accept the same ones."""
    fields = ["*"] * rng.choice([5, 5, 6, 4, 7])
    for i in rng.sample(range(len(fields)), k=rng.choice([1, 1, 2])):
        fields[i] = "".join(rng.choice(FUZZ_TOKENS) for _ in range(rng.randint(1, 3)))
    return " ".join(fields)


@pytest.fixture(scope="module")
def batch() -> Batch:
    return Batch()


@pytest.fixture(scope="module")
def marks() -> Marks:
    zones = [*DST_ZONES, LOCAL_TZ]
    return {tz: transitions(tz, range(2025, 2027)) for tz in zones}


def dst_cases(rng: random.Random, marks: Marks) -> Iterator[Case]:
    """Times of day on both sides of each DST change of 2025 and 2026 (chained in the two
    zones the schedulers are documented with)."""
    for tz in DST_ZONES:
        n = 2 if tz in ("Europe/London", "America/New_York") else 1
        for mark in marks[tz]:
            for pattern in TIME_PATTERNS:
                yield (pattern, mark + rng.choice(AROUND), tz, None, None, n)


def flat_cases() -> Iterator[Case]:
    """All patterns without DST around a leap day and a year end; rare patterns; day patterns
    in London and New York around their spring DST change."""
    for tz in ("UTC", "Asia/Kathmandu", "Etc/GMT+5"):
        for pattern in HAND_PATTERNS:
            for at in (epoch_ms(2028, 2, 28, 23, 59, 59), epoch_ms(2027, 12, 31, 12) + 321):
                yield (pattern, at, tz, None, None, 2)
    for tz in ("UTC", "Europe/London", "America/New_York"):
        for pattern in RARE_PATTERNS:
            n = 1 if pattern == RARE_PATTERNS[-1] and tz != "UTC" else 2
            yield (pattern, epoch_ms(2026, 3, 8, 6, 59), tz, None, None, n)
    for tz in ("Europe/London", "America/New_York"):
        for pattern in DAY_PATTERNS:
            for at in (epoch_ms(2026, 3, 8, 6, 59), epoch_ms(2026, 3, 29, 0, 30) + 1):
                yield (pattern, at, tz, None, None, 2)


def random_cases(rng: random.Random, marks: Marks) -> Iterator[Case]:
    """Seeded random patterns, zones and instants (a fifth of them chained 4 times)."""
    for i in range(2000):
        tz = rng.choice(RANDOM_ZONES)
        at = random_instant(rng, tz, marks)
        yield (random_pattern(rng), at, tz, None, None, 4 if i % 5 == 0 else 1)


def local_cases(rng: random.Random, marks: Marks) -> Iterator[Case]:
    """tz=None: the process zone (TZ=America/New_York on both sides)."""
    for mark in marks[LOCAL_TZ]:
        for pattern in TIME_PATTERNS:
            yield (pattern, mark + rng.choice(AROUND), None, None, None, 2)


def zone_cases() -> Iterator[Case]:
    """Every zone the Python tz database lists (known to both, same offsets), both seasons."""
    for tz in sorted(available_timezones()):
        for at in (epoch_ms(2026, 1, 15), epoch_ms(2026, 7, 15)):
            yield ("30 2 * * *", at, tz, None, None, 1)


def fuzz_cases(rng: random.Random) -> Iterator[Case]:
    for _ in range(600):
        yield (fuzz_pattern(rng), epoch_ms(2026, 5, 31, 23, 59, 30), "UTC", None, None, 1)


def bounds_cases(rng: random.Random, marks: Marks) -> Iterator[Case]:
    """startDate / endDate: fixed shapes, then random patterns with random bounds."""
    base = epoch_ms(2026, 3, 7, 12)
    day = 86_400_000
    shapes = [
        (base + 3_600_500, None),
        (None, base + 1500),
        (None, base + 90_000),
        (base - 1, base + 2 * day),
        (None, base - 5),
        (base + 3 * day, base + 4 * day),
        (None, base),
    ]
    for pattern in ("* * * * * *", "*/15 * * * *", "0 0 * * *", "0 2 * * *", "30 2 * * *"):
        for start, end in shapes:
            for tz in ("UTC", "America/New_York"):
                yield (pattern, base, tz, start, end, 3)
    for _ in range(300):
        zone = rng.choice(RANDOM_ZONES)
        at = random_instant(rng, zone, marks)
        start = rng.choice([None, at + rng.randint(-3600_000, 3 * day)])
        end = rng.choice([None, at + rng.randint(-60_000, 5 * day)])
        yield (random_pattern(rng), at, zone, start, end, 3)


@pytest.fixture(scope="module")
def groups(batch: Batch, marks: Marks) -> dict[str, list[int]]:
    """All cases of the module, by group, registered before Node is asked."""
    rng = random.Random(SEED)
    sources: dict[str, Iterator[Case]] = {
        "dst": dst_cases(rng, marks),
        "flat": flat_cases(),
        "random": random_cases(rng, marks),
        "local": local_cases(rng, marks),
        "zones": zone_cases(),
        "fuzz": fuzz_cases(rng),
        "bounds": bounds_cases(rng, marks),
        "invalid": (
            (pattern, epoch_ms(2026, 3, 1), "UTC", None, None, 2)
            for pattern in MALFORMED + REFUSED_ACCEPTED + ODD_ACCEPTED
        ),
    }
    return {name: [batch.add(case) for case in cases] for name, cases in sources.items()}


# --------------------------------------------------------------------------- tests ---


def assert_same(batch: Batch, indices: list[int]) -> None:
    assert indices
    bad = compare(batch, indices)
    assert not bad, f"{len(bad)} of {len(indices)} cases differ from BullMQ:\n" + "\n".join(
        bad[:25]
    )


def test_dst_weekends_match_node(batch: Batch, groups: dict[str, list[int]]) -> None:
    assert_same(batch, groups["dst"])


def test_flat_zones_leap_days_and_month_ends_match_node(
    batch: Batch, groups: dict[str, list[int]]
) -> None:
    assert_same(batch, groups["flat"])


def test_random_patterns_match_node(batch: Batch, groups: dict[str, list[int]]) -> None:
    valid = [i for i in groups["random"] if batch.answer(i)[0] == "next"]
    assert len(valid) > len(groups["random"]) * 0.7  # mostly well-formed, so mostly evaluated
    assert_same(batch, groups["random"])


def test_local_zone_matches_node(
    batch: Batch, groups: dict[str, list[int]], local_tz: None
) -> None:
    assert_same(batch, groups["local"])


def test_every_listed_zone_matches_node(batch: Batch, groups: dict[str, list[int]]) -> None:
    assert_same(batch, groups["zones"])


def test_start_and_end_dates_match_node(batch: Batch, groups: dict[str, list[int]]) -> None:
    assert_same(batch, groups["bounds"])


def test_fuzzed_expressions_accepted_and_refused_as_node(
    batch: Batch, groups: dict[str, list[int]]
) -> None:
    accepted = [i for i in groups["fuzz"] if batch.answer(i)[0] == "next"]
    assert 50 < len(accepted) < len(groups["fuzz"]) - 50  # both kinds are exercised
    assert_same(batch, groups["fuzz"])


def test_expressions_accepted_and_refused_as_node(
    batch: Batch, groups: dict[str, list[int]]
) -> None:
    by_pattern = {batch.cases[i][0]: i for i in groups["invalid"]}
    for pattern in MALFORMED:
        assert batch.answer(by_pattern[pattern])[0] == "error", f"node accepts {pattern!r}"
        with pytest.raises(InvalidOptionError):
            validate_cron(pattern, "UTC")
    for pattern in REFUSED_ACCEPTED:
        assert batch.answer(by_pattern[pattern])[0] == "next", f"node refuses {pattern!r}"
        with pytest.raises(InvalidOptionError):
            validate_cron(pattern, "UTC")
    for pattern in ODD_ACCEPTED:
        validate_cron(pattern, "UTC")
    assert_same(batch, [by_pattern[p] for p in MALFORMED + ODD_ACCEPTED])


def test_case_count(batch: Batch, groups: dict[str, list[int]]) -> None:
    """The module compares thousands of cases (and more iterations)."""
    iterations = sum(batch.cases[i][5] for group in groups.values() for i in group)
    assert len(batch.cases) >= 5000
    assert iterations >= 7500


# ---------------------------------------------------------------- python-only checks ---


@pytest.mark.parametrize("tz", ["Nope/Zone", "", "utc", "local", "europe/london", "UTC+3"])
def test_unknown_zone_refused(tz: str) -> None:
    with pytest.raises(InvalidOptionError, match="tz"):
        validate_cron("* * * * *", tz)
    with pytest.raises(InvalidOptionError):
        next_cron_ms("* * * * *", epoch_ms(2026, 1, 1), tz)


#: Refused patterns and what their message must say.
REFUSALS_SAY_WHY = [
    ("H * * * *", "H"),
    ("0 0 * * 5#2.0", "'#'"),
    ("0 0 30 2 *", "never occurs"),
    ("", "non-empty"),
    ("0 0 * MON *", "'MON' is a day name; the month takes month"),
    ("0 0 * * JUL#2", "'JUL' is a month name; the day of week takes"),
    ("1-2-3/5 * * * *", "minute range '1-2-3' has more than two ends$"),
    ("*-5 * * * *", r"'\*-5' has .* already are the range 0-59"),
    # Not cron at all: the message says how the fields were read and what a pattern is.
    (
        "every day at noon",
        r"invalid characters in the hour field 'every' \(its 4 fields are read as: hour, day of "
        r"month, month, day of week\); a cron pattern is 5 fields \(minute hour day-of-month "
        r"month day-of-week\) or 6 with seconds first, e\.g\. '0 12 \* \* \*' for every day",
    ),
    ("0 0 12 * * * *", r"7 fields: more than 6 fields; a cron pattern is 5 fields"),
    ("0 0 * FOO *", r"unknown name 'FOO' in the month; a cron pattern is 5 fields"),
    ("30 25 * *", r"hour value 30 is outside 0-23 \(its 4 fields are read as: hour, day"),
]


@pytest.mark.parametrize(("pattern", "why"), REFUSALS_SAY_WHY)
def test_refusals_say_why(pattern: str, why: str) -> None:
    with pytest.raises(InvalidOptionError, match=why):
        validate_cron(pattern, None)


def test_a_pattern_that_never_runs_is_refused() -> None:
    # Node accepts this one and writes nothing; echomq refuses it up front (and agrees that
    # there is no next time, see RARE_PATTERNS).
    with pytest.raises(InvalidOptionError, match="never runs"):
        validate_cron("0 0 31 2,4 *", "UTC")
    assert next_cron_ms("0 0 31 2,4 *", epoch_ms(2026, 1, 1), "UTC") is None


def test_known_dst_results() -> None:
    """Hand-checked anchors: the missing 02:30 runs at 03:30 EDT once; 01:30 runs once in
    the repeated hour; an hourly job runs in both repeated hours."""
    spring = epoch_ms(2026, 3, 8, 5)  # 00:00 EST
    assert next_cron_ms("30 2 * * *", spring, "America/New_York") == epoch_ms(2026, 3, 8, 7, 30)
    fall = epoch_ms(2026, 11, 1, 4)  # 00:00 EDT
    first = next_cron_ms("30 1 * * *", fall, "America/New_York")
    assert first == epoch_ms(2026, 11, 1, 5, 30)
    assert next_cron_ms("30 1 * * *", first, "America/New_York") == epoch_ms(2026, 11, 2, 6, 30)
    hourly = next_cron_ms("30 * * * *", first, "America/New_York")
    assert hourly == epoch_ms(2026, 11, 1, 6, 30)


def test_bad_argument_types_refused() -> None:
    with pytest.raises(InvalidOptionError):
        next_cron_ms("* * * * *", -1, None)
    with pytest.raises(InvalidOptionError):
        next_cron_ms("* * * * *", 1.5, None)  # type: ignore[arg-type]
    with pytest.raises(InvalidOptionError):
        validate_cron(["* * * * *"], None)  # type: ignore[arg-type]
    with pytest.raises(InvalidOptionError):
        validate_cron("* * * * *", ["UTC"])  # type: ignore[arg-type]


def test_speed_of_common_patterns() -> None:
    patterns = ["*/5 * * * *", "0 * * * *", "0 9 * * MON-FRI", "*/10 * * * * *", "@daily"]
    at = epoch_ms(2026, 6, 15, 10, 17, 3) + 120
    calls = 0
    began = time.perf_counter()
    for tz in ("UTC", "Europe/London", "America/New_York"):
        for pattern in patterns:
            for k in range(200):
                next_cron_ms(pattern, at + k * 7919, tz)
                calls += 1
    per_call = (time.perf_counter() - began) / calls
    assert per_call < 200e-6, f"{per_call * 1e6:.0f} µs per call"


def test_every_next_matches_bullmq_lua(sync_redis: SyncRedis) -> None:
    """echomq's every-scheduler rule (lua/includes/every_next.lua, which addJobScheduler and
    continueScheduler run) against BullMQ's own Lua (read from node_modules), both run in the
    test Redis on the same 400 random cases: new schedulers (with a start date, a positive,
    zero or negative offset) and ones with a pending iteration, on time or behind."""
    nodepeer.require_node_modules()
    bullmq = (
        nodepeer.NODE_MODULES
        / "bullmq"
        / "dist"
        / "cjs"
        / "commands"
        / "includes"
        / "getJobSchedulerEveryNextMillis.lua"
    ).read_text(encoding="utf-8")
    ours = (resources.files("echomq") / "lua" / "includes" / "every_next.lua").read_text(
        encoding="utf-8"
    )
    arg = (
        "\nlocal function arg(i) if ARGV[i] == '' then return nil end return tonumber(ARGV[i]) end"
    )
    theirs_script = (
        bullmq
        + arg
        + (
            "\nlocal n, o = getJobSchedulerEveryNextMillis(arg(1), tonumber(ARGV[2]),"
            " tonumber(ARGV[3]), arg(4), arg(5))\nreturn {n, o}\n"
        )
    )
    ours_script = (
        ours
        + arg
        + (
            "\nlocal n, o = every_next(arg(1), tonumber(ARGV[2]), tonumber(ARGV[4]),"
            " tonumber(ARGV[3]), arg(5))\nreturn {n, o}\n"
        )
    )
    rng = random.Random(SEED)
    now0 = epoch_ms(2026, 12, 2, 11, 50) + 67
    cases = []
    for _ in range(400):
        every = rng.choice([1, 7, 1000, 60_000, 86_400_000, rng.randint(1, 10_000_000)])
        now = now0 + rng.randint(-(10**9), 10**9)
        prev = rng.choice([None, now - rng.randint(0, 5 * every), now + rng.randint(0, every)])
        offset = rng.choice([0, 0, rng.randint(1, every), -rng.randint(1, every)])
        start = (
            rng.choice([None, None, now + rng.randint(-every, 3 * every)]) if prev is None else None
        )
        cases.append(
            ("" if prev is None else prev, every, now, offset, "" if start is None else start)
        )

    def run(script: str, case: tuple[Any, ...]) -> list[int]:
        return [int(v) for v in sync_redis.eval(script, 0, *case)]

    for case in cases:
        assert run(ours_script, case) == run(theirs_script, case), case
    # The values observed with BullMQ (ADVANCED notes): phase 71, then one interval on.
    assert run(ours_script, ("", 1000, 1_795_943_049_071, 0, "")) == [1_795_943_049_071, 71]
    assert run(ours_script, ("", 10_000, 1_795_943_049_067, 1234, "")) == [
        1_795_943_051_234,
        1234,
    ]
