"""Backoff, bounded unary retries, and decoding errors into ClientError subclasses."""

from __future__ import annotations

from collections.abc import Callable

import grpc
import pytest

from jobwire.client.errors import (
    ClientError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    UnavailableError,
    from_rpc_error,
)
from jobwire.client.retry import Backoff, RetrySettings, call_with_retry

pytestmark = pytest.mark.timeout(10)
UNAVAILABLE = grpc.StatusCode.UNAVAILABLE
MakeError = Callable[..., grpc.RpcError]


def test_backoff_grows_exponentially_up_to_the_cap_without_jitter() -> None:
    backoff = Backoff(initial=0.1, maximum=1.0, multiplier=2.0, jitter=0.0)
    delays = [backoff.delay(n) for n in range(1, 7)]
    assert delays == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0])


def test_full_jitter_stays_between_zero_and_the_base_delay() -> None:
    backoff = Backoff(initial=1.0, maximum=10.0, jitter=1.0)
    assert backoff.delay(1, rand=lambda: 0.0) == pytest.approx(1.0)
    assert backoff.delay(1, rand=lambda: 0.999) == pytest.approx(0.001)
    assert backoff.delay(3, rand=lambda: 0.5) == pytest.approx(2.0)


class Flaky:
    """A call that fails with the given errors, then answers."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "ok"


def test_unavailable_is_retried_with_backoff(rpc_error: MakeError) -> None:
    call = Flaky(rpc_error(UNAVAILABLE, "db down"), rpc_error(UNAVAILABLE, "db down"))
    pauses: list[float] = []
    assert call_with_retry(call, RetrySettings(), idempotent=True, sleep=pauses.append) == "ok"
    assert call.calls == 3
    assert len(pauses) == 2


def test_retries_are_bounded(rpc_error: MakeError) -> None:
    call = Flaky(*(rpc_error(UNAVAILABLE, "down") for _ in range(10)))
    with pytest.raises(UnavailableError):
        call_with_retry(call, RetrySettings(unary_attempts=3), idempotent=True, sleep=lambda _: None)
    assert call.calls == 3


@pytest.mark.parametrize(
    "code",
    [
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.ABORTED,
    ],
)
def test_answers_are_not_retried(rpc_error: MakeError, code: grpc.StatusCode) -> None:
    call = Flaky(rpc_error(code, "no"))
    with pytest.raises(ClientError) as caught:
        call_with_retry(call, RetrySettings(), idempotent=True, sleep=lambda _: None)
    assert call.calls == 1
    assert caught.value.code == code


def test_a_call_that_is_not_idempotent_is_tried_once(rpc_error: MakeError) -> None:
    call = Flaky(rpc_error(UNAVAILABLE, "down"))
    with pytest.raises(UnavailableError):
        call_with_retry(call, RetrySettings(), idempotent=False, sleep=lambda _: None)
    assert call.calls == 1


def test_error_info_reason_and_message_are_decoded(rpc_error: MakeError) -> None:
    error = from_rpc_error(
        rpc_error(
            grpc.StatusCode.FAILED_PRECONDITION,
            "the job cannot be cancelled now",
            reason="JOB_NOT_CANCELLABLE",
        )
    )
    assert isinstance(error, FailedPreconditionError)
    assert error.reason == "JOB_NOT_CANCELLABLE"
    assert error.message == "the job cannot be cancelled now"
    assert str(error) == "FAILED_PRECONDITION JOB_NOT_CANCELLABLE: the job cannot be cancelled now"


def test_bad_request_fields_are_decoded(rpc_error: MakeError) -> None:
    error = from_rpc_error(
        rpc_error(
            grpc.StatusCode.INVALID_ARGUMENT,
            "job_type: bad",
            reason="INVALID_ARGUMENT",
            violations=(("job_type", "must match [A-Za-z0-9]..."),),
        )
    )
    assert isinstance(error, InvalidArgumentError)
    assert error.violations == (("job_type", "must match [A-Za-z0-9]..."),)


def test_an_error_without_details_has_no_reason(rpc_error: MakeError) -> None:
    error = from_rpc_error(rpc_error(grpc.StatusCode.NOT_FOUND, "gone"))
    assert isinstance(error, NotFoundError)
    assert error.reason is None
    assert str(error) == "NOT_FOUND: gone"


def test_a_bare_rpc_error_reads_as_unknown() -> None:
    error = from_rpc_error(grpc.RpcError())
    assert error.code == grpc.StatusCode.UNKNOWN
    assert type(error) is ClientError


def test_pauses_grow_with_failures_in_a_row_and_start_over_after_a_success() -> None:
    """One backoff policy for the client and the worker SDK; the SDK's loops count with Pauses."""
    from jobwire.client import Pauses

    pauses = Pauses(Backoff(initial=0.5, maximum=2.0, multiplier=2.0, jitter=0.5))
    first, second, third, fourth = (pauses.next() for _ in range(4))
    assert 0.25 <= first <= 0.5 and 0.5 <= second <= 1.0 and 1.0 <= third <= 2.0 and 1.0 <= fourth <= 2.0
    pauses.reset()
    assert 0.25 <= pauses.next() <= 0.5
