"""Idle long-polling workers: the SQL a jobwire server sends while workers wait on an empty queue.

    .venv/bin/python bench/idle.py                                  # 50 workers, 3 runs of 20 s windows (~5 min)
    .venv/bin/python bench/idle.py --runs 1 --seconds 8 --warmup 2  # a quick look
    .venv/bin/python bench/idle.py --workers 200 --trickle 0        # only (a) and (b), more workers

The target (the performance issue): "50 idle long-polling workers ≤ 20 statements/s" — what
the server sends while workers wait must not grow with the number of waiting workers.

One `python -m jobwire serve` (every serving process of it; `--processes` sets
JOBWIRE_PROCESSES, default the server's own: the cores) on a fresh MariaDB database,
started through serve_counted.py so every statement its processes send is counted
exactly. In each run, these windows follow one another (interleaved, so a busy machine
weighs on all of them alike), each `--warmup` seconds uncounted, then `--seconds` counted:

  (a)  reference: no client at all; what the server does by itself (reaper, event tail, ...);
  (b)  `--workers` idle workers: each its own gRPC channel and connection, looping
       Claim(job_types=[a type nobody submits], max_jobs=1, wait=--claim-wait), which is
       what a worker in any language does while its queue is empty;
  (c0) unless --trickle 0: a trickle of `--trickle` jobs/s of another type in the same
       queue, submitted by one client and claimed and completed by one worker of that type;
  (c)  the trickle and the idle workers together: the idle workers see wake-ups that are
       not theirs. (c) − (c0) is what the idle workers cost while the queue is not quiet.

Each worker's first Claim waits a random part of --claim-wait, so the fleet is in steady
state from the start (returns spread over the wait, not fifty at once every 30 s).

Per window kind, medians of `--runs` runs: statements/s the server sent (exact, from
sqlcount.py; COM_PING apart), MariaDB's global Questions/s (other tenants included, for
the eye), CPU of the server's processes and of mysqld in % of one core, Claim returns/s
of the idle workers; and the differences (b) − (a) and (c) − (c0) paired run by run. A
window in which MariaDB restarted (other sessions on this machine do that) is measured
again, up to 3 times. Every loop is bounded; the run stops by itself and drops its
database unless --keep. Needs MariaDB at 127.0.0.1:3306 (root, no password).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import random
import secrets
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))

import e2e  # noqa: E402
import grpc  # noqa: E402
import pymysql  # noqa: E402
from google.protobuf.duration_pb2 import Duration  # noqa: E402
from measure import (  # noqa: E402
    CpuMeter,
    DbCounters,
    connect,
    descendants,
    describe_machine,
    find_pid,
    median,
    wait_for_db,
)

from jobwire.v1 import job_pb2, job_pb2_grpc, worker_pb2, worker_pb2_grpc  # noqa: E402

IDLE_TYPE = "idle.nobody"  # never submitted: these workers only ever wait
TRICKLE_TYPE = "idle.trickle"  # same (default) queue, so its submits wake the idle workers too
OWN_CONNECTION = [("grpc.use_local_subchannel_pool", 1)]  # else grpc shares one connection per process
MAX_WAIT_S = 60.0  # the server refuses longer waits (worker servicer's MAX_WAIT_S)
TARGET_STATEMENTS_S = 20.0
SHA = hashlib.sha256(b"").hexdigest()
RPC_SLACK_S = 10.0  # a Claim's gRPC deadline beyond its wait: the server answers before it
READY_TIMEOUT_S = 30.0
RETRIES = 3


@dataclass(frozen=True)
class Kind:
    key: str
    label: str
    workers: int
    trickle: float


@dataclass
class Window:
    kind: str
    run: int
    seconds: float = 0.0
    sql: dict[str, int] = field(default_factory=dict)  # what the server's processes sent (exact)
    db: dict[str, int] = field(default_factory=dict)  # MariaDB global status delta (every tenant)
    cpu: dict[str, float] = field(default_factory=dict)  # CPU seconds
    returns: int = 0  # idle workers' Claim calls that returned inside the window
    stray_leases: int = 0  # leases an idle worker got (must stay 0: nobody submits its type)
    trickle_done: int = 0  # trickle jobs completed inside the window
    errors: Counter[str] = field(default_factory=Counter)

    def per_s(self, key: str) -> float:
        return self.sql.get(key, 0) / self.seconds if self.seconds else float("nan")

    @property
    def questions_per_s(self) -> float:
        return self.db.get("Questions", 0) / self.seconds if self.seconds else float("nan")

    def busy(self, who: str) -> float:
        """CPU of `who` in % of one core."""
        return 100 * self.cpu.get(who, float("nan")) / self.seconds if self.seconds else float("nan")

    @property
    def db_restarted(self) -> bool:
        return self.db.get("Uptime", 0) < int(self.seconds) - 1


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description="SQL a jobwire server sends while workers long-poll an empty queue")
    p.add_argument("--workers", type=int, default=50, help="idle long-polling workers, a connection each")
    p.add_argument("--seconds", type=float, default=20.0, help="counted seconds per window (default 20)")
    p.add_argument("--warmup", type=float, default=3.0, help="uncounted seconds before each window (default 3)")
    p.add_argument("--runs", type=int, default=3, help="runs to take medians over (default 3)")
    p.add_argument("--claim-wait", type=float, default=30.0, help="Claim long-poll wait, seconds (server max 60)")
    p.add_argument("--trickle", type=float, default=5.0, help="jobs/s of another type for (c0)/(c); 0 leaves them out")
    p.add_argument(
        "--processes", type=int, help="jobwire serving processes (JOBWIRE_PROCESSES; default: the server's, the cores)"
    )
    p.add_argument(
        "--server-preload",
        type=Path,
        help="a Python file run inside the jobwire server before it serves (what-if experiments, see README)",
    )
    p.add_argument("--keep", action="store_true", help="keep the database and the server log")
    args = p.parse_args()
    if args.workers < 1 or args.runs < 1 or args.seconds <= 0 or args.warmup < 0 or args.trickle < 0:
        p.error("--workers, --runs and --seconds must be positive; --warmup and --trickle not negative")
    if not 0 < args.claim_wait <= MAX_WAIT_S:
        p.error(f"--claim-wait must be in (0, {MAX_WAIT_S:.0f}] seconds: the server refuses longer waits")
    return args


def kinds(args: argparse.Namespace) -> list[Kind]:
    out = [
        Kind("a", "(a) reference: no client", 0, 0.0),
        Kind("b", f"(b) {args.workers} idle workers", args.workers, 0.0),
    ]
    if args.trickle:
        out += [
            Kind("c0", f"(c0) trickle alone: {args.trickle:g} jobs/s of another type", 0, args.trickle),
            Kind("c", f"(c) trickle + {args.workers} idle workers", args.workers, args.trickle),
        ]
    return out


def _wait(seconds: float) -> Duration:
    return Duration(seconds=int(seconds), nanos=int((seconds % 1) * 1e9))


class Clients:
    """The clients of one window, on an event loop of their own in a thread, until `stop()`.

    The main thread samples the counters at the window's edges while this runs.
    """

    def __init__(self, target: str, kind: Kind, claim_wait: float) -> None:
        self.target, self.kind, self.claim_wait = target, kind, claim_wait
        self.returns: list[float] = []  # monotonic time of each idle Claim return
        self.trickle_done: list[float] = []
        self.stray_leases = 0
        self.errors: Counter[str] = Counter()
        self.ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)

    def _error(self, what: str, exc: grpc.aio.AioRpcError) -> None:
        self.errors[f"{what} {exc.code().name}: {exc.details()}"[:120]] += 1

    async def main(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        n = self.kind.workers + (2 if self.kind.trickle else 0)
        channels = [grpc.aio.insecure_channel(self.target, options=OWN_CONNECTION) for _ in range(n)]
        tasks: list[asyncio.Task[None]] = []
        try:
            await asyncio.gather(*(asyncio.wait_for(ch.channel_ready(), READY_TIMEOUT_S) for ch in channels))
            tasks = [asyncio.create_task(self.idle_worker(i, channels[i])) for i in range(self.kind.workers)]
            completing: set[asyncio.Task[None]] = set()
            if self.kind.trickle:
                submit_ch, work_ch = channels[-2:]
                tasks += [
                    asyncio.create_task(self.trickle_submitter(submit_ch)),
                    asyncio.create_task(self.trickle_worker(work_ch, completing)),
                ]
            self.ready.set()
            await self._stop.wait()
            # Waiting Claims are cancelled (the server drops their waits); a trickle job's
            # Complete in flight finishes, and the queue is drained so the next window starts empty.
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if completing:
                await asyncio.wait(completing, timeout=RPC_SLACK_S)
            if self.kind.trickle:
                await self.drain(channels[-1])
        finally:
            self.ready.set()
            for task in tasks:
                task.cancel()
            for ch in channels:
                await ch.close()

    async def idle_worker(self, n: int, channel: grpc.aio.Channel) -> None:
        stub = worker_pb2_grpc.WorkerServiceStub(channel)
        spec = [worker_pb2.JobTypeSpec(name=IDLE_TYPE)]
        wait = random.uniform(0.1, self.claim_wait)  # first Claim: a random phase, as a running fleet has
        while True:
            request = worker_pb2.ClaimRequest(worker_id=f"idle-{n}", job_types=spec, max_jobs=1, wait=_wait(wait))
            try:
                reply = await stub.Claim(request, timeout=wait + RPC_SLACK_S)
            except grpc.aio.AioRpcError as exc:
                self._error("Claim", exc)
                await asyncio.sleep(1.0)  # no tight loop against a failing server
                continue
            self.returns.append(time.monotonic())
            self.stray_leases += len(reply.leases)
            wait = self.claim_wait

    async def trickle_submitter(self, channel: grpc.aio.Channel) -> None:
        """`trickle` Submits a second on a fixed schedule; a slot missed is skipped, not caught up."""
        stub = job_pb2_grpc.JobServiceStub(channel)
        request = job_pb2.SubmitRequest(job_type=TRICKLE_TYPE, payload=b"{}", owner="idle-bench")
        period = 1.0 / self.kind.trickle
        due = time.monotonic()
        while True:
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            try:
                await stub.Submit(request, timeout=RPC_SLACK_S)
            except grpc.aio.AioRpcError as exc:
                self._error("Submit", exc)
            due = max(due + period, time.monotonic())

    async def trickle_worker(self, channel: grpc.aio.Channel, completing: set[asyncio.Task[None]]) -> None:
        """One worker of the trickle's type: long-polls like the idle ones, completes each job at once."""
        stub = worker_pb2_grpc.WorkerServiceStub(channel)
        request = worker_pb2.ClaimRequest(
            worker_id="idle-trickle",
            job_types=[worker_pb2.JobTypeSpec(name=TRICKLE_TYPE)],
            max_jobs=4,
            wait=_wait(self.claim_wait),
        )
        while True:
            try:
                reply = await stub.Claim(request, timeout=self.claim_wait + RPC_SLACK_S)
            except grpc.aio.AioRpcError as exc:
                self._error("trickle Claim", exc)
                await asyncio.sleep(1.0)
                continue
            for lease in reply.leases:
                task = asyncio.create_task(self.complete(stub, lease))
                completing.add(task)
                task.add_done_callback(completing.discard)

    async def complete(self, stub: worker_pb2_grpc.WorkerServiceStub, lease: worker_pb2.Lease) -> None:
        artifact = job_pb2.Artifact(uri=f"file:///idle/{lease.job_no}", size_bytes=0, sha256=SHA)
        request = worker_pb2.CompleteRequest(job_no=lease.job_no, worker_token=lease.worker_token, result=artifact)
        try:
            await stub.Complete(request, timeout=RPC_SLACK_S)
            self.trickle_done.append(time.monotonic())
        except grpc.aio.AioRpcError as exc:
            self._error("Complete", exc)

    async def drain(self, channel: grpc.aio.Channel) -> None:
        """Complete what is still queued (a cancelled Claim's leases come back a moment later)."""
        stub = worker_pb2_grpc.WorkerServiceStub(channel)
        spec = [worker_pb2.JobTypeSpec(name=TRICKLE_TYPE)]
        for _ in range(20):
            request = worker_pb2.ClaimRequest(worker_id="idle-drain", job_types=spec, max_jobs=100, wait=_wait(0.3))
            reply = await stub.Claim(request, timeout=RPC_SLACK_S)
            if not reply.leases:
                return
            await asyncio.gather(*(self.complete(stub, lease) for lease in reply.leases))


