"""The rq job function (rq refuses functions defined in ``__main__``).

rq's default worker forks a work horse per job, so the job cannot record into the
worker's memory: it appends ``"<S|F> <i> <monotonic_ns>"`` (S: a run that succeeds, F: an
attempt failed on purpose) to the file named by ``ECHOMQ_BENCH_RQ_LOG`` (one short O_APPEND
write per job is atomic on Linux). With ``ECHOMQ_BENCH_RQ_FAIL_ONCE`` set (``worker
--fail-once``), an attempt with retries left fails: with ``Retry(max=1)``, the first.
"""

from __future__ import annotations

import os
import time

from rq import get_current_job


def _log(kind: str, i: int) -> None:
    line = f"{kind} {i} {time.monotonic_ns()}\n".encode()
    fd = os.open(os.environ["ECHOMQ_BENCH_RQ_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def noop(i: int) -> None:
    if os.environ.get("ECHOMQ_BENCH_RQ_FAIL_ONCE"):
        job = get_current_job()
        if job is not None and job.retries_left:
            _log("F", i)
            raise RuntimeError("failing the first attempt on purpose")
    _log("S", i)
