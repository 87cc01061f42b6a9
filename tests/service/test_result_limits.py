"""No caller takes down the others: limits on result downloads and uploads, over real gRPC
(security review, issue 22, findings 2 and 3). On SQLite; the tests of uploads whose lease is
lost or ended, which turn on the store's lease checks and guarded writes, on MariaDB too.

A download or upload holds a place in its tenant's share of JOBWIRE_MAX_TRANSFERS; a download
reads the file only as fast as its reader takes chunks, and one stalled past
JOBWIRE_STREAM_IDLE_SECONDS is cut with its file closed; a lease keeps one upload (a later
one in flight replaces it, a finished one removes those finished before it), never past
JOBWIRE_MAX_RESULT_BYTES, never kept for a lease lost meanwhile, and every end of a lease
removes its uploads but the one its Complete named; running out of files or room is the
caller's RESOURCE_EXHAUSTED, naming no path.

Waits poll with a deadline (`eventually`); nothing asserts on timing.
"""

from __future__ import annotations

import asyncio
import errno
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest
from auth_files import Token, write_auth_file
from result_support import chunks, fetch, open_result_files, store_files
from served import Served, eventually, housekeeping_round
from service_support import artifact, claim, rpc_error, rpc_failure, running, submit
from session_support import Session, claim_request, ref

from jobwire.client.channel import FIXED_WINDOW_OPTIONS
from jobwire.client.status import error_reason
from jobwire.domain.kept_results import DOWNLOAD_CHUNK_BYTES, RESULT_CHUNK_BYTES
from jobwire.v1 import admin_pb2, job_pb2, job_pb2_grpc, worker_pb2

pytestmark = pytest.mark.timeout(120)
Serve = Callable[..., Awaitable[Served]]
TOKENS = [
    Token("a", tenant="a"), Token("a-w", tenant="a", role="worker"),
    Token("b", tenant="b"), Token("b-w", tenant="b", role="worker"),
]  # fmt: skip
A, A_WORKER, B, B_WORKER = (t.metadata for t in TOKENS)
BIG = 32 << 20  # far more than a stalled reader's window, so its download stays open
EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED


async def two_tenants(serve: Serve, tmp_path: Path, **settings: object) -> Served:
    auth = write_auth_file(tmp_path / "auth.toml", TOKENS)
    return await serve(auth_file=auth, result_store=str(tmp_path / "store"), **settings)


async def leased(s: Served, client: Any = (), worker: Any = ()) -> worker_pb2.Lease:
    await s.jobs.Submit(job_pb2.SubmitRequest(job_type="frames"), metadata=client)
    claim = worker_pb2.ClaimRequest(worker_id="w", job_types=[worker_pb2.JobTypeSpec(name="frames")])
    (lease,) = (await s.workers.Claim(claim, metadata=worker)).leases
    return lease


async def kept_result(s: Served, data: bytes, client: Any = (), worker: Any = ()) -> str:
    """A READY job whose `data` the server keeps in its result store; its job number."""
    lease = await leased(s, client, worker)
    up = await s.workers.UploadResult(chunks(lease.job_no, lease.worker_token, data), metadata=worker)
    await s.workers.Complete(worker_pb2.CompleteRequest(
        job_no=lease.job_no, worker_token=lease.worker_token, upload_id=up.upload_id
    ), metadata=worker)  # fmt: skip
    return lease.job_no


def slow_reader(s: Served) -> tuple[grpc.aio.Channel, job_pb2_grpc.JobServiceStub]:
    """A reader whose window stays at 64 KiB: it stalls the server as soon as it stops reading."""
    channel = grpc.aio.insecure_channel(s.target, options=list(FIXED_WINDOW_OPTIONS))
    return channel, job_pb2_grpc.JobServiceStub(channel)


async def drain(call: Any) -> None:
    while await call.read() is not grpc.aio.EOF:
        pass


async def held_upload(lease: worker_pb2.Lease, go: asyncio.Event, data: bytes = b"x" * 1000) -> AsyncIterator[Any]:
    """An upload's first chunk at once, the rest only after `go`."""
    yield job_pb2.ResultChunk(job_no=lease.job_no, worker_token=lease.worker_token, data=data)
    await go.wait()
    yield job_pb2.ResultChunk(data=data)


# -- downloads (finding 2) ----------------------------------------------------------------


