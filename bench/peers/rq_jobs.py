"""The rq job function (rq refuses functions defined in ``__main__``).

rq's default worker forks a work horse per job, so the job cannot record into the
worker's memory: it appends ``"<i> <monotonic_ns>"`` to the file named by
``ECHOMQ_BENCH_RQ_LOG`` (one short O_APPEND write per job is atomic on Linux).
"""

from __future__ import annotations

import os
import time


def noop(i: int) -> None:
    line = f"{i} {time.monotonic_ns()}\n".encode()
    fd = os.open(os.environ["ECHOMQ_BENCH_RQ_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)
