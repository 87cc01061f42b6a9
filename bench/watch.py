"""Watchers: 500, 1,000 and 2,000 WatchStatus streams on one server while jobs progress.

    .venv/bin/python bench/watch.py                      # 0, 500, 1000, 2000 watchers
    .venv/bin/python bench/watch.py --counts 2000 --seconds 30

One `python -m jobwire serve` process (started through serve_counted.py, so the SQL it
sends is counted exactly) on a fresh MariaDB database. For each watcher count:

1. `--jobs` jobs are submitted and claimed; watcher processes (`--procs`) open the
   streams, spread evenly over the jobs, and report once every stream has its first
   message (the time that took is the "open" column);
2. for `--seconds`, a driver reports progress on every job once a second (one
   `ReportStage` per job per second, staggered), stamping the moment each RPC returned;
3. the jobs complete; every stream must end with READY.

Latency is receipt time minus the return of the RPC that committed the change, both on
CLOCK_MONOTONIC (time.monotonic() is system-wide on Linux). Server CPU and RSS come from
/proc; "SQL/s" is what the server process sent (sqlcount.py), "Questions/s" MariaDB's
global counter (other sessions on the machine land in it too). The 0-watcher row is the
driver alone: the SQL rate must not grow with watchers. A window in which MariaDB
restarted (other sessions on this machine do that) or a stream failed is measured again,
up to five times. Needs MariaDB at 127.0.0.1:3306 (root, no password).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import grpc  # noqa: E402
import sqlcount  # noqa: E402
from measure import CpuMeter, DbCounters, connect, find_pid, pct, wait_for_db  # noqa: E402

from jobwire.v1 import job_pb2, job_pb2_grpc, worker_pb2, worker_pb2_grpc  # noqa: E402

MYSQL_URL = "mysql+pymysql://root@127.0.0.1:3306"
BANNER = "jobwire serving on port "
READY = job_pb2.Job.READY


# -- the watcher processes ---------------------------------------------------------------


async def watch_many(target: str, job_nos: list[str], count: int, channels: int, out: Path) -> None:
    """Open `count` streams over `channels` channels; print READY when all have a first message."""
    chans = [grpc.aio.insecure_channel(target) for _ in range(channels)]
    stubs = [job_pb2_grpc.JobServiceStub(ch) for ch in chans]
    receipts: list[tuple[str, int, float]] = []  # job_no, processed_units, monotonic time
    firsts: list[float] = []
    ends: dict[str, int] = {}
    errors: dict[str, int] = {}
    t0 = time.monotonic()

    async def one(i: int) -> None:
        job_no = job_nos[i % len(job_nos)]
        call = stubs[i % channels].WatchStatus(job_pb2.WatchStatusRequest(job_no=job_no))
        try:
            first = True
            async for update in call:
                now = time.monotonic()
                if first:
                    firsts.append(now - t0)
                    first = False
                if update.job.status == READY:
                    ends["READY"] = ends.get("READY", 0) + 1
                else:  # READY repeats the last units: only progress messages are timed
                    receipts.append((job_no, update.job.progress.processed_units, now))
        except grpc.aio.AioRpcError as exc:
            errors[exc.code().name] = errors.get(exc.code().name, 0) + 1

    tasks = [asyncio.create_task(one(i)) for i in range(count)]
    while len(firsts) + sum(errors.values()) < count:
        await asyncio.sleep(0.05)
    print(f"READY {max(firsts, default=0):.3f} {len(firsts)}", flush=True)
    await asyncio.gather(*tasks)
    out.write_text(json.dumps({"receipts": receipts, "ends": ends, "errors": errors, "firsts": len(firsts)}))
    for ch in chans:
        await ch.close()


# -- the driver --------------------------------------------------------------------------


@dataclass
class Server:
    proc: subprocess.Popen[str]
    target: str
    sql_file: Path

    def sql(self) -> dict[str, int]:
        return sqlcount.read(self.sql_file)


def start_server(database_url: str, workdir: Path) -> Server:
    sql_file = workdir / "server.sqlcount"
    # One serving process: its CPU, memory and SQL are what is measured, per process.
    env = {**os.environ, "JOBWIRE_DATABASE_URL": database_url, "JOBWIRE_LISTEN": "127.0.0.1:0",
           "JOBWIRE_PROCESSES": "1", "JWBENCH_SQLCOUNT": str(sql_file), "PYTHONUNBUFFERED": "1"}  # fmt: skip
    proc = subprocess.Popen([sys.executable, str(BENCH / "serve_counted.py")], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)  # fmt: skip
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith(BANNER):
            return Server(proc, f"127.0.0.1:{int(line.removeprefix(BANNER))}", sql_file)
    raise SystemExit("the server did not start")


class Driver:
    """Submits, claims, reports progress once a second per job, completes; stamps each commit."""

    def __init__(self, target: str) -> None:
        self.channel = grpc.aio.insecure_channel(target)
        self.jobs = job_pb2_grpc.JobServiceStub(self.channel)
        self.workers = worker_pb2_grpc.WorkerServiceStub(self.channel)
        self.commits: dict[tuple[str, int], float] = {}  # (job_no, units) -> RPC return time
        self.leases: list[worker_pb2.Lease] = []

    async def prepare(self, count: int) -> list[str]:
        self.leases = []
        nos = [(await self.jobs.Submit(job_pb2.SubmitRequest(job_type="bench"))).job.job_no for _ in range(count)]
        spec = worker_pb2.JobTypeSpec(name="bench")
        while len(self.leases) < count:
            reply = await self.workers.Claim(worker_pb2.ClaimRequest(
                worker_id="bench", job_types=[spec], max_jobs=count - len(self.leases)))  # fmt: skip
            self.leases += list(reply.leases)
        return nos

    async def progress(self, seconds: float) -> None:
        async def one(lease: worker_pb2.Lease, offset: float) -> None:
            await asyncio.sleep(offset)
            start, units = time.monotonic(), 0
            while time.monotonic() - start < seconds:
                units += 1
                request = worker_pb2.ReportStageRequest(
                    job_no=lease.job_no, worker_token=lease.worker_token, stage="PROCESSING", processed_units=units
                )
                await self.workers.ReportStage(request)
                self.commits[(lease.job_no, units)] = time.monotonic()
                await asyncio.sleep(max(0.0, start + units - time.monotonic()))

        n = len(self.leases)
        await asyncio.gather(*(one(lease, i / n) for i, lease in enumerate(self.leases)))

    async def complete(self) -> None:
        result = job_pb2.Artifact(uri="file:///bench/out", size_bytes=1, sha256="ab" * 32)
        requests = [
            worker_pb2.CompleteRequest(job_no=lease.job_no, worker_token=lease.worker_token, result=result)
            for lease in self.leases
        ]
        await asyncio.gather(*(self.workers.Complete(r) for r in requests))


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


@dataclass
class Row:
    watchers: int
    opened: float
    first_ok: int
    p50_ms: float
    p99_ms: float
    delivered: int
    expected: int
    ended: int
    errors: dict[str, int]
    cpu_pct: float
    rss_mb: float
    sql_per_s: float
    questions_per_s: float
    void: bool = False  # MariaDB restarted under the window (other sessions do) or streams failed


def start_watchers(
    server: Server, nos: list[str], count: int, procs: int, channels: int, workdir: Path
) -> list[tuple[subprocess.Popen[str], Path]]:
    out = []
    for p in range(procs):
        share = count // procs + (1 if p < count % procs else 0)
        result = workdir / f"watchers-{count}-{p}.json"
        cmd = [sys.executable, __file__, "--role", "watchers", "--target", server.target, "--count", str(share),
               "--channels", str(channels), "--out", str(result), "--job-nos", ",".join(nos)]  # fmt: skip
        out.append((subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True), result))
    return out


async def measure(server: Server, driver: Driver, args: argparse.Namespace, count: int, workdir: Path) -> Row:
    nos = await driver.prepare(args.jobs)
    driver.commits = {}
    watchers = start_watchers(server, nos, count, args.procs, args.channels, workdir) if count else []
    try:
        return await _measure(server, driver, args, count, watchers)
    finally:
        for proc, _ in watchers:
            if proc.poll() is None:  # a window that failed half-way leaves them waiting
                proc.kill()


async def _measure(
    server: Server,
    driver: Driver,
    args: argparse.Namespace,
    count: int,
    watchers: list[tuple[subprocess.Popen[str], Path]],
) -> Row:
    opened, first_ok = 0.0, 0
    for proc, _ in watchers:
        assert proc.stdout is not None
        _, took, got = (await asyncio.to_thread(proc.stdout.readline)).split()
        opened, first_ok = max(opened, float(took)), first_ok + int(got)
    await asyncio.sleep(1.0)  # let the first messages' work settle before the window
    pid = server.proc.pid
    meter, counters = CpuMeter({"server": pid}), DbCounters()
    cpu0, db0, sql0, t0 = meter.sample(), counters.sample(), server.sql(), time.monotonic()
    await driver.progress(args.seconds)
    cpu1, db1, sql1, t1 = meter.sample(), counters.sample(), server.sql(), time.monotonic()
    rss = rss_mb(pid)
    counters.close()
    await driver.complete()
    receipts, ended, errors = [], 0, {}
    for proc, result in watchers:
        await asyncio.to_thread(proc.wait, 120)
        data = json.loads(result.read_text())
        receipts += data["receipts"]
        ended += data["ends"].get("READY", 0)
        for k, v in data["errors"].items():
            errors[k] = errors.get(k, 0) + v
    lat = [(t - driver.commits[(no, u)]) * 1000 for no, u, t in receipts if (no, u) in driver.commits]
    secs = t1 - t0
    db = DbCounters.delta(db0, db1)
    return Row(
        watchers=count, opened=opened, first_ok=first_ok, p50_ms=pct(lat, 50), p99_ms=pct(lat, 99),
        delivered=len(lat), expected=len(driver.commits) * (count // max(1, args.jobs)), ended=ended, errors=errors,
        cpu_pct=100 * CpuMeter.delta(cpu0, cpu1)["server"] / secs, rss_mb=rss,
        sql_per_s=(sql1["query"] - sql0["query"]) / secs, questions_per_s=db["Questions"] / secs,
        void=db["Uptime"] < int(secs) - 1 or bool(errors),
    )  # fmt: skip


async def measure_until_clean(
    server: Server, driver: Driver, args: argparse.Namespace, count: int, workdir: Path
) -> Row:
    """Measure; again (up to 5 times) when MariaDB restarted under the window."""
    row = None
    for _ in range(5):
        try:
            row = await measure(server, driver, args, count, workdir)
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.UNAVAILABLE:
                raise
            print(f"  {count} watchers: database unavailable ({exc.details()}); again", file=sys.stderr)
            await asyncio.to_thread(wait_for_db)
            continue
        if not row.void:
            return row
        print(f"  {count} watchers: MariaDB restarted or streams failed in the window; again", file=sys.stderr)
        await asyncio.to_thread(wait_for_db)
    if row is None:
        raise SystemExit(f"{count} watchers: the database never stayed up long enough")
    return row


def print_table(rows: list[Row], args: argparse.Namespace) -> None:
    print(f"\njobwire watchers: 1 server process, {args.jobs} jobs reporting 1/s each, {args.seconds:.0f} s windows,"
          f" {args.procs} watcher processes x {args.channels} channel(s)\n")  # fmt: skip
    head = ("watchers", "open s", "first msg", "p50 ms", "p99 ms", "delivered/sent", "ended READY", "errors",
            "server CPU", "RSS MB", "SQL/s (server)", "Questions/s (global)")  # fmt: skip
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        cells = (f"{r.watchers:,}", f"{r.opened:.2f}", f"{r.first_ok:,}/{r.watchers:,}", f"{r.p50_ms:.1f}",
                 f"{r.p99_ms:.1f}", f"{r.delivered:,}/{r.expected:,}", f"{r.ended:,}", str(sum(r.errors.values())),
                 f"{r.cpu_pct:.0f}%", f"{r.rss_mb:.0f}", f"{r.sql_per_s:.0f}", f"{r.questions_per_s:.0f}")  # fmt: skip
        print("| " + " | ".join(cells) + " |")


async def run(args: argparse.Namespace) -> None:
    name = f"jobwire_bench_watch_{secrets.token_hex(4)}"
    with connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {name} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
    workdir = Path(tempfile.mkdtemp(prefix="jobwire-bench-watch-"))
    server = start_server(f"{args.mysql_url}/{name}", workdir)
    driver = Driver(server.target)
    rows = []
    try:
        for count in args.counts:
            rows.append(await measure_until_clean(server, driver, args, count, workdir))
            print(f"  {rows[-1]}", file=sys.stderr, flush=True)
        print_table(rows, args)
        mysqld = find_pid(["mariadbd", "mysqld"])
        print(f"\n(mysqld pid {mysqld}; command: {' '.join(sys.argv)})")
    finally:
        await driver.channel.close()
        server.proc.terminate()
        server.proc.wait(30)
        wait_for_db()
        with connect() as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--role", default="main", choices=["main", "watchers"])
    parser.add_argument("--counts", default="0,500,1000,2000", help="watcher counts, comma-separated")
    parser.add_argument("--jobs", type=int, default=100, help="jobs reporting progress, one report per second each")
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each measured window")
    parser.add_argument("--procs", type=int, default=2, help="watcher client processes")
    parser.add_argument("--channels", type=int, default=1, help="channels per watcher process")
    parser.add_argument("--mysql-url", default=MYSQL_URL)
    parser.add_argument("--target", help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--job-nos", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "watchers":
        asyncio.run(watch_many(args.target, args.job_nos.split(","), args.count, args.channels, args.out))
        return
    args.counts = [int(c) for c in args.counts.split(",")]
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
