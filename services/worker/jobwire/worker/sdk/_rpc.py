"""Calling WorkerService: the stub's shape, which failures to retry, and how patiently.

Every worker call is safe to repeat with the same token, so a call that fails with
UNAVAILABLE, DEADLINE_EXCEEDED or ABORTED is retried with backoff; the grpc channel
reconnects underneath. WORKER_LEASE_LOST is final for the job and never retried. A worker
whose token the server refuses (UNAUTHENTICATED, PERMISSION_DENIED) cannot work at all:
`refusal` says why and what to set, and the worker stops (`WorkerRefused`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Protocol, TypeVar

import grpc

from jobwire.client import Backoff, Pauses, error_reason, status_code
from jobwire.client.errors import from_rpc_error
from jobwire.v1 import job_pb2, worker_pb2
from jobwire.worker.sdk._frames import SessionDown

log = logging.getLogger("jobwire.worker")

T = TypeVar("T")
TRANSIENT = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.ABORTED})
CALL_TIMEOUT_S = 10.0
# The worker's channel pings its server every 4 s and gives up on it 4 s after an unanswered
# ping, whether calls are in flight or not: a dead server or machine, or a network parted in
# silence (no RST, no FIN), is noticed within 8 s, its session breaks and the grace starts
# (jobwire.worker.sdk._session). Within 8 s, because a server's own pings may close a silent
# connection 10 s after its last word (jobwire.rpc.server) and then take the session for a
# dead worker's at its grace's end: a worker cut off must stop its handlers first, and with
# both graces alike it does.
# grpc-core waits for a ping's answer grpc.http2.ping_timeout_ms, 60 s unless set, whatever
# keepalive_timeout_ms says: without it a worker cut off in silence ran its handler on for
# over a minute while its job ran elsewhere (tests/e2e/test_session_processes.py). Pings go on
# while the worker sends no data (max_pings_without_data 0; grpc-core stops after 2).
# Other clients ping every 30 s (jobwire.client.channel); the servers accept pings every 2 s
# (jobwire.rpc.server), or they would answer GOAWAY too_many_pings.
CHANNEL_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.keepalive_time_ms", 4_000),
    ("grpc.keepalive_timeout_ms", 4_000),
    ("grpc.http2.ping_timeout_ms", 4_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
)


class WorkerStub(Protocol):
    """The part of `WorkerServiceStub` (grpc.aio) the runtime uses; tests pass a fake."""

    def Claim(
        self, request: worker_pb2.ClaimRequest, *, timeout: float | None = ...
    ) -> Awaitable[worker_pb2.ClaimResponse]: ...

    def Heartbeat(
        self, request: worker_pb2.HeartbeatRequest, *, timeout: float | None = ...
    ) -> Awaitable[worker_pb2.HeartbeatResponse]: ...

    def BatchReportStage(
        self, request: worker_pb2.BatchReportStageRequest, *, timeout: float | None = ...
    ) -> Awaitable[worker_pb2.BatchReportStageResponse]: ...

    def Complete(
        self, request: worker_pb2.CompleteRequest, *, timeout: float | None = ...
    ) -> Awaitable[job_pb2.Job]: ...

    def Fail(self, request: worker_pb2.FailRequest, *, timeout: float | None = ...) -> Awaitable[job_pb2.Job]: ...

    def ConfirmCancel(
        self, request: worker_pb2.ConfirmCancelRequest, *, timeout: float | None = ...
    ) -> Awaitable[job_pb2.Job]: ...

    def Release(self, request: worker_pb2.ReleaseRequest, *, timeout: float | None = ...) -> Awaitable[job_pb2.Job]: ...

    def AwaitReview(
        self, request: worker_pb2.AwaitReviewRequest, *, timeout: float | None = ...
    ) -> Awaitable[job_pb2.Job]: ...

    def RecordEvidence(
        self, request: worker_pb2.RecordEvidenceRequest, *, timeout: float | None = ...
    ) -> Awaitable[worker_pb2.RecordEvidenceResponse]: ...

    def UploadResult(
        self, request_iterator: AsyncIterator[job_pb2.ResultChunk], *, timeout: float | None = ...
    ) -> Awaitable[worker_pb2.UploadResultResponse]: ...


def _code(error: BaseException) -> grpc.StatusCode | None:
    """The status code of a failed call (aio, sync, or a test's fake); None for anything else."""
    return status_code(error) if isinstance(error, grpc.RpcError) else None


def is_transient(error: BaseException) -> bool:
    return _code(error) in TRANSIENT


def is_lease_lost(error: BaseException) -> bool:
    if _code(error) is not grpc.StatusCode.FAILED_PRECONDITION:
        return False
    return isinstance(error, grpc.RpcError) and error_reason(error) == "WORKER_LEASE_LOST"


def describe(error: BaseException) -> str:
    """A failed call as a log line says it: `CODE REASON: message`, as jobctl prints one."""
    return str(from_rpc_error(error)) if isinstance(error, grpc.RpcError) else repr(error)


def retry_level(error: BaseException) -> int:
    """How loudly a failed call that is tried again is logged: WARNING, or DEBUG for a
    SessionDown, whose session has warned of it already (once per try, not once per call)."""
    return logging.DEBUG if isinstance(error, SessionDown) else logging.WARNING


async def call_retrying(
    call: Callable[[], Awaitable[T]],
    *,
    what: str,
    give_up_at: Callable[[], float | None] = lambda: None,
) -> T:
    """Run `call` until it succeeds or fails for a reason other than a transient one.

    Args:
        call: Makes one attempt (a fresh RPC each time).
        what: Names the call in logs.
        give_up_at: A `time.monotonic()` deadline, or None for no deadline. Read before
            every retry, so a shutdown that starts mid-retry bounds it.
    """
    backoff = Pauses(Backoff(initial=0.25, maximum=5.0, jitter=0.5))
    while True:
        try:
            return await call()
        except grpc.RpcError as exc:
            deadline = give_up_at()
            delay = backoff.next()
            if not is_transient(exc) or (deadline is not None and time.monotonic() + delay > deadline):
                raise
            log.log(retry_level(exc), "%s failed (%s); retrying in %.2fs", what, describe(exc), delay)
            await asyncio.sleep(delay)


REFUSED = frozenset({grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED})
_TOKEN_SETTINGS = "JOBWIRE_TOKEN, or --token-file / JOBWIRE_TOKEN_FILE (WorkerConfig.token when embedded)"


class WorkerRefused(Exception):
    """The server refused this worker's token: no call can succeed until its settings change.

    `Worker.run()` raises it when the first Claim is refused; jobwire-worker exits 3 with its
    message, which names the cause and the setting to fix.
    """


def refusal(error: BaseException, *, has_token: bool, queues: tuple[str, ...]) -> WorkerRefused | None:
    """The WorkerRefused a refused call means, or None for any other failure."""
    code = _code(error)
    if code not in REFUSED:
        return None
    said = describe(error)
    # UNAUTHENTICATED: the sentence names the worker's own setting, where the server's words
    # (send a header, check the auth file) would say it a second time.
    if code is grpc.StatusCode.UNAUTHENTICATED and not has_token:
        why = f"the server needs a token and none was given (UNAUTHENTICATED): set {_TOKEN_SETTINGS}"
    elif code is grpc.StatusCode.UNAUTHENTICATED:
        why = f"the server does not know this worker's token (UNAUTHENTICATED): check {_TOKEN_SETTINGS}"
    else:
        why = (
            f"the server refused this worker's token ({said}): its entry in the server's auth file needs"
            f' role "worker" and the queues claimed from ({", ".join(queues)}, set by --queue)'
        )
    return WorkerRefused(f"{why}; stopping, as no call can succeed until that is fixed")
