"""The no-op job the peers run, for RQ (`peer_tasks.noop`) and Celery (`peer_tasks.app`).

The Celery app reads its broker, result backend and queue from JWBENCH_REDIS_URL and
JWBENCH_CELERY_QUEUE, so the worker subprocess and the bench agree on them.
"""

from __future__ import annotations

import os

from celery import Celery


def noop() -> None:
    """What RQ runs."""


_URL = os.environ.get("JWBENCH_REDIS_URL", "redis://127.0.0.1:6379/9")
app = Celery("peer_tasks", broker=_URL, backend=_URL)
app.conf.update(
    task_default_queue=os.environ.get("JWBENCH_CELERY_QUEUE", "jwbench"),
    result_expires=300,
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
)


@app.task(name="peer_tasks.celery_noop")
def celery_noop() -> None:
    """What Celery runs."""
