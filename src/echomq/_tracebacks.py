"""A failed attempt's traceback as text, formatted once: the entry a job's ``stacktrace`` keeps,
and the traceback the final failure's log line shows.

Python's own formatter (``traceback.format_exception``) computes caret anchors on 3.11+,
compiling the source line of every frame, and made a failed attempt cost the worker about twenty
times a successful one. :func:`format_failure` writes the same text without the ``^^^^`` lines:
``Traceback (most recent call last):``, each frame's ``File "...", line N, in name`` with its
source line (from :mod:`linecache`), runs of one recursive frame collapsed as Python does, then
``module.Type: message`` and the exception's notes; a ``__cause__`` or ``__context__`` comes
first, with Python's words between them. Exception groups and syntax errors, whose layout is
Python's own, go to the standard formatter. A frame's two lines are made once per code object
and line and then reused (a source file edited since is not read again: the lines shown are
those of the code that runs).

The frames above the user's processor are left out, as Celery and pytest hide theirs: the
leading frames of echomq's package (the worker calling the processor, a pool child's loop) and
of the standard library's asyncio, concurrent.futures and threading machinery that carries a
sync processor to its thread. A traceback made only of such frames keeps its innermost one,
where the error was raised, unless that frame only handed over an error raised nowhere: a batch
processor's result at a job's position is an exception the processor returned, often never
raised, that the job's task raises from a future (:func:`hands_over` marks such frames). Such
an exception has no traceback of its own, and shows none, as Python shows none for an
exception never raised; the batcher adds a note naming the processor that returned it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import linecache
import os
import sys
import threading
import traceback
from collections.abc import Callable, Mapping, Sequence
from types import CodeType, TracebackType
from typing import Any, TypeVar

_F = TypeVar("_F", bound=Callable[..., Any])

_CAUSE = "\nThe above exception was the direct cause of the following exception:\n\n"
_CONTEXT = "\nDuring handling of the above exception, another exception occurred:\n\n"
_HEADER = "Traceback (most recent call last):\n"
#: As Python's formatter: a frame repeated more often than this is collapsed.
_RECURSIVE_CUTOFF = 3
#: Exceptions whose layout is Python's own (nested groups, the caret of a syntax error).
_OWN_LAYOUT: tuple[type[BaseException], ...] = (SyntaxError,)
if sys.version_info >= (3, 11):
    _OWN_LAYOUT += (BaseExceptionGroup,)  # noqa: F821 (a builtin since 3.11)


def _package_dir(module_file: str | None) -> str:
    return os.path.dirname(os.path.abspath(module_file or "")) + os.sep


#: Where the frames calling the user's processor come from (directories end with a separator).
_MACHINERY = (
    _package_dir(__file__),  # echomq/
    _package_dir(asyncio.__file__),
    _package_dir(concurrent.futures.__file__),
    os.path.abspath(threading.__file__),
)
_ASYNCIO = _MACHINERY[1]
#: Code of the frames that raise an error handed over by a future (see :func:`hands_over`).
_HAND_OVERS: set[CodeType] = set()
_is_machinery: dict[str, bool] = {}  # by code filename, as met
_frame_texts: dict[tuple[CodeType, int], str] = {}  # by code and line, as met
_REMEMBERED = 4096  # entries of each; generated code may bring new ones without end


def _machinery(filename: str) -> bool:
    known = _is_machinery.get(filename)
    if known is None:
        if len(_is_machinery) >= _REMEMBERED:
            _is_machinery.clear()
        known = _is_machinery[filename] = os.path.abspath(filename).startswith(_MACHINERY)
    return known


def hands_over(func: _F) -> _F:
    """Mark ``func`` as raising errors made elsewhere and handed to it by a future (a batch
    job's task raising its result): a traceback that is machinery down to such a frame (and
    the future's own asyncio frames) was raised nowhere, and :func:`format_failure` shows no
    frame of it instead of the hand-over."""
    _HAND_OVERS.add(func.__code__)
    return func


def _user_frames(tb: TracebackType | None) -> TracebackType | None:
    """The first traceback entry that is not machinery; when all are, the innermost, or None
    when the innermost ones only handed the error over (see :func:`hands_over`)."""
    handed = False  # a hand-over frame, and only asyncio's frames after it
    while tb is not None and _machinery(filename := tb.tb_frame.f_code.co_filename):
        if tb.tb_frame.f_code in _HAND_OVERS:
            handed = True
        elif handed and not os.path.abspath(filename).startswith(_ASYNCIO):
            handed = False
        if tb.tb_next is None:
            return None if handed else tb
        tb = tb.tb_next
    return tb


def _frame(tb: TracebackType) -> str:
    """``  File "...", line N, in name`` and the source line, made once per code and line."""
    code = tb.tb_frame.f_code
    key = (code, tb.tb_lineno)
    text = _frame_texts.get(key)
    if text is None:
        if len(_frame_texts) >= _REMEMBERED:
            _frame_texts.clear()
        line = linecache.getline(code.co_filename, tb.tb_lineno, tb.tb_frame.f_globals).strip()
        text = f'  File "{code.co_filename}", line {tb.tb_lineno}, in {code.co_name}\n'
        _frame_texts[key] = text = f"{text}    {line}\n" if line else text
    return text


def _frames(tb: TracebackType | None, out: list[str]) -> None:
    last = ""
    repeated = 0
    while tb is not None:
        text = _frame(tb)
        if text == last:
            repeated += 1
        else:
            if repeated > _RECURSIVE_CUTOFF:
                _repeated(repeated - _RECURSIVE_CUTOFF, out)
            last, repeated = text, 1
        if repeated <= _RECURSIVE_CUTOFF:
            out.append(text)
        tb = tb.tb_next
    if repeated > _RECURSIVE_CUTOFF:
        _repeated(repeated - _RECURSIVE_CUTOFF, out)


def _repeated(count: int, out: list[str]) -> None:
    out.append(f"  [Previous line repeated {count} more time{'s' if count > 1 else ''}]\n")


def _text(value: object) -> str:
    try:
        return str(value)
    except Exception:
        return "<exception str() failed>"


def _last_lines(error: BaseException, out: list[str]) -> None:
    """``module.Type: message`` and the notes, as ``traceback.format_exception_only``."""
    kind = type(error)
    name = kind.__qualname__
    if kind.__module__ not in ("__main__", "builtins"):
        name = f"{kind.__module__}.{name}"
    message = _text(error)
    out.append(f"{name}: {message}\n" if message else f"{name}\n")
    try:
        notes = getattr(error, "__notes__", None)
    except Exception:
        notes = None
    if notes is None:
        return
    if isinstance(notes, Sequence) and not isinstance(notes, (str, bytes)):
        out.extend(f"{note if isinstance(note, str) else _text(note)}\n" for note in notes)
    else:
        try:
            out.append(f"{notes!r}\n")
        except Exception:
            out.append("<__notes__ repr() failed>\n")


def _chain(error: BaseException) -> list[tuple[BaseException, str]] | None:
    """``error`` and the exceptions it was raised from or during, oldest first, each with the
    words that follow it (Python's words for how the next one came about); None when one of
    them needs Python's own layout."""
    chain: list[tuple[BaseException, str]] = []
    seen: set[int] = set()
    joint = ""
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, _OWN_LAYOUT):
            return None
        seen.add(id(current))
        chain.append((current, joint))
        if current.__cause__ is not None:
            current, joint = current.__cause__, _CAUSE
        elif current.__context__ is not None and not current.__suppress_context__:
            current, joint = current.__context__, _CONTEXT
        else:
            current = None
    chain.reverse()
    return chain


def stacktrace_limit(wire_options: Mapping[str, Any]) -> int | None:
    """The job's ``stackTraceLimit``: how many tracebacks its ``stacktrace`` keeps (None: all;
    0: none, and none is formatted)."""
    limit = wire_options.get("stackTraceLimit")
    if isinstance(limit, int) and not isinstance(limit, bool) and limit >= 0:
        return limit
    return None


def _one(error: BaseException, out: list[str]) -> None:
    shown = _user_frames(error.__traceback__)
    if shown is not None:
        out.append(_HEADER)
        _frames(shown, out)
    _last_lines(error, out)


def format_failure(error: BaseException) -> str:
    """The traceback of ``error`` as Python prints it, without caret lines and starting at the
    user's code (see the module's docstring); no trailing newline."""
    out: list[str] = []
    alone = error.__cause__ is None and (error.__context__ is None or error.__suppress_context__)
    if alone and not isinstance(error, _OWN_LAYOUT):  # the common case: no chain to walk
        _one(error, out)
        return "".join(out).rstrip("\n")
    chain = _chain(error)
    if chain is None:
        text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        return text.rstrip("\n")
    for exc, words in chain:
        _one(exc, out)
        out.append(words)
    return "".join(out).rstrip("\n")