async def test_a_tenants_transfers_past_its_share_are_refused_while_anothers_go_on(
    serve: Serve, tmp_path: Path
) -> None:
    s = await two_tenants(serve, tmp_path, max_transfers=2)  # two tenants: one transfer each
    theirs = await kept_result(s, os.urandom(BIG), A, A_WORKER)
    small = await kept_result(s, b"a's small one", A, A_WORKER)
    ours = await kept_result(s, b"b's bytes", B, B_WORKER)
    channel, stub = slow_reader(s)
    first = stub.GetResult(job_pb2.GetResultRequest(job_no=theirs), metadata=A)
    assert len((await first.read()).data) == DOWNLOAD_CHUNK_BYTES
    again = s.jobs.GetResult(job_pb2.GetResultRequest(job_no=theirs), metadata=A)
    assert await rpc_error(drain(again)) == (EXHAUSTED, "TOO_MANY_TRANSFERS")
    lease = await leased(s, A, A_WORKER)
    upload = s.workers.UploadResult(chunks(lease.job_no, lease.worker_token, b"x"), metadata=A_WORKER)
    assert await rpc_error(upload) == (EXHAUSTED, "TOO_MANY_TRANSFERS")  # one share for both ways
    mine = s.jobs.GetResult(job_pb2.GetResultRequest(job_no=ours), metadata=B)
    assert b"".join([c.data async for c in mine]) == b"b's bytes"
    first.cancel()  # a download that ends gives its place back

    async def a_downloads_again() -> bool:
        try:
            await drain(s.jobs.GetResult(job_pb2.GetResultRequest(job_no=small), metadata=A))
            return True
        except grpc.aio.AioRpcError as exc:
            assert error_reason(exc) == "TOO_MANY_TRANSFERS"
            return False

    await eventually(a_downloads_again, what="the cancelled download's place given back")
    await eventually(lambda: no_transfers(s), what="every place given back")
    await channel.close()


async def no_transfers(s: Served) -> bool:
    return s.runtime.transfers.shares.total == 0


async def test_a_stalled_download_reads_nothing_ahead_and_is_cut(serve: Serve, tmp_path: Path) -> None:
    s = await serve(result_store=str(tmp_path / "store"), stream_idle_seconds=1.0)
    job_no = await kept_result(s, os.urandom(BIG))
    channel, stub = slow_reader(s)
    call = stub.GetResult(job_pb2.GetResultRequest(job_no=job_no))
    await call.read()  # one chunk, then the reader stalls
    read_so_far: list[int] = []

    async def file_closed() -> bool:
        positions = list(open_result_files(s).values())
        read_so_far.extend(positions)
        return not positions

    await eventually(file_closed, what="the stalled download's file closed")
    # Flow control, not read-ahead: the server read a handful of chunks of the 32 MiB (with
    # 1 MiB chunks and a reader's grown window it had read 5 MiB and held ~4.7 MB a stream).
    assert read_so_far and max(read_so_far) <= 16 * DOWNLOAD_CHUNK_BYTES
    # The reader back: what was sent, then why it ended.
    assert await rpc_error(drain(call)) == (EXHAUSTED, "TRANSFER_STALLED")
    await channel.close()


async def test_a_reader_that_keeps_reading_gets_the_whole_result(serve: Serve, tmp_path: Path) -> None:
    s = await serve(result_store=str(tmp_path / "store"), stream_idle_seconds=1.0)
    data = os.urandom(5 * RESULT_CHUNK_BYTES + 3)
    job_no = await kept_result(s, data)
    assert (await fetch(s, job_no))[1] == data
    assert open_result_files(s) == {}


# -- uploads (finding 3) ------------------------------------------------------------------


async def test_an_upload_past_max_result_bytes_is_refused_and_leaves_no_file(serve: Serve, tmp_path: Path) -> None:
    s = await serve(result_store=str(tmp_path / "store"), max_result_bytes=RESULT_CHUNK_BYTES + 10)
    _, lease = await running(s)
    error = await rpc_failure(s.workers.UploadResult(chunks(lease.job_no, lease.worker_token, b"x" * (3 << 20))))
    assert (error.code(), error_reason(error)) == (EXHAUSTED, "RESULT_TOO_LARGE")
    assert "JOBWIRE_MAX_RESULT_BYTES" in (error.details() or "")
    assert store_files(s) == []
    at_limit = await s.workers.UploadResult(chunks(lease.job_no, lease.worker_token, b"y" * (RESULT_CHUNK_BYTES + 10)))
    assert at_limit.size_bytes == RESULT_CHUNK_BYTES + 10  # the limit itself is allowed


