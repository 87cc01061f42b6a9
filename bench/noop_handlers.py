"""A no-op handler for bench/noop.py: the jobwire worker SDK's own cost per job, nothing else."""

from __future__ import annotations

from jobwire.worker.sdk import Handlers, JobContext

JOB_TYPE = "bench.noop"
handlers = Handlers()


@handlers.job(JOB_TYPE)
async def noop(ctx: JobContext) -> dict[str, object]:
    return {}  # a JSON result, hashed and delivered like any other
