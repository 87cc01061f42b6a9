"""Use cases behind a worker's kept results: UploadResult, and a Complete that names its bytes.

Fenced like every worker call: the lease is checked before the first byte is kept, and the
Complete that names the upload is the guarded write that checks it again. An upload refused,
broken off or from a lost lease leaves nothing in the result store.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterable

from jobwire.db.store import JobStore
from jobwire.domain.errors import InvalidArgument, WorkerLeaseLost
from jobwire.domain.job import Artifact, JobRecord
from jobwire.domain.results import KeptResult, kept_artifact
from jobwire.runtime.blocking import Blocking
from jobwire.runtime.results import ResultStore, new_upload_id, upload_key
from jobwire.worker.server.leasing import Leasing


class Results:
    def __init__(
        self, store: JobStore, blocking: Blocking, results: ResultStore, leasing: Leasing, *, max_inline: int
    ) -> None:
        self.store = store
        self.blocking = blocking
        self.results = results
        self.leasing = leasing
        self.max_inline = max_inline

    async def upload(
        self, tenant: str, job_no: str, token: str, content_type: str, chunks: AsyncIterable[bytes]
    ) -> tuple[str, int, str]:
        """(upload_id, size_bytes, sha256) of the bytes written, once the lease is known to be held."""
        if not await self.blocking(self.store.lease_held, tenant, job_no, token):
            raise WorkerLeaseLost()
        upload_id = new_upload_id()
        size, sha256 = await self.results.receive(upload_key(tenant, job_no, token, upload_id), chunks, content_type)
        return upload_id, size, sha256

    async def complete_inline(
        self, tenant: str, job_no: str, token: str, data: bytes, claimed: Artifact | None
    ) -> JobRecord:
        if len(data) > self.max_inline:
            raise InvalidArgument(
                "inline_result", f"at most {self.max_inline} bytes; upload a larger result with UploadResult"
            )
        result = kept_artifact(job_no, claimed, len(data), hashlib.sha256(data).hexdigest())
        return await self.leasing.complete(tenant, job_no, token, result, KeptResult(inline=data))

    async def complete_upload(
        self, tenant: str, job_no: str, token: str, upload_id: str, claimed: Artifact | None
    ) -> JobRecord:
        key = upload_key(tenant, job_no, token, upload_id)
        size, sha256, content_type = await self.results.summed(key)
        if claimed is None or not claimed.content_type:
            claimed = Artifact(
                uri="", size_bytes=0, sha256="", content_type=content_type, summary=claimed.summary if claimed else ""
            )
        result = kept_artifact(job_no, claimed, size, sha256)
        try:
            return await self.leasing.complete(tenant, job_no, token, result, KeptResult(stored_key=key))
        except WorkerLeaseLost:
            await self.results.remove(key)  # this lease will never complete: its upload goes now
            raise
