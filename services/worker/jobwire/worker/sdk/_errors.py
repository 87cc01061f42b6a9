"""What a handler may raise, what the runtime raises at safe points, and how failures read.

Two families, deliberately different:

* `HandlerError` and its children are ordinary exceptions a handler raises to say *how* it
  failed (category, retryable). Their message is written for users and is what a user sees
  (through `jobwire.domain.job.plain_message`).
* Anything else a handler raises is unexpected: its text may name a host, a command line or
  a path, so users see only a fixed sentence for its category and the exception goes to
  the operator-only `detail`. It is retryable under the job's retry policy, as Temporal
  retries an activity: once the bug is fixed, the next attempt (or a user's Retry of the
  FAILED job) can succeed. Only the handler says a failure is final, by raising a
  `HandlerError` that is not retryable.
* `JobInterrupted` and its children are raised by `JobContext.check()` to stop a handler.
  They derive from `BaseException`, like `asyncio.CancelledError`, so a handler's broad
  `except Exception:` cannot swallow a cancellation by accident.

How a failure is reported:

| the handler raised | category | retryable |
|---|---|---|
| `InputInvalid` | INPUT_INVALID | no |
| `ResultInvalid`; or returned something that is not a Result | RESULT_INVALID | no |
| `HandlerError` | PROCESSING_ERROR, or its `category=` | no |
| `RetryableError` | PROCESSING_ERROR, or its `category=` | yes |
| `DependencyFailed`; `ConnectionError`, a host lookup failure, an unreachable network | DEPENDENCY_FAILED | yes |
| `TimedOut`; `TimeoutError` | TIMEOUT | yes |
| anything else: a bug (`KeyError`, `UndeclaredStage`, ...) | PROCESSING_ERROR | yes |
"""

from __future__ import annotations

import errno
import socket
import traceback
import urllib.error
from collections.abc import Sequence
from dataclasses import dataclass

from jobwire.domain.job import ErrorCategory, plain_message
from jobwire.domain.limits import MAX_DETAIL_CHARS
from jobwire.domain.review import ReviewRequest
from jobwire.domain.stages import DEFAULT_PLAN


class JobInterrupted(BaseException):
    """The job must stop at this safe point."""


class JobCancelled(JobInterrupted):
    """The user cancelled the job: stop, the runtime removes temporary output."""


class LeaseLost(JobInterrupted):
    """This worker no longer holds the job: stop, nothing will be delivered."""


class ShuttingDown(JobInterrupted):
    """The worker is shutting down: stop, the job is released with its last checkpoint."""


class AwaitingReview(JobInterrupted):
    """The handler handed the job to a person (`JobContext.await_review`): the attempt ends, the job waits."""

    def __init__(self, request: ReviewRequest) -> None:
        super().__init__(f"waiting for review by {request.assignee}")
        self.request = request


class HandlerError(Exception):
    """The job could not be completed.

    Raise it (or a subclass) from a handler to choose the category the user sees. The
    message is shown to users: keep it plain, with no paths, hosts or traces.

    Args:
        message: What went wrong, in words a user understands.
        category: Overrides the class's category.
    """

    category: ErrorCategory = ErrorCategory.PROCESSING_ERROR
    retryable: bool = False

    def __init__(self, message: str = "", *, category: ErrorCategory | None = None) -> None:
        super().__init__(message)
        if category is not None:
            self.category = category


class InputInvalid(HandlerError):
    """The job's input cannot be processed; running it again will not help."""

    category = ErrorCategory.INPUT_INVALID


class ResultInvalid(HandlerError):
    """The handler's result cannot be delivered."""

    category = ErrorCategory.RESULT_INVALID


class RetryableError(HandlerError):
    """A failure that may pass: the job is queued again while attempts remain."""

    retryable = True


class DependencyFailed(RetryableError):
    """Something the job depends on (a service, a database, a disk) failed."""

    category = ErrorCategory.DEPENDENCY_FAILED


class TimedOut(RetryableError):
    """Something the job waited for took too long.

    `JobContext.check()` raises it too, once the attempt's own deadline has passed; the
    runtime then ends the attempt without a call, and the server decides what comes next.
    """

    category = ErrorCategory.TIMEOUT