def measure(server: e2e.Server, kind: Kind, run: int, args: argparse.Namespace, counters: DbCounters) -> Window:
    """One window: clients start, `warmup` uncounted, `seconds` counted, clients stop."""
    meter = CpuMeter({"server": server.pid, "mysqld": find_pid(("mariadbd", "mysqld"))}, trees=frozenset({"server"}))
    clients = Clients(f"127.0.0.1:{server.port}", kind, args.claim_wait)
    failure: list[BaseException] = []

    def loop() -> None:
        try:
            asyncio.run(clients.main())
        except BaseException as exc:  # noqa: BLE001 - re-raised in the main thread
            failure.append(exc)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    w = Window(kind=kind.key, run=run)
    try:
        clients.ready.wait(READY_TIMEOUT_S + 5)
        time.sleep(args.warmup)
        sql0, cpu0, db0, t0 = server.sql_counts(), meter.sample(), counters.sample(), time.monotonic()
        time.sleep(args.seconds)
        sql1, cpu1, db1, t1 = server.sql_counts(), meter.sample(), counters.sample(), time.monotonic()
    finally:
        clients.stop()
        thread.join(timeout=60)
    if failure:
        raise failure[0]
    if server.proc.poll() is not None:
        raise RuntimeError(f"the jobwire server exited ({server.proc.returncode}); see {server.log_path}")
    w.seconds = t1 - t0
    w.sql = {k: sql1[k] - sql0[k] for k in sql1}
    w.db = DbCounters.delta(db0, db1)
    w.cpu = CpuMeter.delta(cpu0, cpu1)
    w.returns = sum(1 for t in clients.returns if t0 <= t < t1)
    w.trickle_done = sum(1 for t in clients.trickle_done if t0 <= t < t1)
    w.stray_leases = clients.stray_leases
    w.errors = clients.errors
    return w