async def test_a_second_upload_of_a_lease_replaces_the_first(serve: Serve, tmp_path: Path) -> None:
    s = await serve(result_store=str(tmp_path / "store"))
    _, lease = await running(s)
    go = asyncio.Event()
    first = asyncio.ensure_future(s.workers.UploadResult(held_upload(lease, go)))
    await eventually(lambda: files_written(s), what="the first upload writing")
    second = await s.workers.UploadResult(chunks(lease.job_no, lease.worker_token, b"the second"))
    error = await rpc_failure(first)
    assert (error.code(), error_reason(error)) == (grpc.StatusCode.ABORTED, "UPLOAD_REPLACED")
    go.set()
    assert len(store_files(s)) == 2  # the second and its sum: the first's bytes are gone
    await s.workers.Complete(worker_pb2.CompleteRequest(
        job_no=lease.job_no, worker_token=lease.worker_token, upload_id=second.upload_id
    ))  # fmt: skip
    assert (await fetch(s, lease.job_no))[1] == b"the second"


async def files_written(s: Served) -> bool:
    return bool(store_files(s))


async def test_a_finished_upload_removes_the_leases_earlier_finished_ones(serve: Serve, tmp_path: Path) -> None:
    # Two 200 MiB uploads of one lease were both kept (419 MB until the 24 h sweep).
    s = await serve(result_store=str(tmp_path / "store"))
    _, lease = await running(s)
    one = await s.workers.UploadResult(chunks(lease.job_no, lease.worker_token, b"one"))
    assert names(s) == kept(one)
    two = await s.workers.UploadResult(chunks(lease.job_no, lease.worker_token, b"two"))
    assert names(s) == kept(two)  # the newest finished upload of a lease is the one kept
    older = await rpc_failure(s.workers.Complete(complete_with(lease, one.upload_id)))
    assert (older.code(), error_reason(older)) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT")
    await s.workers.Complete(complete_with(lease, two.upload_id))
    assert (await fetch(s, lease.job_no))[1] == b"two" and names(s) == kept(two)


def names(s: Served) -> list[str]:
    return [p.name for p in store_files(s)]


def kept(upload: worker_pb2.UploadResultResponse) -> list[str]:
    """The store's files while `upload` is a lease's only one: its bytes and its sum."""
    return [upload.upload_id, f"{upload.upload_id}.sum"]


def complete_with(lease: worker_pb2.Lease, upload_id: str) -> worker_pb2.CompleteRequest:
    return worker_pb2.CompleteRequest(job_no=lease.job_no, worker_token=lease.worker_token, upload_id=upload_id)


async def test_a_complete_removes_the_uploads_it_does_not_name(serve: Serve, tmp_path: Path) -> None:
    s = await serve(result_store=str(tmp_path / "store"))
    _, lease = await running(s)
    one = await s.workers.UploadResult(chunks(lease.job_no, lease.worker_token, b"one"))
    go = asyncio.Event()
    still = asyncio.ensure_future(s.workers.UploadResult(held_upload(lease, go)))  # finished uploads stay below it
    await eventually(lambda: files_beside(s, kept(one)), what="a second upload writing")
    await s.workers.Complete(complete_with(lease, one.upload_id))
    await eventually(lambda: only(s, kept(one)), what="the upload the Complete did not name removed")
    go.set()
    error = await rpc_failure(still)
    assert (error.code(), error_reason(error)) == (grpc.StatusCode.FAILED_PRECONDITION, "WORKER_LEASE_LOST")
    assert names(s) == kept(one) and (await fetch(s, lease.job_no))[1] == b"one"


async def files_beside(s: Served, these: list[str]) -> bool:
    return len(names(s)) > len(these)


async def only(s: Served, these: list[str]) -> bool:
    return names(s) == sorted(these)


async def _fail(s: Served, lease: worker_pb2.Lease) -> None:
    await s.workers.Fail(worker_pb2.FailRequest(**ref(lease), message="broke", retryable=True))


