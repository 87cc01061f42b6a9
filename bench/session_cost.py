"""Server CPU per ReportStage: one unary RPC per report against the same reports as frames of a Session.

    .venv/bin/python bench/session_cost.py                          # 8 clients x 500 reports, 3 rounds
    .venv/bin/python bench/session_cost.py --clients 4 --reports 200

`python -m jobwire serve` (one serving process, JOBWIRE_PROCESSES=1) on a fresh SQLite file
in a temporary folder, port 0. Each client is a worker with a connection of its own and one
leased job (Submit, then Claim with a 10-minute lease). Each round measures both ways, in
an order that alternates round by round:

  - unary: every client sends --reports ReportStage calls on its job, one after another;
  - session: every client opens one WorkerService.Session (opened and answered once before
    the count starts) and sends the same reports as frames, one after another, each waiting
    for its answer: as many reports are in flight as with unary calls, so the server's
    group commit sees the same concurrency, and what differs is the transport.

The server's CPU (user + system of its process and any child, /proc/PID/stat) is read
before and after each way: per report = delta / (clients x reports). Printed: every round,
then the medians over the rounds of each way and of the ratio session / unary (paired
within a round). Only the server's CPU is compared: the clients share the 2 cores, so their
own cost is no part of the figure. No test asserts it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import grpc
from measure import CpuMeter, median

from jobwire.v1 import job_pb2, job_pb2_grpc, worker_pb2, worker_pb2_grpc

JOB_TYPE = "bench.session"
OWN_CONNECTION = [("grpc.use_local_subchannel_pool", 1)]
LEASE_S = 600
RPC_TIMEOUT_S = 30.0


def start_server(folder: Path) -> tuple[subprocess.Popen[str], int]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "JOBWIRE_DATABASE_URL": f"sqlite:///{folder / 'jobwire.db'}",
           "JOBWIRE_LISTEN": "127.0.0.1:0", "JOBWIRE_PROCESSES": "1"}  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-m", "jobwire", "serve"], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    assert proc.stdout is not None
    output: list[str] = []
    for line in proc.stdout:
        output.append(line)
        found = re.search(r"jobwire serving on port (\d+)", line)
        if found:
            threading.Thread(target=lambda: output.extend(proc.stdout or ()), daemon=True).start()
            return proc, int(found.group(1))
    raise RuntimeError("the server did not start:\n" + "".join(output)[-4000:])


class Worker:
    """One client: a connection of its own, one leased job, and the reports it sends on it."""

    def __init__(self, port: int) -> None:
        self.channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=OWN_CONNECTION)
        self.jobs = job_pb2_grpc.JobServiceStub(self.channel)
        self.workers = worker_pb2_grpc.WorkerServiceStub(self.channel)
        self.lease = worker_pb2.Lease()
        self.units = 0
        self.session: grpc.aio.StreamStreamCall | None = None

    async def take_a_job(self) -> None:
        await self.jobs.Submit(job_pb2.SubmitRequest(job_type=JOB_TYPE), timeout=RPC_TIMEOUT_S)
        claim = worker_pb2.ClaimRequest(
            worker_id=f"bench-{id(self)}", job_types=[worker_pb2.JobTypeSpec(name=JOB_TYPE)]
        )
        claim.lease_duration.FromSeconds(LEASE_S)
        claim.wait.FromSeconds(5)
        (self.lease,) = (await self.workers.Claim(claim, timeout=RPC_TIMEOUT_S)).leases

    def report(self) -> worker_pb2.ReportStageRequest:
        self.units += 1  # a report never goes back: each one's units are the last one's + 1
        return worker_pb2.ReportStageRequest(
            job_no=self.lease.job_no, worker_token=self.lease.worker_token, stage="PROCESSING",
            processed_units=self.units,
        )  # fmt: skip

    async def unary(self, reports: int) -> None:
        for _ in range(reports):
            await self.workers.ReportStage(self.report(), timeout=RPC_TIMEOUT_S)

    async def open_session(self) -> None:
        self.session = self.workers.Session()
        await self.framed(1)

    async def framed(self, reports: int) -> None:
        assert self.session is not None
        for _ in range(reports):
            request = self.report()  # one in flight at a time: its units number the call too
            await self.session.write(worker_pb2.WorkerFrame(call_id=self.units, report_stage=request))
            reply = await asyncio.wait_for(self.session.read(), RPC_TIMEOUT_S)
            if reply is grpc.aio.EOF or reply.WhichOneof("reply") != "report_stage":
                raise RuntimeError(f"a framed report was not answered: {reply}")

    async def close_session(self) -> None:
        assert self.session is not None
        await self.session.done_writing()
        if await self.session.read() is not grpc.aio.EOF or await self.session.code() != grpc.StatusCode.OK:
            raise RuntimeError("the session did not end OK after its half-close")
        self.session = None


@dataclass
class Round:
    unary_ms: float  # server CPU per report
    session_ms: float

    @property
    def ratio(self) -> float:
        return self.session_ms / self.unary_ms


async def _way(meter: CpuMeter, workers: list[Worker], session: bool, reports: int) -> float:
    """Server CPU ms per report of one way (its setup and teardown uncounted)."""
    if session:
        await asyncio.gather(*(w.open_session() for w in workers))
    before = meter.sample()
    await asyncio.gather(*(w.framed(reports) if session else w.unary(reports) for w in workers))
    spent = CpuMeter.delta(before, meter.sample())["server"]
    if session:
        await asyncio.gather(*(w.close_session() for w in workers))
    return spent * 1000 / (len(workers) * reports)


async def measure(port: int, pid: int, args: argparse.Namespace) -> list[Round]:
    meter = CpuMeter({"server": pid}, trees=frozenset({"server"}))
    workers = [Worker(port) for _ in range(args.clients)]
    try:
        await asyncio.gather(*(w.take_a_job() for w in workers))
        await asyncio.gather(*(w.unary(20) for w in workers))  # warm: connections, caches, the first transactions
        rounds = []
        for n in range(args.rounds):
            figures = {}
            for session in (False, True) if n % 2 == 0 else (True, False):
                figures[session] = await _way(meter, workers, session, args.reports)
            rounds.append(Round(unary_ms=figures[False], session_ms=figures[True]))
            print(f"round {n + 1}: server CPU per report  unary {figures[False]:.3f} ms  session {figures[True]:.3f} ms"
                  f"  session/unary {rounds[-1].ratio:.2f}", flush=True)  # fmt: skip
        return rounds
    finally:
        for w in workers:
            await w.channel.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=8, help="workers, one leased job and one connection each")
    parser.add_argument("--reports", type=int, default=500, help="reports per client and way in each round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="jw-session-") as tmp:
        proc, port = start_server(Path(tmp))
        try:
            rounds = asyncio.run(measure(port, proc.pid, args))
        finally:
            proc.terminate()
            proc.wait(30)
    unary, framed = median(r.unary_ms for r in rounds), median(r.session_ms for r in rounds)
    print(f"\n{args.clients} clients x {args.reports} reports, {args.rounds} rounds, SQLite, one serving process")
    print(f"median server CPU per report: unary {unary:.3f} ms, session {framed:.3f} ms;"
          f" median session/unary {median(r.ratio for r in rounds):.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
