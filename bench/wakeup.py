"""What a round trip costs on this machine after an idle pause, against one right after another.

    .venv/bin/python bench/wakeup.py                 # 40 trips each way, 3 rounds
    .venv/bin/python bench/wakeup.py --trips 20 --rounds 1

Two echoes in one process, each timed back to back and after a pause of 0.2-0.4 s (as
bench/session_latency.py pauses between Submits, so nothing is in step with a poll):

  - tcp: asyncio streams on loopback, 100 bytes each way (the floor of any hop);
  - grpc: a grpc.aio unary call of 100 bytes to a grpc.aio server (jobwire's transport).

An idle vCPU halts and is woken again, and each thread a message crosses pays that: the
figures put the hops of Submit -> handler starts (client, server, database, sibling, worker)
in their place. Printed: medians per way and round, and the paused / back-to-back ratio.
No test asserts them.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
from collections.abc import Awaitable, Callable

import grpc
from measure import median

PAUSE_S = (0.2, 0.4)
PAYLOAD = b"x" * 100


async def timed(trip: Callable[[], Awaitable[None]], trips: int, paused: bool) -> float:
    """The median milliseconds of `trips` round trips."""
    taken = []
    for _ in range(trips):
        if paused:
            await asyncio.sleep(random.uniform(*PAUSE_S))
        start = time.perf_counter()
        await trip()
        taken.append((time.perf_counter() - start) * 1000)
    return median(taken)


async def tcp_ways(trips: int) -> dict[str, float]:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(len(PAYLOAD)):
            writer.write(data)
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])

    async def trip() -> None:
        writer.write(PAYLOAD)
        await reader.readexactly(len(PAYLOAD))

    try:
        return {"back to back": await timed(trip, trips, False), "paused": await timed(trip, trips, True)}
    finally:
        writer.close()
        server.close()
        await server.wait_closed()


async def grpc_ways(trips: int) -> dict[str, float]:
    async def echo(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return request

    def same(data: bytes) -> bytes:
        return data

    server = grpc.aio.server()
    handler = grpc.unary_unary_rpc_method_handler(echo, request_deserializer=same, response_serializer=same)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("bench.Echo", {"Echo": handler}),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = channel.unary_unary("/bench.Echo/Echo", request_serializer=same, response_deserializer=same)

            async def trip() -> None:
                await call(PAYLOAD)

            await timed(trip, 5, False)  # the connection made, not timed
            return {"back to back": await timed(trip, trips, False), "paused": await timed(trip, trips, True)}
    finally:
        await server.stop(None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trips", type=int, default=40, help="round trips per way and round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    found: dict[str, list[dict[str, float]]] = {"tcp": [], "grpc": []}
    for n in range(1, args.rounds + 1):
        for name, ways in (("tcp", tcp_ways), ("grpc", grpc_ways)):
            got = asyncio.run(ways(args.trips))
            found[name].append(got)
            print(f"round {n} {name}: back to back {got['back to back']:.3f} ms, paused {got['paused']:.3f} ms",
                  flush=True)  # fmt: skip
    print(f"\n{args.trips} round trips per way, {args.rounds} rounds (medians of the rounds' medians)")
    for name, rounds in found.items():
        warm, cold = (median(r[way] for r in rounds) for way in ("back to back", "paused"))
        print(f"{name}: back to back {warm:.3f} ms, after a 0.2-0.4 s pause {cold:.3f} ms ({cold / warm:.1f}x)")


if __name__ == "__main__":
    main()