async def _release(s: Served, lease: worker_pb2.Lease) -> None:
    await s.workers.Release(worker_pb2.ReleaseRequest(**ref(lease), checkpoint=b"half"))


async def _await_review(s: Served, lease: worker_pb2.Lease) -> None:
    await s.workers.AwaitReview(worker_pb2.AwaitReviewRequest(**ref(lease), assignee="alice"))


async def _confirm_cancel(s: Served, lease: worker_pb2.Lease) -> None:
    await s.jobs.Cancel(job_pb2.CancelRequest(job_no=lease.job_no))
    await s.workers.ConfirmCancel(worker_pb2.ConfirmCancelRequest(**ref(lease)))


async def _complete_inline(s: Served, lease: worker_pb2.Lease) -> None:
    await s.workers.Complete(worker_pb2.CompleteRequest(**ref(lease), inline_result=b"small after all"))


async def _complete_uri(s: Served, lease: worker_pb2.Lease) -> None:
    await s.workers.Complete(worker_pb2.CompleteRequest(**ref(lease), result=artifact()))


async def _lease_expired(s: Served, lease: worker_pb2.Lease) -> None:  # the reaper: RETRY past the stall grace
    for _ in range(2):  # marked stalled, then revoked and requeued
        s.clock.advance(timedelta(seconds=LEASE_S + 1))
        await housekeeping_round(s)
    assert (await s.jobs.Get(job_pb2.GetRequest(job_no=lease.job_no))).status == job_pb2.Job.QUEUED


async def _requeued(s: Served, lease: worker_pb2.Lease) -> None:  # an operator, once the lease expired
    s.clock.advance(timedelta(seconds=LEASE_S + 1))
    await s.admin.Requeue(admin_pb2.RequeueRequest(job_no=lease.job_no, reason="moved"))


LEASE_S = 30.0
ENDINGS = {
    "fail": _fail, "release": _release, "await_review": _await_review, "confirm_cancel": _confirm_cancel,
    "complete_inline": _complete_inline, "complete_uri": _complete_uri, "lease_expired": _lease_expired,
    "requeued": _requeued,
}  # fmt: skip


@pytest.mark.both_databases  # every ending's guarded UPDATE tells which lease it ended
@pytest.mark.parametrize("ending", sorted(ENDINGS))
async def test_a_lease_that_ends_without_naming_its_upload_leaves_no_file(
    serve: Serve, tmp_path: Path, ending: str
) -> None:
    s = await serve(result_store=str(tmp_path / "store"), reaper_interval_seconds=0, stall_grace_seconds=LEASE_S)
    await submit(s, retry_policy=job_pb2.RetryPolicy(max_attempts=3, on_lease_lost=job_pb2.RetryPolicy.RETRY))
    (lease,) = await claim(s, lease=LEASE_S)
    await s.workers.UploadResult(chunks(lease.job_no, lease.worker_token, b"never named"))
    assert len(store_files(s)) == 2
    await ENDINGS[ending](s, lease)
    # Once, every one stayed until the 24 h sweep (JOBWIRE_UPLOAD_TTL_SECONDS).
    await eventually(lambda: only(s, []), what=f"the upload of a lease ended by {ending} removed")


@pytest.mark.both_databases  # the expiry's guarded UPDATE tells which lease it ended
async def test_a_dead_sessions_lease_leaves_no_file(serve: Serve, tmp_path: Path) -> None:
    s = await serve(result_store=str(tmp_path / "store"), session_grace_seconds=0.5)
    await submit(s, retry_policy=job_pb2.RetryPolicy(max_attempts=3, on_lease_lost=job_pb2.RetryPolicy.RETRY))
    session = Session(s)
    (lease,) = (await session.ask(1, claim=claim_request("frames"))).claim.leases
    await s.workers.UploadResult(chunks(lease.job_no, lease.worker_token, b"never named"))
    session.call.cancel()  # the worker is gone: its lease expires at the grace's end
    await eventually(lambda: only(s, []), what="the upload of the dead session's lease removed")


