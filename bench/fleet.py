"""Fleet load: how many progress reports the box absorbs while jobs run.

    .venv/bin/python bench/fleet.py                        # 400 and 1,000 running jobs, plain, SDK, session
    .venv/bin/python bench/fleet.py --jobs 400 --modes plain --seconds 20
    .venv/bin/python bench/fleet.py --jobs 1000 --modes sdk,session

`python -m jobwire serve` (every serving process of it, `--processes`) on a fresh MariaDB
database, started through serve_counted.py so the statements it sends are counted. For
each window, `--jobs` jobs are submitted and claimed, then every running job reports its
progress every 250 ms (the SDK's cadence) for `--seconds`, after `--warmup` uncounted:

* plain: each job sends its own ReportStage, as a worker in any language would; workers of
  `--per-worker` jobs each have a connection of their own. A job's next report leaves 250 ms
  after the previous one left, or when it returned if that took longer (no pile-up): the
  demand is 4 reports/s per job, and what the server answers is the result.
* sdk: the worker SDK's own reporting (JobReporter and ReportSender): each job updates its
  progress every 50 ms, and each worker sends every job's newest value in one
  BatchReportStage per 250 ms. "Fresh" is how old a value was when the server acknowledged
  it: what a person watching waits for, at most. Each worker's calls are unary (the SDK's
  `--transport unary`).
* session: the same reporting, each worker's BatchReportStage sent as frames of one
  WorkerService.Session (the SDK's SessionStub, its default transport), opened before the
  count starts. At the window's end each job's lease is released on its session, so the
  sessions' ending takes no worker for dead (which would requeue the jobs in a later window).

Counted: reports acknowledged per second, their latency (plain: per call; sdk: per batch
call), failed reports, CPU of the server (all its processes), mysqld and this bench (the
clients), and statements per report. Below the table, session / sdk paired run by run:
reports/s, fresh p99 and server CPU per report. Every loop is bounded by --seconds; the run stops by
itself. Needs MariaDB at 127.0.0.1:3306 (root, no password).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import platform
import random
import secrets
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import e2e  # noqa: E402
import echo  # noqa: E402
import grpc  # noqa: E402
from measure import CpuMeter, find_pid, median, pct  # noqa: E402

from jobwire.v1 import job_pb2, job_pb2_grpc, worker_pb2, worker_pb2_grpc  # noqa: E402
from jobwire.worker.sdk._attempt import Snapshot, StopReason  # noqa: E402
from jobwire.worker.sdk._reporter import JobReporter, ReportSender  # noqa: E402
from jobwire.worker.sdk._rpc import WorkerStub  # noqa: E402
from jobwire.worker.sdk._session import SessionStub  # noqa: E402

CADENCE_S = 0.25
SDK_UPDATE_S = 0.05
OWN_CONNECTION = [("grpc.use_local_subchannel_pool", 1)]
JOB_TYPE = "fleet.job"
TOTAL = 10**9
MODES = ("plain", "sdk", "session")
SESSION_GRACE_S = 3.0  # the server's default JOBWIRE_SESSION_GRACE_SECONDS


@dataclass
class Window:
    mode: str
    jobs: int
    run: int
    seconds: float = 0.0
    acked: int = 0
    failed: Counter[str] = field(default_factory=Counter)
    latency_ms: list[float] = field(default_factory=list)
    fresh_ms: list[float] = field(default_factory=list)
    cpu: dict[str, float] = field(default_factory=dict)
    sql: dict[str, int] = field(default_factory=dict)
    calls: int = 0

    @property
    def per_s(self) -> float:
        return self.acked / self.seconds if self.seconds else float("nan")

    def cpu_ms_per_report(self, who: str) -> float:
        return self.cpu.get(who, float("nan")) * 1000 / self.acked if self.acked else float("nan")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description="progress reports absorbed by jobwire under fleet load")
    p.add_argument("--jobs", default="400,1000", help="running jobs per window, comma-separated")
    p.add_argument(
        "--modes", default=",".join(MODES),
        help="plain (ReportStage per job), sdk (batched, unary calls), session (batched, one Session per worker)",
    )  # fmt: skip
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--warmup", type=float, default=3.0)
    p.add_argument("--per-worker", type=int, default=10, help="jobs per worker (a connection each)")
    p.add_argument("--processes", type=int, help="jobwire serving processes (default: the server's, the cores)")
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--skip-echo", action="store_true", help="leave out the gRPC echo floor")
    args = p.parse_args()
    args.mode_list = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not args.mode_list or set(args.mode_list) - set(MODES):
        p.error(f"--modes takes some of {', '.join(MODES)}")
    return args


async def _setup(target: str, jobs: int, job_type: str) -> list[worker_pb2.Lease]:
    """Submit and claim `jobs` jobs: the running jobs of one window."""
    async with grpc.aio.insecure_channel(target) as channel:
        submit, workers = job_pb2_grpc.JobServiceStub(channel), worker_pb2_grpc.WorkerServiceStub(channel)
        for start in range(0, jobs, 100):
            batch = range(start, min(jobs, start + 100))
            await asyncio.gather(*(submit.Submit(job_pb2.SubmitRequest(job_type=job_type)) for _ in batch))
        leases: list[worker_pb2.Lease] = []
        claim = worker_pb2.ClaimRequest(
            worker_id="fleet", job_types=[worker_pb2.JobTypeSpec(name=job_type)], max_jobs=100
        )
        claim.lease_duration.FromSeconds(600)
        while len(leases) < jobs:
            reply = await workers.Claim(claim)
            if not reply.leases:
                raise RuntimeError(f"claimed {len(leases)} of {jobs} jobs")
            leases += reply.leases
        return leases


async def _plain(
    target: str, leases: list[worker_pb2.Lease], per_worker: int, w: Window, stop: float, counting: list[float]
) -> None:
    """Every job its own ReportStage every 250 ms; `counting` holds the window's opening time."""
    channels = [grpc.aio.insecure_channel(target, options=OWN_CONNECTION) for _ in range(0, len(leases), per_worker)]
    stubs = [worker_pb2_grpc.WorkerServiceStub(c) for c in channels]

    async def job(i: int, lease: worker_pb2.Lease) -> None:
        stub = stubs[i // per_worker]
        due = time.monotonic() + random.uniform(0, CADENCE_S)
        k = 0
        while (now := time.monotonic()) < stop:
            if due > now:
                await asyncio.sleep(due - now)
            k += 1
            started = time.monotonic()
            request = worker_pb2.ReportStageRequest(
                job_no=lease.job_no, worker_token=lease.worker_token, stage="PREPARING",
                processed_units=k, total_units=TOTAL,
            )  # fmt: skip
            try:
                await stub.ReportStage(request, timeout=30)
                ok = True
            except grpc.aio.AioRpcError as exc:
                ok = False
                if started >= counting[0]:
                    w.failed[exc.code().name] += 1
            if started >= counting[0] and time.monotonic() < stop:
                w.latency_ms.append((time.monotonic() - started) * 1000)
                w.acked += ok
            due = max(started + CADENCE_S, time.monotonic())

    await asyncio.gather(*(job(i, lease) for i, lease in enumerate(leases)))
    for c in channels:
        await c.close()


class _CountingStub:
    """A WorkerService stub whose BatchReportStage counts what was acknowledged, and how fresh."""

    def __init__(self, stub: WorkerStub, w: Window, produced: dict[str, dict[int, float]],
                 counting: list[float], stop: float) -> None:  # fmt: skip
        self._stub, self._w, self._produced, self._counting, self._stop = stub, w, produced, counting, stop

    async def BatchReportStage(
        self, request: worker_pb2.BatchReportStageRequest, *, timeout: float | None = None
    ) -> worker_pb2.BatchReportStageResponse:
        started = time.monotonic()
        reply = await self._stub.BatchReportStage(request, timeout=timeout)
        done = time.monotonic()
        if started >= self._counting[0] and done < self._stop:
            w = self._w
            w.calls += 1
            w.latency_ms.append((done - started) * 1000)
            for report, result in zip(request.reports, reply.results, strict=True):
                if result.WhichOneof("result") == "response":
                    w.acked += 1
                    made = self._produced[report.job_no].pop(report.processed_units, None)
                    if made is not None:
                        w.fresh_ms.append((done - made) * 1000)
                else:
                    w.failed[str(result.error.code)] += 1
        return reply


class _NoPushes:
    """The session's pushes, unused here: leases come from _setup, and no job is cancelled."""

    def __init__(self, w: Window) -> None:
        self._w = w

    def leased(self, reply: worker_pb2.ClaimResponse) -> None: ...

    def cancel_requested(self, state: worker_pb2.LeaseState) -> None: ...

    def lease_lost(self, state: worker_pb2.LeaseState) -> None:
        self._w.failed["LEASE_LOST_PUSHED"] += 1

    def opened(self) -> None: ...

    def gone(self) -> None:
        self._w.failed["SESSION_GONE"] += 1


async def _sdk(
    target: str, leases: list[worker_pb2.Lease], per_worker: int, w: Window, stop: float, counting: list[float],
    *, session: bool = False,
) -> None:  # fmt: skip
    """The SDK's reporting: updates every 50 ms, one BatchReportStage per worker every 250 ms.

    `session`: each worker's calls are frames of one Session (SessionStub), else unary calls.
    """
    produced: dict[str, dict[int, float]] = {lease.job_no: {} for lease in leases}
    channels, senders, tasks, stubs = [], [], [], []
    for _ in range(0, len(leases), per_worker):
        channel = grpc.aio.insecure_channel(target, options=OWN_CONNECTION)
        unary = worker_pb2_grpc.WorkerServiceStub(channel)
        stub: WorkerStub = unary
        if session:
            stub = SessionStub(unary, grace=SESSION_GRACE_S)
            # No channel to watch: a window sees no connection change, and a watch still pending
            # on the channel would complete after this event loop closed.
            tasks.append(asyncio.create_task(stub.run(_NoPushes(w))))
        sender = ReportSender(_CountingStub(stub, w, produced, counting, stop), interval=CADENCE_S)  # type: ignore[arg-type]
        channels.append(channel)
        senders.append(sender)
        stubs.append(stub)
        tasks.append(asyncio.create_task(sender.run()))

    async def job(i: int, lease: worker_pb2.Lease) -> None:
        stops: list[StopReason] = []
        reporter = JobReporter(senders[i // per_worker], job_no=lease.job_no, token=lease.worker_token,
                               first_stage="PREPARING", on_stop=stops.append)  # fmt: skip
        await asyncio.sleep(random.uniform(0, SDK_UPDATE_S))
        k = 0
        while time.monotonic() < stop and not stops:
            k += 1
            produced[lease.job_no][k] = time.monotonic()
            reporter.update(Snapshot(stage="PREPARING", processed=k, total=TOTAL, checkpoint=None, checkpoint_seq=0))
            await asyncio.sleep(SDK_UPDATE_S)
        await reporter.close()
        if session:  # a session ending with leases held is a dead worker's: its jobs would be requeued
            release = worker_pb2.ReleaseRequest(job_no=lease.job_no, worker_token=lease.worker_token)
            await stubs[i // per_worker].Release(release, timeout=30)

    await asyncio.gather(*(job(i, lease) for i, lease in enumerate(leases)))
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for c in channels:
        await c.close()


def run_window(server: e2e.Server, mode: str, jobs: int, run: int, args: argparse.Namespace) -> Window:
    """One window; its jobs are of a type of their own, so no window claims another's (released) jobs."""
    w = Window(mode=mode, jobs=jobs, run=run)
    leases = asyncio.run(_setup(f"127.0.0.1:{server.port}", jobs, f"{JOB_TYPE}.{mode}.{jobs}.{run}"))
    meter = CpuMeter(
        {"server": server.pid, "bench": os.getpid(), "mysqld": find_pid(("mariadbd", "mysqld"))},
        trees=frozenset({"server"}),
    )
    t0 = time.monotonic() + args.warmup
    stop = t0 + args.seconds
    runner = _plain if mode == "plain" else functools.partial(_sdk, session=mode == "session")
    target = f"127.0.0.1:{server.port}"
    # The clients run on a loop of their own in a thread, so this thread can sample at the edges.
    thread = threading.Thread(
        target=lambda: asyncio.run(runner(target, leases, args.per_worker, w, stop, [t0])), daemon=True
    )
    thread.start()
    time.sleep(max(0.0, t0 - time.monotonic()))
    sql0, cpu0 = server.sql_counts(), meter.sample()
    time.sleep(max(0.0, stop - time.monotonic()))
    sql1, cpu1 = server.sql_counts(), meter.sample()
    thread.join(timeout=60)
    w.seconds = args.seconds
    w.cpu = CpuMeter.delta(cpu0, cpu1)
    w.sql = {k: sql1[k] - sql0[k] for k in sql1}
    return w


def report(windows: list[Window], args: argparse.Namespace, elapsed: float) -> str:
    def cell(values: list[float], digits: int = 0) -> str:
        return f"{median(values):,.{digits}f}" if values else "–"

    keys = sorted({(w.mode, w.jobs) for w in windows}, key=lambda k: (MODES.index(k[0]), k[1]))
    lines = [
        f"## jobwire fleet load — medians of {args.runs} run(s), {args.seconds:.0f} s windows",
        "",
        f"- {os.cpu_count()} CPUs; Python {platform.python_version()}, grpcio {metadata.version('grpcio')};"
        f" {args.processes or os.cpu_count()} serving process(es);"
        f" workers of {args.per_worker} jobs, a connection each",
        f"- command: `python {' '.join(sys.argv)}` ({elapsed:.0f} s)",
        "",
        "| mode · running jobs | demand, reports/s | acknowledged, reports/s | latency p50 / p99, ms"
        " | fresh p50 / p99, ms | failed | server CPU, ms/report | busy, % of a core | mysqld / bench CPU, ms/report"
        " | statements/report |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for mode, jobs in keys:
        ws = [w for w in windows if (w.mode, w.jobs) == (mode, jobs)]
        lat = [x for w in ws for x in w.latency_ms]
        fresh = [x for w in ws for x in w.fresh_ms]
        failed = sum(sum(w.failed.values()) for w in ws)
        busy = [w.cpu.get("server", 0) / w.seconds * 100 for w in ws]
        lines.append(
            f"| {mode} · {jobs:,} | {jobs / CADENCE_S:,.0f} | **{cell([w.per_s for w in ws])}**"
            f" | {pct(lat, 50):.1f} / **{pct(lat, 99):.1f}**"
            f" | {f'{pct(fresh, 50):.0f} / {pct(fresh, 99):.0f}' if fresh else '–'}"
            f" | {failed} | {cell([w.cpu_ms_per_report('server') for w in ws], 3)} | {cell(busy)}"
            f" | {cell([w.cpu_ms_per_report('mysqld') for w in ws], 3)}"
            f" / {cell([w.cpu_ms_per_report('bench') for w in ws], 3)}"
            f" | {cell([w.sql.get('query', 0) / w.acked for w in ws if w.acked], 2)} |"
        )
    return "\n".join(lines + _session_against_sdk(windows))


def _session_against_sdk(windows: list[Window]) -> list[str]:
    """session / sdk at each job count, paired run by run (medians): the transport is all that differs."""
    by = {(w.mode, w.jobs, w.run): w for w in windows}
    lines = []
    for jobs in sorted({w.jobs for w in windows}):
        pairs = [(by[("session", jobs, r)], by[("sdk", jobs, r)]) for (m, j, r) in by
                 if m == "session" and j == jobs and ("sdk", jobs, r) in by]  # fmt: skip
        if not pairs:
            continue
        ratios = {
            "reports/s": [s.per_s / u.per_s for s, u in pairs if u.per_s],
            "fresh p99": [pct(s.fresh_ms, 99) / pct(u.fresh_ms, 99) for s, u in pairs if s.fresh_ms and u.fresh_ms],
            "server CPU per report": [
                s.cpu_ms_per_report("server") / u.cpu_ms_per_report("server") for s, u in pairs if u.acked and s.acked
            ],
        }
        shown = ", ".join(f"{what} {median(r):.2f}" for what, r in ratios.items() if r)
        lines.append(f"- session / sdk at {jobs:,} jobs, paired per run ({len(pairs)}): {shown}")
    return ["", *lines] if lines else []


def main() -> None:
    args = parse_args()
    started = time.monotonic()
    database = f"jwbench_fleet_{secrets.token_hex(3)}"
    env = {"JOBWIRE_REAPER_INTERVAL_SECONDS": "5"}
    if args.processes:
        env["JOBWIRE_PROCESSES"] = str(args.processes)
    workdir = Path(tempfile.mkdtemp(prefix="jwbench-fleet-"))
    server = e2e.Server(database, workdir / "server.log", env)
    windows: list[Window] = []
    echoes: list[echo.EchoResult] = []
    try:
        for run in range(1, args.runs + 1):
            for mode in args.mode_list if run % 2 else args.mode_list[::-1]:  # the order alternates run by run
                for jobs in [int(j) for j in args.jobs.split(",") if j.strip()]:
                    w = run_window(server, mode, jobs, run, args)
                    windows.append(w)
                    print(
                        f"[{time.strftime('%H:%M:%S')}] run {run} · {mode} · {jobs} jobs: {w.per_s:,.0f} reports/s,"
                        f" p99 {pct(w.latency_ms, 99):.0f} ms, failed {dict(w.failed) or 0}",
                        file=sys.stderr,
                    )
            if not args.skip_echo:
                echoes.append(echo.run_echo(40, min(args.seconds, 5.0), 0.5))
    finally:
        server.stop()
    print(report(windows, args, time.monotonic() - started))
    if echoes:
        print(
            f"\nThe RPC floor in the same run: a bare grpc.aio unary echo (one process, 40 callers) answers"
            f" {median([e.calls_per_s for e in echoes]):,.0f} calls/s for"
            f" {median([e.server_cpu_ms_per_call for e in echoes]):.3f} ms of server CPU each."
        )


if __name__ == "__main__":
    main()
