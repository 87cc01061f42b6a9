"""Results the server keeps, over real gRPC on SQLite: inline bytes, uploads,
GetResult, fencing, tenancy, and the retention and housekeeping that remove them.

Nothing asserts on timing.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path

import grpc
import pytest
from auth_files import Token, write_auth_file
from result_support import chunks, fetch, store_files
from served import Served
from service_support import artifact, rpc_failure, running

from jobwire.client.status import error_info
from jobwire.db.retention import keep_files
from jobwire.domain.kept_results import RESULT_CHUNK_BYTES
from jobwire.runtime.housekeeping import Housekeeping
from jobwire.v1 import job_pb2, worker_pb2

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
async def kept(serve: Callable[..., Awaitable[Served]], tmp_path: Path) -> Served:
    return await serve(result_store=str(tmp_path / "store"))


async def test_an_inline_json_result_comes_back_from_get_result(kept: Served) -> None:
    job, lease = await running(kept)
    data = json.dumps({"rows": 3}).encode()
    done = await kept.workers.Complete(worker_pb2.CompleteRequest(
        job_no=lease.job_no, worker_token=lease.worker_token, inline_result=data,
        result=job_pb2.Artifact(content_type="application/json", summary="3 rows"),
    ))  # fmt: skip
    assert done.status == job_pb2.Job.READY
    assert done.result.uri == f"jobwire://results/{job.job_no}"
    assert done.result.sha256 == hashlib.sha256(data).hexdigest() and done.result.size_bytes == len(data)
    assert await fetch(kept, job.job_no) == ("application/json", data)
    assert store_files(kept) == []  # inline: kept with the job, nothing in the store


async def test_a_claimed_digest_that_does_not_match_is_refused_and_nothing_changes(kept: Served) -> None:
    _, lease = await running(kept)
    wrong = job_pb2.Artifact(sha256="0" * 64)
    error = await rpc_failure(kept.workers.Complete(worker_pb2.CompleteRequest(
        job_no=lease.job_no, worker_token=lease.worker_token, inline_result=b"abc", result=wrong
    )))  # fmt: skip
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_info(error).reason == "DELIVERABLE_INVALID"
    job = await kept.jobs.Get(job_pb2.GetRequest(job_no=lease.job_no))
    assert job.status == job_pb2.Job.RUNNING


async def test_too_large_an_inline_result_is_refused(serve: Callable[..., Awaitable[Served]], tmp_path: Path) -> None:
    s = await serve(result_store=str(tmp_path / "store"), max_inline_result_bytes=1000)
    _, lease = await running(s)
    error = await rpc_failure(s.workers.Complete(worker_pb2.CompleteRequest(
        job_no=lease.job_no, worker_token=lease.worker_token, inline_result=b"x" * 1001
    )))  # fmt: skip
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and "inline_result" in (error.details() or "")
    assert (await s.jobs.Get(job_pb2.GetRequest(job_no=lease.job_no))).status == job_pb2.Job.RUNNING


async def test_an_upload_completes_and_streams_back_identical(kept: Served) -> None:
    job, lease = await running(kept)
    data = os.urandom(3 * RESULT_CHUNK_BYTES + 17)
    up = await kept.workers.UploadResult(chunks(lease.job_no, lease.worker_token, data, "text/csv"))
    assert up.size_bytes == len(data) and up.sha256 == hashlib.sha256(data).hexdigest()
    done = await kept.workers.Complete(worker_pb2.CompleteRequest(
        job_no=lease.job_no, worker_token=lease.worker_token, upload_id=up.upload_id
    ))  # fmt: skip
    assert done.result.uri == f"jobwire://results/{job.job_no}" and done.result.content_type == "text/csv"
    assert await fetch(kept, job.job_no) == ("text/csv", data)


async def test_an_upload_with_a_forged_token_is_refused_and_leaves_no_file(kept: Served) -> None:
    _, lease = await running(kept)
    forged = lease.worker_token[:-1] + ("0" if lease.worker_token[-1] != "0" else "1")
    error = await rpc_failure(kept.workers.UploadResult(chunks(lease.job_no, forged, b"x" * 5000)))
    assert error_info(error).reason == "WORKER_LEASE_LOST"
    assert store_files(kept) == []


async def test_an_upload_is_only_for_its_own_lease(kept: Served) -> None:
    _, one = await running(kept)
    _, other = await running(kept)
    up = await kept.workers.UploadResult(chunks(one.job_no, one.worker_token, b"mine"))
    error = await rpc_failure(kept.workers.Complete(worker_pb2.CompleteRequest(
        job_no=other.job_no, worker_token=other.worker_token, upload_id=up.upload_id
    )))  # fmt: skip
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and "upload_id" in (error.details() or "")


async def test_get_result_refuses_what_it_cannot_give(kept: Served) -> None:
    job, lease = await running(kept)
    error = await rpc_failure(fetch(kept, job.job_no))
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION and error_info(error).reason == "RESULT_NOT_AVAILABLE"
    await kept.workers.Complete(worker_pb2.CompleteRequest(
        job_no=lease.job_no, worker_token=lease.worker_token, result=artifact("https://files.example/out.bin")
    ))  # fmt: skip
    error = await rpc_failure(fetch(kept, job.job_no))
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION and "result.uri" in (error.details() or "")
    error = await rpc_failure(fetch(kept, "PT-20260101-999"))
    assert error.code() == grpc.StatusCode.NOT_FOUND


async def test_another_tenants_result_is_not_found(serve: Callable[..., Awaitable[Served]], tmp_path: Path) -> None:
    auth = write_auth_file(tmp_path / "auth.toml", [
        Token("ta", tenant="a"), Token("wa", tenant="a", role="worker"), Token("tb", tenant="b"),
    ])  # fmt: skip
    s = await serve(result_store=str(tmp_path / "store"), auth_file=auth)
    a, wa = [("authorization", "Bearer ta")], [("authorization", "Bearer wa")]
    job = (await s.jobs.Submit(job_pb2.SubmitRequest(job_type="frames"), metadata=a)).job
    lease = (await s.workers.Claim(worker_pb2.ClaimRequest(
        worker_id="w", job_types=[worker_pb2.JobTypeSpec(name="frames")]), metadata=wa)).leases[0]  # fmt: skip
    await s.workers.Complete(worker_pb2.CompleteRequest(
        job_no=lease.job_no, worker_token=lease.worker_token, inline_result=b"secret"), metadata=wa)  # fmt: skip
    mine = s.jobs.GetResult(job_pb2.GetResultRequest(job_no=job.job_no), metadata=a)
    assert b"".join([c.data async for c in mine]) == b"secret"
    theirs = s.jobs.GetResult(job_pb2.GetResultRequest(job_no=job.job_no), metadata=[("authorization", "Bearer tb")])
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        [c async for c in theirs]
    assert refused.value.code() == grpc.StatusCode.NOT_FOUND


async def test_retention_and_housekeeping_remove_stored_results(
    serve: Callable[..., Awaitable[Served]], tmp_path: Path
) -> None:
    s = await serve(result_store=str(tmp_path / "store"), retention_ready_days=1e-9, reaper_interval_seconds=0)
    _, lease = await running(s)
    up = await s.workers.UploadResult(chunks(lease.job_no, lease.worker_token, b"x" * 100))
    await s.workers.Complete(worker_pb2.CompleteRequest(
        job_no=lease.job_no, worker_token=lease.worker_token, upload_id=up.upload_id
    ))  # fmt: skip
    _, abandoned = await running(s)
    await s.workers.UploadResult(chunks(abandoned.job_no, abandoned.worker_token, b"never completed"))
    assert len(store_files(s)) == 4  # two uploads, each with its sum
    rt = s.runtime
    keeper = Housekeeping(
        rt.store, rt.blocking, rt.settings, deleter=keep_files, metrics=rt.host.metrics.jobs, results=rt.results
    )
    await keeper.tick()
    error = await rpc_failure(s.jobs.Get(job_pb2.GetRequest(job_no=lease.job_no)))
    assert error.code() == grpc.StatusCode.NOT_FOUND
    assert len(store_files(s)) == 2  # the abandoned upload is not old enough yet
    later = Housekeeping(rt.store, rt.blocking, replace(rt.settings, upload_ttl_seconds=1e-9),
                         deleter=keep_files, metrics=rt.host.metrics.jobs, results=rt.results)  # fmt: skip
    await later.tick()
    assert store_files(s) == []
