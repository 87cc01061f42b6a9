"""grpcio unary echo on loopback, aio server (a subprocess) and aio client: the RPC ceiling.

`python bench/echo.py` serves and prints "echo serving on port N"; `run_echo` starts that
server, drives it with `clients` concurrent callers for a window, and stops it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import grpc
from measure import CpuMeter, latencies_in, pct

METHOD = "/bench.Echo/Echo"
PAYLOAD = b"x" * 64


async def _serve() -> None:
    async def echo(request: bytes, context: Any) -> bytes:
        return request

    server = grpc.aio.server()
    handler = grpc.unary_unary_rpc_method_handler(echo)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("bench.Echo", {"Echo": handler}),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(f"echo serving on port {port}", flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await server.stop(1)


@dataclass
class EchoResult:
    clients: int
    calls_per_s: float
    p50_ms: float
    p99_ms: float
    server_cpu_ms_per_call: float
    calls: list[tuple[float, float]] = field(default_factory=list, repr=False)


def run_echo(clients: int, seconds: float, warmup: float) -> EchoResult:
    proc = subprocess.Popen([sys.executable, __file__], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline().decode().rsplit(" ", 1)[1])
        calls: list[tuple[float, float]] = []
        stop_at = time.monotonic() + warmup + seconds

        async def caller(channel: grpc.aio.Channel) -> None:
            echo = channel.unary_unary(METHOD)
            while time.monotonic() < stop_at:
                t = time.monotonic()
                await echo(PAYLOAD, timeout=10)
                calls.append((t, time.monotonic() - t))

        async def main() -> None:
            channels = [grpc.aio.insecure_channel(f"127.0.0.1:{port}") for _ in range(clients)]
            await asyncio.gather(*(caller(ch) for ch in channels))
            for ch in channels:
                await ch.close()

        meter = CpuMeter({"server": proc.pid})
        thread = threading.Thread(target=lambda: asyncio.run(main()), daemon=True)
        thread.start()
        time.sleep(warmup)
        t0, cpu0 = time.monotonic(), meter.sample()
        time.sleep(seconds)
        t1, cpu1 = time.monotonic(), meter.sample()
        thread.join(timeout=30)
        inside = [c for c in calls if t0 <= c[0] + c[1] < t1]
        lat = latencies_in(calls, _Span(t0, t1))
        cpu = CpuMeter.delta(cpu0, cpu1).get("server", float("nan"))
        return EchoResult(
            clients=clients,
            calls_per_s=len(inside) / (t1 - t0),
            p50_ms=pct(lat, 50),
            p99_ms=pct(lat, 99),
            server_cpu_ms_per_call=cpu * 1000 / len(inside) if inside else float("nan"),
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


@dataclass
class _Span:
    t0: float
    t1: float


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    asyncio.run(_serve())
