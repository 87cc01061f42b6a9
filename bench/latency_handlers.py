"""Handlers for bench/session_latency.py: each writes, in a file of its job's, when the user would see it.

Both are sync handlers (run on the worker's threads, as in the SDK's own example): an async
handler is stopped by its task's cancellation at an await, not by ctx.check() raising.
The stamps are time.time() (one clock for every process on this machine), written to
`$JWBENCH_STAMPS/<job_no>.<what>` by a rename, so the bench never reads half a stamp.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from jobwire.worker.sdk import Handlers, JobCancelled, JobContext

START_TYPE = "bench.latency.start"
CANCEL_TYPE = "bench.latency.cancel"
CHECK_EVERY_S = 0.002  # a handler at a safe point this often: what is measured is the worker's delay, not its own
RUN_AT_MOST_S = 120.0  # a cancel that never arrives ends the job anyway
handlers = Handlers()


def stamp(job_no: str, what: str) -> None:
    now = time.time()
    folder = Path(os.environ["JWBENCH_STAMPS"])
    part = folder / f".{job_no}.{what}"
    part.write_text(repr(now))
    part.rename(folder / f"{job_no}.{what}")


@handlers.job(START_TYPE)
def started(ctx: JobContext) -> dict[str, object]:
    stamp(ctx.job_no, "start")
    return {}


@handlers.job(CANCEL_TYPE)
def cancellable(ctx: JobContext) -> dict[str, object]:
    stamp(ctx.job_no, "start")
    ends = time.monotonic() + RUN_AT_MOST_S
    while time.monotonic() < ends:
        try:
            ctx.check()
        except JobCancelled:
            stamp(ctx.job_no, "cancelled")
            raise
        time.sleep(CHECK_EVERY_S)
    return {}
