"""Handing a result to the server (the default): inline in Complete when small, else UploadResult.

The bytes are read from the handler's file a chunk at a time on a thread and hashed as they
go; the server hashes them again and the two digests must agree. No result folder, no URL:
a client fetches the bytes with GetResult from wherever it is.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import BinaryIO

from jobwire.v1 import job_pb2, worker_pb2
from jobwire.worker.sdk._result import CHUNK, as_result, open_source
from jobwire.worker.sdk._rpc import WorkerStub

# Below the server's default JOBWIRE_MAX_INLINE_RESULT (1 MiB), so a server with its default
# or a smaller one set down to this still takes it inline.
INLINE_MAX = 256 << 10


async def complete_request(
    stub: WorkerStub, lease: worker_pb2.Lease, result: object, tmp_dir: Path
) -> worker_pb2.CompleteRequest:
    """The CompleteRequest naming this result's bytes, uploaded first when they are large.

    Raises ResultInvalid for a result that is not one, DependencyFailed when the file cannot be
    read, and the call's grpc error when an upload is refused (WORKER_LEASE_LOST, ...).
    """
    kept = as_result(result)
    request = worker_pb2.CompleteRequest(
        job_no=lease.job_no, worker_token=lease.worker_token,
        result=job_pb2.Artifact(content_type=kept.content_type, summary=kept.summary),
    )  # fmt: skip
    with open_source(kept, tmp_dir) as src:
        # Bytes in memory (a JSON result, say) are read here; a file on a thread.
        head = src.read(INLINE_MAX + 1) if kept.data is not None else await asyncio.to_thread(src.read, INLINE_MAX + 1)
        if len(head) <= INLINE_MAX:
            request.inline_result = head
            request.result.size_bytes = len(head)
            request.result.sha256 = hashlib.sha256(head).hexdigest()
            return request
        digest = hashlib.sha256()
        chunks = _chunks(lease, kept.content_type, head, src, digest)
        reply: worker_pb2.UploadResultResponse = await stub.UploadResult(chunks)
    request.upload_id = reply.upload_id
    request.result.size_bytes = reply.size_bytes
    request.result.sha256 = digest.hexdigest()  # the server checks it against what it stored
    return request


async def _chunks(
    lease: worker_pb2.Lease, content_type: str, head: bytes, src: BinaryIO, digest: hashlib._Hash
) -> AsyncIterator[job_pb2.ResultChunk]:
    digest.update(head)
    for at in range(0, len(head), CHUNK):
        piece = head[at : at + CHUNK]
        if at == 0:
            yield job_pb2.ResultChunk(
                job_no=lease.job_no, worker_token=lease.worker_token, content_type=content_type, data=piece
            )
        else:
            yield job_pb2.ResultChunk(data=piece)
    while data := await asyncio.to_thread(src.read, CHUNK):
        digest.update(data)
        yield job_pb2.ResultChunk(data=data)
