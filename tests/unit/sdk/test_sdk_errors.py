"""Failure categories and what a user may read.

Only the SDK's own error classes carry text a user sees; anything else a handler raises
reads as a fixed sentence for its category, and its text and trace go to `detail` only.
"""

from __future__ import annotations

import errno
import socket
import subprocess
import urllib.error

import pytest

import jobwire.domain.job
from jobwire.domain.job import ErrorCategory
from jobwire.domain.limits import MAX_DETAIL_CHARS
from jobwire.worker.sdk import (
    DependencyFailed,
    HandlerError,
    InputInvalid,
    JobContext,
    Result,
    ResultInvalid,
    RetryableError,
    TimedOut,
    _errors,
)
from jobwire.worker.sdk._errors import PLAIN_SENTENCES, failure_of
from jobwire.worker.sdk.testing import EndKind, JobEnvironment

PROCESSING = "The job failed while processing."


def run_raising(error: BaseException) -> _errors.Failure:
    def handler(ctx: JobContext) -> Result:
        raise error

    outcome = JobEnvironment().run(handler)
    assert outcome.kind is EndKind.FAIL
    assert outcome.failure is not None
    return outcome.failure


@pytest.mark.parametrize(
    ("error", "category", "retryable"),
    [
        (RetryableError("try again"), ErrorCategory.PROCESSING_ERROR, True),
        (DependencyFailed("db down"), ErrorCategory.DEPENDENCY_FAILED, True),
        (TimedOut("too slow"), ErrorCategory.TIMEOUT, True),
        (RetryableError("x", category=ErrorCategory.DEPENDENCY_FAILED), ErrorCategory.DEPENDENCY_FAILED, True),
        (InputInvalid("bad row"), ErrorCategory.INPUT_INVALID, False),
        (HandlerError("nope"), ErrorCategory.PROCESSING_ERROR, False),
        (ValueError("boom"), ErrorCategory.PROCESSING_ERROR, True),
        (KeyError("k"), ErrorCategory.PROCESSING_ERROR, True),
        (FileNotFoundError(2, "No such file or directory", "/srv/in.csv"), ErrorCategory.PROCESSING_ERROR, True),
        (PermissionError(13, "Permission denied"), ErrorCategory.PROCESSING_ERROR, True),
        # Network trouble may pass: retryable, as a dependency or a timeout.
        (ConnectionError("reset"), ErrorCategory.DEPENDENCY_FAILED, True),
        (ConnectionRefusedError(111, "Connection refused"), ErrorCategory.DEPENDENCY_FAILED, True),
        (ConnectionResetError(104, "Connection reset by peer"), ErrorCategory.DEPENDENCY_FAILED, True),
        (socket.gaierror(-2, "Name or service not known"), ErrorCategory.DEPENDENCY_FAILED, True),
        (OSError(errno.ENETUNREACH, "Network is unreachable"), ErrorCategory.DEPENDENCY_FAILED, True),
        (OSError(errno.EHOSTUNREACH, "No route to host"), ErrorCategory.DEPENDENCY_FAILED, True),
        (urllib.error.URLError(ConnectionRefusedError(111, "refused")), ErrorCategory.DEPENDENCY_FAILED, True),
        (urllib.error.URLError("unknown url type: ftp"), ErrorCategory.PROCESSING_ERROR, True),
        (TimeoutError("timed out"), ErrorCategory.TIMEOUT, True),
    ],
)
def test_categories(error: Exception, category: ErrorCategory, retryable: bool) -> None:
    failure = run_raising(error)
    assert (failure.category, failure.retryable) == (category, retryable)


