"""What a handler may raise, what the runtime raises at safe points, and how failures read.

Two families, deliberately different:

* `HandlerError` and its children are ordinary exceptions a handler raises to say *how* it
  failed (category, retryable). Anything else a handler raises is a non-retryable
  PROCESSING_ERROR.
* `JobInterrupted` and its children are raised by `JobContext.check()` to stop a handler.
  They derive from `BaseException`, like `asyncio.CancelledError`, so a handler's broad
  `except Exception:` cannot swallow a cancellation by accident.
"""

from __future__ import annotations

import re
import traceback
from dataclasses import dataclass

from jobwire.domain.job import ErrorCategory
from jobwire.domain.limits import MAX_DETAIL_CHARS, MAX_MESSAGE_CHARS


class JobInterrupted(BaseException):
    """The job must stop at this safe point."""


class JobCancelled(JobInterrupted):
    """The user cancelled the job: stop, the runtime removes temporary output."""


class LeaseLost(JobInterrupted):
    """This worker no longer holds the job: stop, nothing will be delivered."""


class ShuttingDown(JobInterrupted):
    """The worker is shutting down: stop, the job is released with its last checkpoint."""


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
    """Something the job waited for took too long."""

    category = ErrorCategory.TIMEOUT


@dataclass(frozen=True, kw_only=True)
class Failure:
    """How a failed attempt is reported: `message` for users, `detail` for operators only."""

    category: ErrorCategory
    message: str
    retryable: bool
    detail: str = ""


# A path-like token: absolute, home- or dot-relative, a Windows drive, or a file:// URI.
# The look-behind keeps fractions ("stage 3/4") and words ("and/or") intact.
_PATH = re.compile(r"""(?<![\w./\\-])(?:file://)?(?:[A-Za-z]:[\\/]|~[\\/]|\.{1,2}[\\/]|[\\/])[^\s'"<>|,;:()]*""")
_SPACE = re.compile(r"\s+")


def plain_message(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """One line of user-facing text: paths replaced, whitespace collapsed, length bounded."""
    text = _SPACE.sub(" ", _PATH.sub("<path>", text)).strip()
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def failure_of(exc: BaseException) -> Failure:
    """Classify what a handler raised; the trace goes to `detail` only."""
    if isinstance(exc, HandlerError):
        category, retryable = exc.category, exc.retryable
    else:
        category, retryable = ErrorCategory.PROCESSING_ERROR, False
    message = plain_message(str(exc)) or type(exc).__name__
    detail = "".join(traceback.format_exception(exc))
    # Keep the tail: the innermost frames and the exception line matter most.
    return Failure(
        category=category,
        message=message,
        retryable=retryable,
        detail=detail[-MAX_DETAIL_CHARS:],
    )
