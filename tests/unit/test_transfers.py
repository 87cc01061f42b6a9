"""The idle cut and early end of a transfer (jobwire.runtime.transfers), on fake streams."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from jobwire.domain.errors import JobwireError
from jobwire.runtime.transfers import TooManyTransfers, Transfers, TransferStalled


async def pieces(*items: bytes, then_wait: asyncio.Event | None = None) -> AsyncIterator[bytes]:
    for item in items:
        yield item
    if then_wait is not None:
        await then_wait.wait()


class Replaced(JobwireError):
    """replaced"""


async def test_chunks_pass_through_and_the_stream_ends() -> None:
    stop: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    got = [c async for c in Transfers(4, 1, 5.0).arriving(pieces(b"a", b"b"), stop)]
    assert got == [b"a", b"b"]


async def test_a_writer_that_sends_nothing_is_cut() -> None:
    stop: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    got = []
    with pytest.raises(TransferStalled, match=r"0\.05 s"):
        async for c in Transfers(4, 1, 0.05).arriving(pieces(b"a", then_wait=asyncio.Event()), stop):
            got.append(c)
    assert got == [b"a"]


async def test_an_early_end_raises_its_reason_where_chunks_are_read() -> None:
    stop: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    arriving = Transfers(4, 1, 60.0).arriving(pieces(b"a", then_wait=asyncio.Event()), stop)
    assert await anext(arriving) == b"a"
    asyncio.get_running_loop().call_soon(stop.set_exception, Replaced())
    with pytest.raises(Replaced):
        await anext(arriving)


async def test_a_reader_that_takes_nothing_is_cut() -> None:
    with pytest.raises(TransferStalled, match="download cut"):
        await Transfers(4, 1, 0.05).sent(asyncio.Event().wait())  # type: ignore[arg-type]


def test_places_are_shared_among_tenants() -> None:
    transfers = Transfers(2, 2, 60.0)
    give_back = transfers.take("a")
    with pytest.raises(TooManyTransfers):
        transfers.take("a")
    transfers.take("b")
    give_back()
    transfers.take("a")
