"""The Celery app of the cpu phase: one task running :func:`cpu_jobs.burn`.

The broker URL comes from ``ECHOMQ_BENCH_CELERY_BROKER``; results are not stored (the job
records its run itself), as a Celery user would for fire-and-forget CPU work.
"""

from __future__ import annotations

import os

import cpu_jobs
from celery import Celery

app = Celery("cpu_bench", broker=os.environ.get("ECHOMQ_BENCH_CELERY_BROKER", "redis://"))
app.conf.update(
    task_ignore_result=True,
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
)


@app.task(name="burn")
def burn(i: int, ms: float) -> int:
    return cpu_jobs.burn(i, ms)