def measure_until_clean(
    server: e2e.Server, kind: Kind, run: int, args: argparse.Namespace, counters: DbCounters, notes: list[str]
) -> Window:
    """Measure; again (up to RETRIES times) when MariaDB restarted under the window."""
    for attempt in range(1, RETRIES + 1):
        w = measure(server, kind, run, args, counters)
        if not w.db_restarted:
            return w
        notes.append(f"run {run} {kind.label}: MariaDB restarted inside the window (attempt {attempt})")
        log(notes[-1])
        wait_for_db()
        counters.conn = connect()
    return w


def report(
    args: argparse.Namespace,
    windows: list[Window],
    machine: list[str],
    family: int,
    notes: list[str],
    elapsed: float,
) -> str:
    ks = kinds(args)
    by = {k.key: [w for w in windows if w.kind == k.key] for k in ks}

    def cell(values: list[float], digits: int = 1) -> str:
        return f"{median(values):,.{digits}f}" if values else "–"

    def col(key: str, get: Callable[[Window], float], digits: int = 1) -> str:
        return cell([get(w) for w in by[key]], digits)

    def paired(key: str, ref: str, get: Callable[[Window], float]) -> list[float]:
        """Differences taken run by run (two windows seconds apart), as README's paired ratios."""
        refs = {w.run: w for w in by[ref]}
        return [get(w) - get(refs[w.run]) for w in by[key] if w.run in refs]

    def statements(w: Window) -> float:
        return w.per_s("query")

    lines = [
        f"## jobwire idle workers — medians of {args.runs} run(s), {args.seconds:.0f} s windows"
        f" after {args.warmup:g} s warm-up",
        "",
        *(f"- {line}" for line in machine),
        f"- jobwire server: `python -m jobwire serve`, {args.processes or os.cpu_count()} serving process(es)"
        f" ({family} processes in the family, all counted)",
        f"- idle worker: a gRPC channel and connection each, Claim(job_types=[{IDLE_TYPE}], max_jobs=1,"
        f" wait={args.claim_wait:g} s) in a loop, first wait at a random phase",
        f"- command: `python {' '.join(sys.argv)}` ({elapsed:.0f} s)",
        "",
        "| window | **statements/s** (server, exact) | pings/s | COMMIT · ROLLBACK · BEGIN /s"
        " | Questions/s (MariaDB global) | server CPU, % of a core | mysqld CPU, % of a core"
        " | idle Claim returns/s | trickle jobs done/s | errors · stray leases |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for k in ks:
        ws = by[k.key]
        errors = sum(sum(w.errors.values()) for w in ws)
        stray = sum(w.stray_leases for w in ws)
        lines.append(
            f"| {k.label} | **{col(k.key, statements)}** | {col(k.key, lambda w: w.per_s('ping'))}"
            f" | {col(k.key, lambda w: w.per_s('commit'))} · {col(k.key, lambda w: w.per_s('rollback'))}"
            f" · {col(k.key, lambda w: w.per_s('begin'))}"
            f" | {col(k.key, lambda w: w.questions_per_s)} | {col(k.key, lambda w: w.busy('server'))}"
            f" | {col(k.key, lambda w: w.busy('mysqld'))}"
            f" | {col(k.key, lambda w: w.returns / w.seconds, 2) if k.workers else '–'}"
            f" | {col(k.key, lambda w: w.trickle_done / w.seconds, 2) if k.trickle else '–'}"
            f" | {errors} · {stray} |"
        )
    diffs = [("b", "a")] + ([("c", "c0")] if args.trickle else [])
    lines += [
        "",
        "| difference (paired run by run) | statements/s | pings/s | statements per idle Claim return"
        " | statements/s per idle worker | server CPU, % of a core |",
        "|---|---|---|---|---|---|",
    ]
    for key, ref in diffs:
        d_sql = paired(key, ref, statements)
        per_return = [
            d / w.returns * w.seconds
            for d, w in zip(d_sql, [w for w in by[key] if w.run in {r.run for r in by[ref]}], strict=True)
            if w.returns
        ]
        lines.append(
            f"| ({key}) − ({ref}) | **{cell(d_sql)}** | {cell(paired(key, ref, lambda w: w.per_s('ping')))}"
            f" | {cell(per_return, 2)} | {cell([d / args.workers for d in d_sql], 3)}"
            f" | {cell(paired(key, ref, lambda w: w.busy('server')))} |"
        )
    b_minus_a = median(paired("b", "a", statements))
    b = median([statements(w) for w in by["b"]])
    ok = b_minus_a <= TARGET_STATEMENTS_S and b <= TARGET_STATEMENTS_S
    lines += [
        "",
        f"**Target: {args.workers} idle long-polling workers ≤ {TARGET_STATEMENTS_S:.0f} statements/s:"
        f" (b) − (a) = {b_minus_a:.1f} statements/s ≤ {TARGET_STATEMENTS_S:.0f} and (b) = {b:.1f} ≤"
        f" {TARGET_STATEMENTS_S:.0f} — {'PASS' if ok else 'MISS'}**"
        f" (pings, not statements, are apart: (b) sends {median([w.per_s('ping') for w in by['b']]):.1f}/s)",
    ]
    if args.workers != 50:
        lines.append(f"(the issue's target names 50 workers; this run had {args.workers})")
    if any(w.errors for w in windows):
        lines += ["", "Errors:"] + [
            f"- run {w.run} ({w.kind}): {msg} × {n}" for w in windows for msg, n in w.errors.most_common()
        ]
    lines += [f"- {note}" for note in notes]
    return "\n".join(lines)


def start_server(database: str, workdir: Path, env: dict[str, str]) -> e2e.Server:
    try:
        return e2e.Server(database, workdir / "server.log", env)
    except (RuntimeError, pymysql.err.OperationalError):
        wait_for_db()  # MariaDB restarted under the migration (other sessions do that): once more
        return e2e.Server(database, workdir / "server.log", env)


def main() -> None:
    args = parse_args()
    started = time.monotonic()
    machine = describe_machine()
    env: dict[str, str] = {}
    if args.processes:
        env["JOBWIRE_PROCESSES"] = str(args.processes)
    if args.server_preload:
        env["JWBENCH_PRELOAD"] = str(args.server_preload.resolve())
    database = f"jwbench_idle_{secrets.token_hex(3)}"
    workdir = Path(tempfile.mkdtemp(prefix="jwbench-idle-"))
    log(f"starting the jobwire server on database {database}")
    server = start_server(database, workdir, env)
    counters = DbCounters()
    windows: list[Window] = []
    notes: list[str] = []
    family = 0
    try:
        time.sleep(1.0)  # let the family's children come up before counting them
        family = len(descendants(server.pid))
        for run in range(1, args.runs + 1):
            for kind in kinds(args):
                w = measure_until_clean(server, kind, run, args, counters, notes)
                windows.append(w)
                log(
                    f"run {run} · {kind.label}: {w.per_s('query'):.1f} statements/s, {w.per_s('ping'):.1f} pings/s,"
                    f" server {w.busy('server'):.0f}% · {w.returns} idle returns · {sum(w.errors.values())} errors"
                )
    finally:
        counters.close()
        server.stop(drop=not args.keep)
        if args.keep:
            notes.append(f"database {database} and server log {workdir / 'server.log'} kept")
        else:
            for each in workdir.iterdir():
                each.unlink(missing_ok=True)
            workdir.rmdir()
    print(report(args, windows, machine, family, notes, time.monotonic() - started))


if __name__ == "__main__":
    main()
