"""jobwire's fleet runtime: run your handlers for the jobs a WorkerService hands out.

Example:
    from jobwire.worker.sdk import Handlers, JobContext, Result

    handlers = Handlers()

    @handlers.job("thumbnail", stages=["FETCHING", "RESIZING", "DELIVERING"])
    def thumbnail(ctx: JobContext) -> Result:
        ctx.stage("RESIZING")
        for i, item in enumerate(items, start=1):
            ctx.check()                      # a safe point: cancel, lost lease, shutdown
            ...
            ctx.progress(i, total=len(items))
        return Result.from_file(ctx.tmp_dir / "out.png", summary="1 thumbnail")

Run it with ``jobwire-worker --target HOST:PORT --handlers mymodule:handlers``, or embed
`Worker(WorkerConfig(...), handlers).run()`. Test it with `jobwire.worker.sdk.testing`.
"""

from __future__ import annotations

from jobwire.domain.job import ErrorCategory
from jobwire.domain.review import Decision, Review
from jobwire.domain.stages import StageDef
from jobwire.worker.sdk._config import WorkerConfig
from jobwire.worker.sdk._context import JobContext
from jobwire.worker.sdk._errors import (
    AwaitingReview,
    DependencyFailed,
    HandlerError,
    InputInvalid,
    JobCancelled,
    JobInterrupted,
    LeaseLost,
    ResultInvalid,
    RetryableError,
    ShuttingDown,
    TimedOut,
    UndeclaredStage,
)
from jobwire.worker.sdk._handlers import Handlers
from jobwire.worker.sdk._result import Result
from jobwire.worker.sdk._rpc import WorkerRefused
from jobwire.worker.sdk._worker import Worker

__all__ = [
    "AwaitingReview",
    "Decision",
    "DependencyFailed",
    "ErrorCategory",
    "HandlerError",
    "Handlers",
    "InputInvalid",
    "JobCancelled",
    "JobContext",
    "JobInterrupted",
    "LeaseLost",
    "Result",
    "ResultInvalid",
    "RetryableError",
    "Review",
    "ShuttingDown",
    "StageDef",
    "TimedOut",
    "UndeclaredStage",
    "Worker",
    "WorkerConfig",
    "WorkerRefused",
]