@pytest.mark.both_databases  # the lease checked again, after the last byte, by the store
@pytest.mark.parametrize("ending", ["cancel", "requeue"])
async def test_an_upload_that_ends_after_its_lease_was_lost_leaves_no_file(
    serve: Serve, tmp_path: Path, ending: str
) -> None:
    s = await serve(result_store=str(tmp_path / "store"))
    job = await submit(s)
    (lease,) = await claim(s, lease=1.0)  # short, so an operator may requeue it soon
    go = asyncio.Event()
    upload = asyncio.ensure_future(s.workers.UploadResult(held_upload(lease, go)))
    await eventually(lambda: files_written(s), what="the upload writing")
    if ending == "cancel":  # ended: the worker confirms the cancel, the job is CANCELLED
        await s.jobs.Cancel(job_pb2.CancelRequest(job_no=job.job_no))
        await s.workers.ConfirmCancel(
            worker_pb2.ConfirmCancelRequest(job_no=lease.job_no, worker_token=lease.worker_token)
        )
    else:  # revoked: its lease expired and an operator requeues it, for another worker to take

        async def requeued() -> bool:
            try:
                await s.admin.Requeue(admin_pb2.RequeueRequest(job_no=job.job_no, reason="moved"))
                return True
            except grpc.aio.AioRpcError as exc:
                assert error_reason(exc) == "LEASE_ACTIVE"
                return False

        await eventually(requeued, what="the lease expired and requeued")
    go.set()
    error = await rpc_failure(upload)
    assert (error.code(), error_reason(error)) == (grpc.StatusCode.FAILED_PRECONDITION, "WORKER_LEASE_LOST")
    assert store_files(s) == []


async def test_an_idle_upload_is_cut_and_leaves_no_file(serve: Serve, tmp_path: Path) -> None:
    s = await serve(result_store=str(tmp_path / "store"), stream_idle_seconds=0.5)
    _, lease = await running(s)
    never = asyncio.Event()
    error = await rpc_failure(s.workers.UploadResult(held_upload(lease, never)))
    assert (error.code(), error_reason(error)) == (EXHAUSTED, "TRANSFER_STALLED")
    assert store_files(s) == []
    assert open_result_files(s) == {}


@pytest.mark.parametrize("code", [errno.EMFILE, errno.ENFILE, errno.ENOSPC])
async def test_running_out_of_files_or_room_is_the_callers_resource_exhausted(
    serve: Serve, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    s = await two_tenants(serve, tmp_path)
    job_no = await kept_result(s, b"kept before the store ran out", A, A_WORKER)
    lease = await leased(s, A, A_WORKER)
    store = s.runtime.results

    def out_of_it(path: str, mode: str = "rb", **kwargs: object) -> object:
        raise OSError(code, os.strerror(code), path)

    monkeypatch.setattr(store.fs, "open", out_of_it)
    upload = s.workers.UploadResult(chunks(lease.job_no, lease.worker_token, b"x" * 5000), metadata=A_WORKER)
    download = drain(s.jobs.GetResult(job_pb2.GetResultRequest(job_no=job_no), metadata=A))
    for failing in (upload, download):
        error = await rpc_failure(failing)
        assert (error.code(), error_reason(error)) == (EXHAUSTED, "RESULT_STORE_EXHAUSTED")
        assert store.root not in (error.details() or "") and "/" not in (error.details() or "")
    # Another tenant's calls go on.
    reply = await s.jobs.Submit(job_pb2.SubmitRequest(job_type="frames"), metadata=B)
    assert (await s.jobs.Get(job_pb2.GetRequest(job_no=reply.job.job_no), metadata=B)).job_no == reply.job.job_no
    monkeypatch.undo()
    assert len(store_files(s)) == 2  # the result kept before, and its sum: nothing half-written


async def test_no_write_failure_leaves_a_file_or_a_path_to_the_caller(
    serve: Serve, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = await serve(result_store=str(tmp_path / "store"))
    _, lease = await running(s)
    store = s.runtime.results
    real_open = store.fs.open

    def full_disk(path: str, mode: str = "rb", **kwargs: Any) -> Any:
        out = real_open(path, mode, **kwargs)
        if "w" in mode and not path.endswith(".sum"):

            def write(data: bytes) -> int:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)

            out.write = write
        return out

    monkeypatch.setattr(store.fs, "open", full_disk)
    error = await rpc_failure(s.workers.UploadResult(chunks(lease.job_no, lease.worker_token, b"x" * 5000)))
    assert (error.code(), error_reason(error)) == (EXHAUSTED, "RESULT_STORE_EXHAUSTED")
    assert "/" not in (error.details() or "")
    assert store_files(s) == []