class UndeclaredStage(ValueError):
    """A handler enters a stage its job type's plan does not have.

    Raised by `JobContext.stage()` (a handler bug: the attempt fails, retryable, with these
    words in the worker's log and the job's `detail`), and before anything runs when the
    handler's source names such a stage (the worker refuses to start; so does the harness).

    Args:
        job_type: The handler's job type.
        code: The stage it asked for.
        plan: The stage codes its plan has, first to last.
        where: Which handler, and where in its source (the check before running).
    """

    def __init__(self, job_type: str, code: str, plan: Sequence[str], *, where: str = "") -> None:
        self.job_type, self.code, self.plan = job_type, code, tuple(plan)
        default = self.plan == tuple(s.code for s in DEFAULT_PLAN)
        whose = "the default plan, which a handler registered without stages= gets" if default else "as declared"
        super().__init__(
            f"{where + ' calls ' if where else ''}ctx.stage({code!r}): job type {job_type!r} has no stage"
            f" {code!r}; its stages are {', '.join(self.plan)} ({whose}). Declare every stage the handler"
            f" enters, in order: @handlers.job({job_type!r}, stages=[..., {code!r}, ...])"
        )


@dataclass(frozen=True, kw_only=True)
class Failure:
    """How a failed attempt is reported: `message` for users, `detail` for operators only."""

    category: ErrorCategory
    message: str
    retryable: bool
    detail: str = ""


# What a user reads when the exception's own text is not fit to show.
PLAIN_SENTENCES: dict[ErrorCategory, str] = {
    ErrorCategory.INPUT_INVALID: "The job's input could not be processed.",
    ErrorCategory.DEPENDENCY_FAILED: "A service the job depends on was not available.",
    ErrorCategory.TIMEOUT: "Something the job waited for took too long.",
    ErrorCategory.WORKER_LOST: "The worker running the job stopped.",
    ErrorCategory.RESULT_INVALID: "The job's result could not be delivered.",
    ErrorCategory.PROCESSING_ERROR: "The job failed while processing.",
    ErrorCategory.REJECTED: "A reviewer rejected the job.",
}
_NETWORK_ERRNOS = frozenset(
    getattr(errno, name)
    for name in ("ENETDOWN", "ENETUNREACH", "ENETRESET", "EHOSTDOWN", "EHOSTUNREACH", "ECONNABORTED", "ECONNRESET")
    if hasattr(errno, name)
)


def _classify(exc: BaseException) -> tuple[ErrorCategory, bool]:
    """Category and retryability of an exception that is not a HandlerError."""
    if isinstance(exc, urllib.error.URLError) and isinstance(exc.reason, OSError):
        return _classify(exc.reason)  # urlopen wraps the socket error (HTTPError's reason is text)
    if isinstance(exc, TimeoutError):  # also socket.timeout and asyncio.TimeoutError
        return ErrorCategory.TIMEOUT, True
    if isinstance(exc, ConnectionError | socket.gaierror | socket.herror) or (
        isinstance(exc, OSError) and exc.errno in _NETWORK_ERRNOS
    ):
        return ErrorCategory.DEPENDENCY_FAILED, True
    return ErrorCategory.PROCESSING_ERROR, True  # a bug: retryable, so a fixed worker can finish the job


def failure_of(exc: BaseException) -> Failure:
    """Classify what a handler raised: user text for `message`, the evidence for `detail`."""
    if isinstance(exc, HandlerError):
        category, retryable = exc.category, exc.retryable
        # The handler author wrote this for users; plain_message still strips what slipped in.
        text = str(exc)
        message = plain_message(text) if text.strip() else PLAIN_SENTENCES[category]
    else:
        category, retryable = _classify(exc)
        message = PLAIN_SENTENCES[category]
    head = f"{type(exc).__name__}: {exc}\n"
    trace = "".join(traceback.format_exception(exc))
    # Keep the head and the tail of the trace: the innermost frames matter most.
    room = max(0, MAX_DETAIL_CHARS - len(head))
    detail = (head + trace[-room:] if room else head)[:MAX_DETAIL_CHARS]
    return Failure(category=category, message=message, retryable=retryable, detail=detail)
