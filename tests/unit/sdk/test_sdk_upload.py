"""The SDK's default hand-over of a result to the server, against a fake stub: inline when
small, UploadResult in chunks otherwise, with the digest the worker computed."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from jobwire.v1 import job_pb2, worker_pb2
from jobwire.worker.sdk import Result, ResultInvalid, WorkerConfig
from jobwire.worker.sdk._upload import INLINE_MAX, complete_request

LEASE = worker_pb2.Lease(job_no="PT-20260101-001", worker_token="1.abc", job_type="t")


class Uploads:
    """UploadResult as the server answers it, keeping what it received."""

    def __init__(self) -> None:
        self.chunks: list[job_pb2.ResultChunk] = []

    async def UploadResult(
        self, request_iterator: AsyncIterator[job_pb2.ResultChunk], *, timeout: float | None = None
    ) -> worker_pb2.UploadResultResponse:
        async for chunk in request_iterator:
            self.chunks.append(chunk)
        data = b"".join(c.data for c in self.chunks)
        return worker_pb2.UploadResultResponse(
            upload_id="a" * 32, size_bytes=len(data), sha256=hashlib.sha256(data).hexdigest()
        )


async def test_a_small_result_goes_inline_with_its_digest(tmp_path: Path) -> None:
    stub = Uploads()
    request = await complete_request(stub, LEASE, {"rows": 3}, tmp_path)  # type: ignore[arg-type]
    assert stub.chunks == [] and not request.upload_id
    assert request.result.content_type == "application/json" and not request.result.uri
    assert request.result.sha256 == hashlib.sha256(request.inline_result).hexdigest()
    assert request.result.size_bytes == len(request.inline_result)


async def test_a_large_file_is_uploaded_in_chunks_and_named_by_its_upload_id(tmp_path: Path) -> None:
    data = bytes(range(256)) * ((3 * INLINE_MAX) // 256 + 7)
    (tmp_path / "out.bin").write_bytes(data)
    stub = Uploads()
    result = Result.from_file(tmp_path / "out.bin", content_type="application/zip")
    request = await complete_request(stub, LEASE, result, tmp_path)  # type: ignore[arg-type]
    first, *rest = stub.chunks
    assert (first.job_no, first.worker_token, first.content_type) == (
        LEASE.job_no,
        LEASE.worker_token,
        "application/zip",
    )
    assert all(not c.job_no and not c.worker_token for c in rest)
    assert all(len(c.data) <= 1 << 20 for c in stub.chunks)
    assert b"".join(c.data for c in stub.chunks) == data
    assert request.upload_id == "a" * 32 and not request.inline_result
    assert (request.result.size_bytes, request.result.sha256) == (len(data), hashlib.sha256(data).hexdigest())


async def test_not_a_result_is_refused_before_anything_is_sent(tmp_path: Path) -> None:
    stub = Uploads()
    with pytest.raises(ResultInvalid):
        await complete_request(stub, LEASE, 42, tmp_path)  # type: ignore[arg-type]
    assert stub.chunks == []


def test_the_default_config_publishes_nothing_itself() -> None:
    assert not WorkerConfig(target="h:1").publishes_results
    assert WorkerConfig(target="h:1", results_url="https://files.example/r/").results_dir == Path("var/results")
