"""What a user waits for from an idle SDK worker, over a Session and over unary calls.

    .venv/bin/python bench/session_latency.py                          # 2 runs: 50 starts, 10 cancels each way
    .venv/bin/python bench/session_latency.py --runs 1 --starts 20 --cancels 5

`python -m jobwire serve` as it ships (one serving process per core, default settings) on
a fresh MariaDB database, and a `jobwire-worker` process (bench/latency_handlers.py, its
defaults: 4 slots, 30 s leases, heartbeats every 10 s, 5 s long polls) started with
`--transport session`, then stopped, then one with `--transport unary` (the order
alternating run by run), each proven ready by one warm-up job:

- start: with the worker idle (a pause of 0.2-0.5 s, so nothing is in step with a poll),
  the time from a Submit's start to its handler's first line. Session: the server pushes
  the lease to the worker's standing claim; unary: the worker's long-polling Claim returns.
- cancel: a job's handler runs, calling ctx.check() every 2 ms; after a pause drawn from
  0-10 s (a heartbeat interval, so a Cancel falls anywhere in the heartbeat's cycle), the
  time from a Cancel's start to ctx.check() raising JobCancelled. Session: the server
  pushes `cancel_requested`; unary: the next heartbeat's answer says so (a handler that
  reports progress hears it sooner, in a report's answer: this one reports none). Four
  lanes of cancels at once, one per slot of the worker.

Both ends are read from time.time(), one clock for every process of the machine: the
handler writes its moment to a file (bench/latency_handlers.py), the bench polls for it.
Printed: every run's p50 / p99 per way, then the pooled p50 / p99 and the medians of
session / unary paired run by run. No test asserts these figures.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from e2e import Server
from latency_handlers import CANCEL_TYPE, START_TYPE
from measure import median, pct

from jobwire.v1 import job_pb2, job_pb2_grpc

BENCH = Path(__file__).resolve().parent
VENV_BIN = Path(sys.executable).parent
TRANSPORTS = ("session", "unary")
STAMP_TIMEOUT_S = 60.0
POLL_S = 0.001  # how often the bench looks for a stamp: the stamp's own time is what counts
RPC_TIMEOUT_S = 30.0
SLOTS = 4  # the worker's default concurrency: the cancels run in as many lanes
HEARTBEAT_S = 10.0  # the SDK's heartbeat interval: a third of the server's default 30 s lease


@dataclass
class Way:
    transport: str
    start_ms: list[float] = field(default_factory=list)
    cancel_ms: list[float] = field(default_factory=list)


def start_worker(port: int, transport: str, stamps: Path, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "JWBENCH_STAMPS": str(stamps),
           "PYTHONPATH": os.pathsep.join([str(BENCH), os.environ.get("PYTHONPATH", "")])}  # fmt: skip
    with open(log, "ab") as out:
        return subprocess.Popen(
            [str(VENV_BIN / "jobwire-worker"), "--target", f"127.0.0.1:{port}", "--handlers",
             "latency_handlers:handlers", "--transport", transport, "--log-level", "WARNING"],
            cwd=BENCH, env=env, stdout=out, stderr=out,
        )  # fmt: skip


async def stamped(stamps: Path, job_no: str, what: str) -> float:
    """The moment (time.time()) the handler of `job_no` wrote for `what`."""
    path = stamps / f"{job_no}.{what}"
    deadline = time.monotonic() + STAMP_TIMEOUT_S
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"job {job_no}: no {what} stamp in {STAMP_TIMEOUT_S:.0f} s")
        await asyncio.sleep(POLL_S)
    return float(path.read_text())


async def measure(port: int, way: Way, stamps: Path, args: argparse.Namespace) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        jobs = job_pb2_grpc.JobServiceStub(channel)

        async def submit(job_type: str) -> tuple[float, str]:
            sent = time.time()
            reply = await jobs.Submit(job_pb2.SubmitRequest(job_type=job_type, payload=b"{}"), timeout=RPC_TIMEOUT_S)
            return sent, reply.job.job_no

        _, warm = await submit(START_TYPE)  # the worker is up and claiming
        await stamped(stamps, warm, "start")
        for _ in range(args.starts):
            await asyncio.sleep(random.uniform(0.2, 0.5))
            sent, job_no = await submit(START_TYPE)
            way.start_ms.append((await stamped(stamps, job_no, "start") - sent) * 1000)

        async def cancel_lane(rounds: int) -> None:
            for _ in range(rounds):
                _, job_no = await submit(CANCEL_TYPE)
                await stamped(stamps, job_no, "start")
                await asyncio.sleep(random.uniform(0, HEARTBEAT_S))
                sent = time.time()
                await jobs.Cancel(job_pb2.CancelRequest(job_no=job_no), timeout=RPC_TIMEOUT_S)
                way.cancel_ms.append((await stamped(stamps, job_no, "cancelled") - sent) * 1000)

        await asyncio.gather(*(cancel_lane(len(range(lane, args.cancels, SLOTS))) for lane in range(SLOTS)))


def p50_p99(ms: list[float]) -> str:
    return f"{pct(ms, 50):.1f} / {pct(ms, 99):.1f}" if ms else "–"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=2, help="runs, each measuring both transports (default 2)")
    parser.add_argument("--starts", type=int, default=50, help="Submit -> start samples per transport and run")
    parser.add_argument("--cancels", type=int, default=10, help="Cancel -> check() samples per transport and run")
    parser.add_argument("--keep", action="store_true", help="keep the database and the logs")
    args = parser.parse_args()
    started = time.monotonic()
    folder = Path(tempfile.mkdtemp(prefix="jwbench-latency-"))
    stamps = folder / "stamps"
    stamps.mkdir()
    server = Server(f"jwbench_latency_{secrets.token_hex(3)}", folder / "server.log")
    runs: list[dict[str, Way]] = []
    try:
        for run in range(1, args.runs + 1):
            ways: dict[str, Way] = {}
            for transport in TRANSPORTS if run % 2 else TRANSPORTS[::-1]:
                worker = start_worker(server.port, transport, stamps, folder / f"worker-{transport}.log")
                try:
                    ways[transport] = way = Way(transport)
                    asyncio.run(measure(server.port, way, stamps, args))
                finally:
                    worker.terminate()
                    worker.wait(timeout=60)
                print(f"[{time.strftime('%H:%M:%S')}] run {run} · {transport}: start p50/p99"
                      f" {p50_p99(way.start_ms)} ms, cancel p50/p99 {p50_p99(way.cancel_ms)} ms",
                      file=sys.stderr, flush=True)  # fmt: skip
            runs.append(ways)
    finally:
        server.stop(drop=not args.keep)
    print(report(runs, args, time.monotonic() - started))
    if args.keep:
        print(f"\nlogs and stamps kept in {folder}")
    else:
        shutil.rmtree(folder)


def report(runs: list[dict[str, Way]], args: argparse.Namespace, elapsed: float) -> str:
    lines = [
        f"## An idle SDK worker's latency — {args.runs} run(s), {args.starts} starts and {args.cancels} cancels"
        " per transport and run",
        "",
        f"- command: `python {' '.join(sys.argv)}` ({elapsed:.0f} s)",
        "",
        "| transport | Submit → handler starts, p50 / p99 ms | Cancel → ctx.check() raises, p50 / p99 ms |",
        "|---|---|---|",
    ]
    for transport in TRANSPORTS:
        starts = [x for ways in runs for x in ways[transport].start_ms]
        cancels = [x for ways in runs for x in ways[transport].cancel_ms]
        lines.append(f"| {transport} | {p50_p99(starts)} | {p50_p99(cancels)} |")
    lines.append("")
    for what in ("start", "cancel"):
        pairs = [(getattr(w["session"], f"{what}_ms"), getattr(w["unary"], f"{what}_ms")) for w in runs]
        if all(s and u for s, u in pairs):
            p50, p99 = (median(pct(s, q) / pct(u, q) for s, u in pairs) for q in (50, 99))
            lines.append(f"- {what}: session / unary, paired per run: p50 {p50:.3f}, p99 {p99:.3f}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
