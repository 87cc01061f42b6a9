"""GetResult's use case: the bytes of a READY job's result the server keeps, in chunks.

The servicer writes each chunk only when gRPC has taken the one before (the reader's flow
control), so a download holds one chunk at a time, never the result read ahead.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing

from jobwire.domain.kept_results import DOWNLOAD_CHUNK_BYTES, KeptResult
from jobwire.runtime.result_store import ResultStore


class ResultReader:
    def __init__(self, results: ResultStore) -> None:
        self.results = results

    async def chunks(self, kept: KeptResult) -> AsyncGenerator[bytes, None]:
        """The bytes of a kept result (found by the store's `kept_result`), a chunk at a time."""
        if kept.inline is not None:
            for at in range(0, max(len(kept.inline), 1), DOWNLOAD_CHUNK_BYTES):
                yield kept.inline[at : at + DOWNLOAD_CHUNK_BYTES]
            return
        assert kept.stored_key is not None
        async with aclosing(self.results.read(kept.stored_key)) as read:
            async for data in read:
                yield data
