"""Failure categories: the RetryableError family retries, everything else does not."""

from __future__ import annotations

import pytest

from jobwire.domain.job import ErrorCategory
from jobwire.worker.sdk import (
    DependencyFailed,
    HandlerError,
    InputInvalid,
    JobContext,
    Result,
    RetryableError,
    TimedOut,
)
from jobwire.worker.sdk._errors import failure_of, plain_message
from jobwire.worker.sdk.testing import EndKind, JobEnvironment


@pytest.mark.parametrize(
    ("error", "category", "retryable"),
    [
        (RetryableError("try again"), ErrorCategory.PROCESSING_ERROR, True),
        (DependencyFailed("db down"), ErrorCategory.DEPENDENCY_FAILED, True),
        (TimedOut("too slow"), ErrorCategory.TIMEOUT, True),
        (RetryableError("x", category=ErrorCategory.DEPENDENCY_FAILED), ErrorCategory.DEPENDENCY_FAILED, True),
        (InputInvalid("bad row"), ErrorCategory.INPUT_INVALID, False),
        (HandlerError("nope"), ErrorCategory.PROCESSING_ERROR, False),
        (ValueError("boom"), ErrorCategory.PROCESSING_ERROR, False),
        (KeyError("k"), ErrorCategory.PROCESSING_ERROR, False),
        (ConnectionError("reset"), ErrorCategory.PROCESSING_ERROR, False),
    ],
)
def test_categories(error: Exception, category: ErrorCategory, retryable: bool) -> None:
    def handler(ctx: JobContext) -> Result:
        raise error

    outcome = JobEnvironment().run(handler)
    assert outcome.kind is EndKind.FAIL
    assert outcome.failure is not None
    assert (outcome.failure.category, outcome.failure.retryable) == (category, retryable)


def test_the_trace_goes_to_detail_only() -> None:
    def handler(ctx: JobContext) -> Result:
        raise FileNotFoundError(2, "No such file or directory", "/srv/data/input-42.csv")

    outcome = JobEnvironment().run(handler)
    assert outcome.failure is not None
    assert "/srv/data" not in outcome.failure.message
    assert "Traceback" not in outcome.failure.message
    assert "No such file or directory" in outcome.failure.message
    assert "Traceback" in outcome.failure.detail
    assert "FileNotFoundError" in outcome.failure.detail


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("cannot open /home/ana/x.csv: denied", "cannot open <path>: denied"),
        ("see 'C:\\data\\in.csv'", "see '<path>'"),
        ("wrote ./out/a.bin and ~/b", "wrote <path> and <path>"),
        ("stage 3/4 and/or more", "stage 3/4 and/or more"),
        ("fetch file:///var/x failed", "fetch <path> failed"),
        ("line one\n  line two", "line one line two"),
    ],
)
def test_plain_messages_hide_paths(text: str, expected: str) -> None:
    assert plain_message(text) == expected


def test_messages_are_bounded_and_never_empty() -> None:
    assert len(plain_message("x" * 5000)) == 1000
    assert failure_of(ValueError()).message == "ValueError"
