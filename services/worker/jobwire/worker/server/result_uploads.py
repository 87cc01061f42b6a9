"""Use cases behind a worker's kept results: UploadResult, and a Complete that names its bytes.

Fenced like every worker call: the lease is checked before the first byte is kept and again
after the last, and the Complete that names the upload is the guarded write that checks it
once more. An upload refused, broken off, over JOBWIRE_MAX_RESULT_BYTES or from a lease lost
meanwhile leaves nothing in the result store.

A lease keeps one upload: a later UploadResult of the same lease replaces an earlier one
still going in this process (which ends ABORTED, UPLOAD_REPLACED, its bytes removed), so a
worker that retries after a broken connection is never refused for its own first try; an
upload that finishes removes the lease's uploads finished before it (the newest finished one
is kept, whichever process took it). An upload that ends after its lease was revoked or
ended is removed at once (WORKER_LEASE_LOST); any ending of a lease removes its uploads but
the one its Complete named (jobwire.runtime.lease_uploads). In this process a lease's
finishing uploads and its Complete take turns, so an upload never removes the one a Complete
is keeping.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import AsyncIterable, AsyncIterator, Iterator

from jobwire.db.store import JobStore
from jobwire.domain.errors import InvalidArgument, JobwireError, WorkerLeaseLost
from jobwire.domain.job import Artifact, JobRecord
from jobwire.domain.kept_results import KeptResult, kept_artifact
from jobwire.runtime.blocking import Blocking
from jobwire.runtime.result_store import ResultStore, lease_folder, new_upload_id
from jobwire.worker.server.leasing import Leasing


class UploadReplaced(JobwireError):
    """A later UploadResult of this lease replaced this one; nothing of this one was kept."""

    code = "ABORTED"
    reason = "UPLOAD_REPLACED"


class Results:
    def __init__(
        self,
        store: JobStore,
        blocking: Blocking,
        results: ResultStore,
        leasing: Leasing,
        *,
        max_inline: int,
        max_bytes: int,
    ) -> None:
        self.store = store
        self.blocking = blocking
        self.results = results
        self.leasing = leasing
        self.max_inline = max_inline
        self.max_bytes = max_bytes  # JOBWIRE_MAX_RESULT_BYTES
        self._uploading: dict[str, asyncio.Future[None]] = {}  # lease folder -> its upload's early end
        self._turns: dict[str, tuple[asyncio.Lock, int]] = {}  # lease folder -> its lock, and who holds or waits

    async def upload(
        self,
        tenant: str,
        job_no: str,
        token: str,
        content_type: str,
        chunks: AsyncIterable[bytes],
        stop: asyncio.Future[None],
    ) -> tuple[str, int, str]:
        """(upload_id, size_bytes, sha256) of the bytes written while the lease was held.

        `stop` is how a later upload of the lease ends this one: it raises UPLOAD_REPLACED
        where `chunks` are read (jobwire.runtime.transfers.Transfers.arriving).
        """
        if not await self.blocking(self.store.lease_held, tenant, job_no, token):
            raise WorkerLeaseLost()
        folder, upload_id = lease_folder(tenant, job_no, token), new_upload_id()
        with self._only_upload(folder, stop):
            size, sha256 = await self.results.receive(
                f"{folder}/{upload_id}", chunks, content_type, limit=self.max_bytes
            )
        async with self._turn(folder):
            if not await self.blocking(self.store.lease_held, tenant, job_no, token):
                # Revoked or ended meanwhile: no Complete can name it now. Only this upload goes:
                # another of the lease may be the result its Complete kept.
                await self.results.remove(f"{folder}/{upload_id}")
                raise WorkerLeaseLost()
            # The lease's earlier finished uploads go: two of 200 MiB were once both kept.
            kept = await self.results.blocking(self.results.keep_newest_now, folder)
            if kept is None:
                raise WorkerLeaseLost()  # its lease's ending removed it since the check
            if kept != upload_id:
                raise UploadReplaced()  # another process finished one of this lease after it
        return upload_id, size, sha256

    @contextlib.asynccontextmanager
    async def _turn(self, folder: str) -> AsyncIterator[None]:
        """The block runs alone among this process's finishing uploads and Completes of the lease."""
        lock, users = self._turns.get(folder, (asyncio.Lock(), 0))
        self._turns[folder] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._turns[folder]
            if users == 1:
                del self._turns[folder]
            else:
                self._turns[folder] = (lock, users - 1)

    @contextlib.contextmanager
    def _only_upload(self, folder: str, stop: asyncio.Future[None]) -> Iterator[None]:
        """While the block runs, the lease's one upload in flight here is this one."""
        earlier = self._uploading.get(folder)
        if earlier is not None and not earlier.done():
            earlier.set_exception(UploadReplaced())
        self._uploading[folder] = stop
        try:
            yield
        finally:
            if self._uploading.get(folder) is stop:
                del self._uploading[folder]
            if stop.done() and not stop.cancelled():
                stop.exception()  # replaced just as it finished: seen, so asyncio does not warn

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
        folder = lease_folder(tenant, job_no, token)
        key = f"{folder}/{upload_id}"
        async with self._turn(folder):
            size, sha256, content_type = await self.results.summed(key)
            if claimed is None or not claimed.content_type:
                claimed = Artifact(
                    uri="", size_bytes=0, sha256="", content_type=content_type,
                    summary=claimed.summary if claimed else "",
                )  # fmt: skip
            result = kept_artifact(job_no, claimed, size, sha256)
            try:
                # Its COMMIT has the lease's other uploads removed (jobwire.runtime.lease_uploads).
                return await self.leasing.complete(tenant, job_no, token, result, KeptResult(stored_key=key))
            except WorkerLeaseLost:
                await self.results.remove(key)  # this lease will never complete with it: it goes now
                raise
