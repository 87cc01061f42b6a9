"""Transfers: result downloads (GetResult) and uploads (UploadResult), each holding a file of the result store.

A transfer holds a place in its tenant's share of JOBWIRE_MAX_TRANSFERS (jobwire.runtime.shares)
until gRPC has finished its call: one tenant's thousands of idle uploads once spent the
process's open-file limit, and other tenants' Submits timed out. A transfer that makes no
progress for JOBWIRE_STREAM_IDLE_SECONDS is cut (RESOURCE_EXHAUSTED, TRANSFER_STALLED): a
download whose reader takes nothing (gRPC's flow control holds our next write), an upload
whose writer sends nothing. A download cut that way closes its file at once; gRPC sends its
status after the bytes already queued, when the reader takes them or leaves.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from typing import TypeVar

from jobwire.domain.errors import ResourceExhausted
from jobwire.runtime.shares import TenantShares

T = TypeVar("T")
_END = object()


class TooManyTransfers(ResourceExhausted):
    """This server carries as many result downloads and uploads of yours as it may; try again in a while."""

    reason = "TOO_MANY_TRANSFERS"


class TransferStalled(ResourceExhausted):
    """The transfer made no progress for too long and was cut; start it again."""

    reason = "TRANSFER_STALLED"


class Transfers:
    """The per-tenant share of transfers in flight, and the idle cut."""

    def __init__(self, capacity: int, tenants: int, idle_s: float) -> None:
        self.shares = TenantShares(capacity, tenants)
        self.idle_s = idle_s

    def take(self, tenant: str) -> Callable[[], None]:
        """A place for one transfer of `tenant`, and the call that gives it back; TOO_MANY_TRANSFERS if none is left."""
        return self.shares.take(tenant, TooManyTransfers)

    async def sent(self, write: Awaitable[None]) -> None:
        """`write` (a download's next chunk), cut when the reader takes nothing for the idle time."""
        try:
            await asyncio.wait_for(write, self.idle_s)
        except TimeoutError:
            raise TransferStalled(
                f"the reader took nothing for {self.idle_s:g} s: download cut; fetch the result again"
            ) from None

    async def arriving(self, chunks: AsyncIterable[T], stop: asyncio.Future[None]) -> AsyncIterator[T]:
        """Each of an upload's `chunks` as it comes, cut when none comes for the idle time.

        `stop` ends the upload early: when it completes first, what it raises is raised here.
        """
        source = aiter(chunks)
        while True:
            following: asyncio.Future[object] = asyncio.ensure_future(anext(source, _END))
            try:
                await asyncio.wait((following, stop), timeout=self.idle_s, return_when=asyncio.FIRST_COMPLETED)
            finally:
                arrived = following.done()
                if not arrived:
                    following.cancel()
            if stop.done():
                stop.result()
            if not arrived:
                raise TransferStalled(
                    f"the writer sent nothing for {self.idle_s:g} s: upload cut and nothing kept; upload again"
                )
            item = following.result()
            if item is _END:
                return
            yield item  # type: ignore[misc]
