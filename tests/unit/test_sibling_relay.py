"""A family's relay between its processes: work of a type for waiting claims, and news for event tails."""

from __future__ import annotations

import asyncio
import os

from served import eventually

from jobwire.runtime.family import SiblingRelay


async def test_a_sibling_hears_work_and_news_and_the_sender_hears_neither() -> None:
    heard: dict[int, list[object]] = {0: [], 1: []}
    parent = os.getpid() * 1000 + 7  # no real family's name: abstract sockets are per machine
    relays = [
        SiblingRelay(parent, i, 2, lambda *work, i=i: heard[i].append(work), lambda i=i: heard[i].append("news"))
        for i in (0, 1)
    ]
    try:
        relays[0]("t", "default", "frames")
        relays[0].news()

        async def both() -> bool:
            return len(heard[1]) == 2

        await eventually(both, what="the sibling heard the work and the news")
        assert heard[1] == [("t", "default", "frames"), "news"]
        await asyncio.sleep(0)
        assert heard[0] == []
    finally:
        for relay in relays:
            relay.close()