@pytest.mark.parametrize(
    ("error", "leak"),
    [
        (subprocess.CalledProcessError(2, ["ls", "/srv/private"]), "ls"),
        (ConnectionError("connect to db-primary:5432 failed"), "db-primary"),
        (TimeoutError("no answer from 10.0.3.7:8080"), "10.0.3.7"),
        (FileNotFoundError(2, "No such file or directory", "/srv/data/input-42.csv"), "input-42"),
        (RuntimeError("Traceback (most recent call last):\n  File x"), "Traceback"),
        (ValueError("cannot parse row 12"), "row 12"),  # even harmless text: it was not written for users
    ],
)
def test_other_exceptions_show_a_fixed_sentence_and_keep_the_text_in_detail(error: Exception, leak: str) -> None:
    failure = run_raising(error)
    assert failure.message == PLAIN_SENTENCES[failure.category]
    assert leak not in failure.message
    assert failure.detail.startswith(f"{type(error).__name__}: {error}\n")
    assert "Traceback (most recent call last)" in failure.detail
    assert "in handler" in failure.detail  # the frame that raised


def test_a_fixed_sentence_per_category() -> None:
    assert run_raising(ValueError("x")).message == PROCESSING
    assert run_raising(ConnectionError("x")).message == PLAIN_SENTENCES[ErrorCategory.DEPENDENCY_FAILED]
    assert run_raising(TimeoutError("x")).message == PLAIN_SENTENCES[ErrorCategory.TIMEOUT]
    assert set(PLAIN_SENTENCES) == set(ErrorCategory)
    for sentence in PLAIN_SENTENCES.values():
        assert jobwire.domain.job.plain_message(sentence) == sentence


@pytest.mark.parametrize(
    "error",
    [
        HandlerError("the archive is corrupt"),
        InputInvalid("row 12 has no amount"),
        RetryableError("the queue is full"),
        DependencyFailed("the warehouse API is down"),
        TimedOut("the report engine did not answer"),
        ResultInvalid("the result is empty"),
    ],
)
def test_sdk_errors_show_the_handler_authors_text(error: HandlerError) -> None:
    failure = run_raising(error)
    assert failure.message == str(error)
    assert failure.detail.startswith(f"{type(error).__name__}: {error}\n")


def test_sdk_error_text_still_passes_through_the_domains_plain_message() -> None:
    assert vars(_errors)["plain_message"] is jobwire.domain.job.plain_message  # one sanitizer, the domain's
    hidden = run_raising(InputInvalid("cannot open /srv/data/in.csv on db-primary.corp.internal"))
    assert "/srv" not in hidden.message and "db-primary" not in hidden.message
    assert hidden.message.startswith("cannot open [path] on")
    # Lines are not joined first: a trace is recognised and never shown.
    traced = run_raising(HandlerError('Traceback (most recent call last):\n  File "/srv/x.py", line 1'))
    assert traced.message == jobwire.domain.job.plain_message("Traceback")
    assert "Traceback" not in traced.message
    assert run_raising(HandlerError("first line\nsecond line")).message == "first line"


def test_an_sdk_error_without_text_reads_as_its_categorys_sentence() -> None:
    assert run_raising(DependencyFailed()).message == PLAIN_SENTENCES[ErrorCategory.DEPENDENCY_FAILED]
    assert run_raising(HandlerError("   ")).message == PROCESSING


def test_the_cause_of_an_sdk_error_stays_in_detail() -> None:
    def handler(ctx: JobContext) -> Result:
        try:
            raise ConnectionRefusedError(111, "connect to db-primary:5432 refused")
        except OSError as exc:
            raise DependencyFailed("the database is not available") from exc

    outcome = JobEnvironment().run(handler)
    assert outcome.failure is not None
    assert outcome.failure.message == "the database is not available"
    assert "db-primary:5432" in outcome.failure.detail


def test_detail_is_bounded_and_keeps_head_and_tail() -> None:
    failure = failure_of(ValueError("x" * (3 * MAX_DETAIL_CHARS)))
    assert len(failure.detail) <= MAX_DETAIL_CHARS
    assert failure.detail.startswith("ValueError: xxx")
    assert failure.message == PROCESSING
    assert failure_of(ValueError()).detail.startswith("ValueError: \n")
