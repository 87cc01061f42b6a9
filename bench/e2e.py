"""jobwire end to end over gRPC: a server subprocess on a fresh database, raw aio stubs.

Each client is one coroutine running the same closed loop as the raw baseline, through
the public API instead of SQL:

    Submit -> Claim(max_jobs=batch, wait=long poll) -> for each lease:
        ReportStage x3 (PREPARING, PROCESSING, VERIFYING) -> Complete(valid artifact)

A Claim may return other clients' jobs (batch) or wait (long poll) until some client
submits. When the window closes clients stop submitting, finish the leases they hold,
and one drain pass completes whatever is still queued, so the next measurement starts
from an empty queue. The clients run on their own event loop in a thread, so the main
thread can sample counters at the window's edges.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import sqlcount
from google.protobuf.duration_pb2 import Duration
from measure import (
    CpuMeter,
    DbCounters,
    Window,
    connect,
    drop_database,
    find_pid,
    in_window,
    latencies_in,
    measure_window,
)

from jobwire.v1 import job_pb2, job_pb2_grpc, worker_pb2, worker_pb2_grpc

JOB_TYPE = "bench.noop"
REPORTS = (("PREPARING", 1, 1), ("PROCESSING", 50, 100), ("VERIFYING", 1, 1))
SHA = hashlib.sha256(b"").hexdigest()
RPC_TIMEOUT_S = 30.0
RETRY_LOG = re.compile(r"retrying transaction after (\S+)")


class Server:
    """`python -m jobwire serve` on a fresh MariaDB database, stopped with SIGTERM."""

    def __init__(self, database: str, log_path: Path, env: dict[str, str] | None = None, *, fresh: bool = True) -> None:
        """`fresh`: the database is made anew first; else the server joins it (another replica)."""
        self.database = database
        self.log_path = log_path
        if fresh:
            conn = connect()
            with conn.cursor() as cur:
                cur.execute(f"DROP DATABASE IF EXISTS `{database}`")
                cur.execute(f"CREATE DATABASE `{database}` CHARACTER SET utf8mb4")
            conn.close()
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.counter_file = log_path.with_suffix(".sqlcount")
        full_env = {
            **os.environ,
            "JWBENCH_SQLCOUNT": str(self.counter_file),
            "JOBWIRE_DATABASE_URL": f"mysql+pymysql://root@127.0.0.1:3306/{database}",
            "JOBWIRE_LISTEN": "127.0.0.1:0",
            **(env or {}),
        }
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("serve_counted.py"))],
            stdout=subprocess.PIPE,
            stderr=self._log,
            env=full_env,
        )
        self.port = self._await_port()
        self._log_offset = 0
        threading.Thread(target=self._drain_stdout, daemon=True).start()

    def _await_port(self) -> int:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline().decode(errors="replace")
            if not line:
                break
            found = re.search(r"jobwire serving on port (\d+)", line)
            if found:
                return int(found.group(1))
        self.stop()
        raise RuntimeError(f"jobwire server did not start; see {self.log_path}")

    def _drain_stdout(self) -> None:
        assert self.proc.stdout is not None
        for _ in self.proc.stdout:
            pass

    def sql_counts(self) -> dict[str, int]:
        return sqlcount.read(self.counter_file)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def new_log_lines(self) -> list[str]:
        """Server log lines written since the last call."""
        with open(self.log_path, "rb") as f:
            f.seek(self._log_offset)
            data = f.read()
        self._log_offset += len(data)
        return data.decode(errors="replace").splitlines()

    def stop(self, drop: bool = True) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        sqlcount.clear(self.counter_file)
        if drop:
            drop_database(self.database)


@dataclass
class Stats:
    done: list[float] = field(default_factory=list)
    submit: list[tuple[float, float]] = field(default_factory=list)
    claim: list[tuple[float, float]] = field(default_factory=list)
    report: list[tuple[float, float]] = field(default_factory=list)
    complete: list[tuple[float, float]] = field(default_factory=list)
    leases_per_claim: list[tuple[float, int]] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)


@dataclass
class E2eResult:
    clients: int
    jobs_per_s: float
    window: Window
    jobs: int
    submit_ms: list[float]
    claim_ms: list[float]
    report_ms: list[float]
    complete_ms: list[float]
    empty_claim_share: float
    leases_per_claim: float
    errors: dict[str, int]
    retries: dict[str, int]
    drained: int

    def per_job(self, key: str) -> float:
        """A MariaDB global status delta per job (includes other tenants of the server)."""
        return self.window.db.get(key, 0) / self.jobs if self.jobs else float("nan")

    def sql_per_job(self, key: str = "query") -> float:
        """Commands the server process sent, per job."""
        return self.window.sql.get(key, 0) / self.jobs if self.jobs else float("nan")

    def cpu_ms_per_job(self, who: str) -> float:
        return self.window.cpu.get(who, float("nan")) * 1000 / self.jobs if self.jobs else float("nan")


class _Clients:
    """Submitters and SDK-shaped workers on one event loop.

    `clients` submitters each loop on Submit, and `clients` job slots are split over
    workers of `batch` slots each (1 to 4 slots: 1 worker; 32 slots: 8 workers). A worker
    claims as many jobs as it has free slots (Claim max_jobs=free, long poll), runs each
    lease as its own task, and claims again when a slot frees, as the worker SDK does.
    Submitters stop while `backlog` jobs are submitted but not yet completed, so the queue
    stays short and submits cannot run ahead of the workers.
    """

    def __init__(self, port: int, clients: int, batch: int, wait_s: float, cap_submits: int) -> None:
        self.port, self.clients, self.batch, self.wait_s = port, clients, batch, wait_s
        self.cap_submits = cap_submits
        self.stats = Stats()
        self.stopping = False
        self.submitted = 0
        self.drained = 0
        self.ready = threading.Event()
        self.backlog = 2 * clients + batch
        self.in_flight: asyncio.Semaphore | None = None
        self.loop: asyncio.AbstractEventLoop | None = None

    def claim_request(self, n: int, max_jobs: int, wait_s: float) -> worker_pb2.ClaimRequest:
        return worker_pb2.ClaimRequest(
            worker_id=f"bench-{n}",
            job_types=[worker_pb2.JobTypeSpec(name=JOB_TYPE)],
            max_jobs=max_jobs,
            wait=Duration(seconds=int(wait_s), nanos=int((wait_s % 1) * 1e9)),
        )

    async def finish(self, worker: worker_pb2_grpc.WorkerServiceStub, lease: worker_pb2.Lease) -> None:
        s = self.stats
        try:
            for stage, processed, total in REPORTS:
                t = time.monotonic()
                await worker.ReportStage(
                    worker_pb2.ReportStageRequest(
                        job_no=lease.job_no,
                        worker_token=lease.worker_token,
                        stage=stage,
                        processed_units=processed,
                        total_units=total,
                    ),
                    timeout=RPC_TIMEOUT_S,
                )
                s.report.append((t, time.monotonic() - t))
            t = time.monotonic()
            artifact = job_pb2.Artifact(
                uri=f"file:///bench/{lease.job_no}", size_bytes=0, sha256=SHA, content_type="text/plain"
            )
            await worker.Complete(
                worker_pb2.CompleteRequest(job_no=lease.job_no, worker_token=lease.worker_token, result=artifact),
                timeout=RPC_TIMEOUT_S,
            )
            end = time.monotonic()
            s.complete.append((t, end - t))
            s.done.append(end)
        except grpc.aio.AioRpcError as exc:
            s.errors[f"{exc.code().name}: {exc.details()}"[:120]] += 1
        finally:
            if self.in_flight is not None:
                self.in_flight.release()

    async def submitter(self, n: int, channel: grpc.aio.Channel) -> None:
        jobs, s = job_pb2_grpc.JobServiceStub(channel), self.stats
        request = job_pb2.SubmitRequest(job_type=JOB_TYPE, payload=b"{}", owner=f"bench-{n}")
        assert self.in_flight is not None
        while not self.stopping and self.submitted < self.cap_submits:
            await self.in_flight.acquire()
            if self.stopping:
                self.in_flight.release()
                return
            self.submitted += 1
            t = time.monotonic()
            try:
                await jobs.Submit(request, timeout=RPC_TIMEOUT_S)
                s.submit.append((t, time.monotonic() - t))
            except grpc.aio.AioRpcError as exc:
                self.in_flight.release()
                s.errors[f"Submit {exc.code().name}: {exc.details()}"[:120]] += 1
                await asyncio.sleep(0.01)

    async def worker(self, n: int, slots: int, channel: grpc.aio.Channel) -> None:
        stub, s = worker_pb2_grpc.WorkerServiceStub(channel), self.stats
        running: set[asyncio.Task[None]] = set()
        while not self.stopping:
            free = slots - len(running)
            if free <= 0:
                await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                continue
            t = time.monotonic()
            try:
                reply = await stub.Claim(self.claim_request(n, free, self.wait_s), timeout=RPC_TIMEOUT_S)
            except grpc.aio.AioRpcError as exc:
                s.errors[f"Claim {exc.code().name}: {exc.details()}"[:120]] += 1
                await asyncio.sleep(0.01)
                continue
            s.claim.append((t, time.monotonic() - t))
            s.leases_per_claim.append((t, len(reply.leases)))
            for lease in reply.leases:
                task = asyncio.create_task(self.finish(stub, lease))
                running.add(task)
                task.add_done_callback(running.discard)
        if running:
            await asyncio.wait(running)

    async def drain(self, channel: grpc.aio.Channel) -> None:
        """Complete what is still queued, uncounted, so the next window starts empty."""
        self.in_flight = None
        worker = worker_pb2_grpc.WorkerServiceStub(channel)
        for _ in range(10_000):
            reply = await worker.Claim(self.claim_request(0, 100, 0.0), timeout=RPC_TIMEOUT_S)
            if not reply.leases:
                return
            await asyncio.gather(*(self.finish(worker, lease) for lease in reply.leases))
            self.drained += len(reply.leases)

    async def main(self) -> None:
        target = f"127.0.0.1:{self.port}"
        self.loop = asyncio.get_running_loop()
        self.in_flight = asyncio.Semaphore(self.backlog)
        slots = [min(self.batch, self.clients - i) for i in range(0, self.clients, self.batch)]
        # A connection each, as separate machines would have: grpc otherwise shares one
        # subchannel among a process's channels, and every call would reach one server process.
        own = [("grpc.use_local_subchannel_pool", 1)]
        channels = [grpc.aio.insecure_channel(target, options=own) for _ in range(self.clients + len(slots))]
        try:
            for ch in channels:
                await asyncio.wait_for(ch.channel_ready(), 10)
            self.ready.set()
            workers = [self.worker(n, k, channels[self.clients + n]) for n, k in enumerate(slots)]
            submitters = [self.submitter(n, channels[n]) for n in range(self.clients)]
            await asyncio.gather(*submitters, *workers)
            done_before = len(self.stats.done)
            await self.drain(channels[0])
            del self.stats.done[done_before:]  # drained jobs are not throughput
        finally:
            self.ready.set()
            for ch in channels:
                await ch.close()


def _release_submitters(runner: _Clients) -> None:
    """Submitters blocked on the backlog see `stopping` once a slot frees; free them all now."""
    sem, loop = runner.in_flight, runner.loop
    if sem is not None and loop is not None:
        for _ in range(runner.clients):
            loop.call_soon_threadsafe(sem.release)


def run_e2e(
    server: Server,
    clients: int,
    seconds: float,
    warmup: float,
    cap: int,
    counters: DbCounters,
    batch: int = 4,
    wait_s: float = 1.0,
) -> E2eResult:
    """One measurement against a running server."""
    runner = _Clients(server.port, clients, batch, wait_s, cap_submits=cap + 10 * clients)
    meter = CpuMeter(
        {"server": server.pid, "bench": os.getpid(), "mysqld": find_pid(("mariadbd", "mysqld"))},
        trees=frozenset({"server"}),
    )
    server.new_log_lines()
    failure: list[BaseException] = []

    def loop() -> None:
        try:
            asyncio.run(runner.main())
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            failure.append(exc)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    runner.ready.wait(30)
    try:
        window = measure_window(meter, counters, server.sql_counts, warmup, seconds, runner.stats.done, cap)
    finally:
        runner.stopping = True
        _release_submitters(runner)
        thread.join(timeout=120)
    if failure:
        raise failure[0]
    s = runner.stats
    jobs = in_window(s.done, window)
    claims = [(t, n) for t, n in s.leases_per_claim if window.t0 <= t < window.t1]
    retries = Counter(m.group(1) for line in server.new_log_lines() if (m := RETRY_LOG.search(line)))
    return E2eResult(
        clients=clients,
        jobs_per_s=jobs / window.seconds,
        window=window,
        jobs=jobs,
        submit_ms=latencies_in(s.submit, window),
        claim_ms=latencies_in(s.claim, window),
        report_ms=latencies_in(s.report, window),
        complete_ms=latencies_in(s.complete, window),
        empty_claim_share=sum(1 for _, n in claims if n == 0) / len(claims) if claims else float("nan"),
        leases_per_claim=sum(n for _, n in claims) / len(claims) if claims else float("nan"),
        errors=dict(s.errors),
        retries=dict(retries),
        drained=runner.drained,
    )
