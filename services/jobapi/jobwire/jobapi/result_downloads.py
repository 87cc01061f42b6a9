"""GetResult's use case: the bytes of a READY job's result the server keeps, in chunks.

The servicer writes each chunk only when gRPC has taken the one before (the reader's flow
control), so a download holds one chunk at a time, never the result read ahead.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing

from jobwire.db.store import JobStore
from jobwire.domain.kept_results import DOWNLOAD_CHUNK_BYTES, KeptResult
from jobwire.rpc.auth import Principal
from jobwire.runtime.blocking import Blocking
from jobwire.runtime.result_store import ResultStore


class ResultReader:
    def __init__(self, store: JobStore, blocking: Blocking, results: ResultStore) -> None:
        self.store = store
        self.blocking = blocking
        self.results = results

    async def open(self, who: Principal, job_no: str) -> tuple[str, AsyncGenerator[bytes, None]]:
        """The content type and the bytes; NOT_FOUND for a job the caller does not see (another
        tenant's, a queue its token may not use), FAILED_PRECONDITION without one."""
        content_type, kept = await self.blocking(self.store.kept_result, who.scope, job_no)
        return content_type, self._chunks(kept)

    async def _chunks(self, kept: KeptResult) -> AsyncGenerator[bytes, None]:
        if kept.inline is not None:
            for at in range(0, max(len(kept.inline), 1), DOWNLOAD_CHUNK_BYTES):
                yield kept.inline[at : at + DOWNLOAD_CHUNK_BYTES]
            return
        assert kept.stored_key is not None
        async with aclosing(self.results.read(kept.stored_key)) as read:
            async for data in read:
                yield data
