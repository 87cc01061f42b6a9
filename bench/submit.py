"""jobwire Submit against the raw INSERT floor: "Submit ≥ 0.5× raw INSERT at 8 clients".

    .venv/bin/python bench/submit.py                     # 1, 8, 32 clients, 3 runs (~2 min)
    .venv/bin/python bench/submit.py --clients 8 --runs 1 --seconds 3

What is compared, at each client count:

  (a) raw: N threads, each its own autocommit PyMySQL connection, INSERTing jobs in a loop:
      step 1 of the raw lifecycle (bench/baseline_raw.py), its statement, its schema, the
      same 2-byte payload. Each INSERT is its own durable transaction.
  (b) jobwire: `python -m jobwire serve` (bench/e2e.py's Server, statements counted by
      serve_counted.py) on a fresh MariaDB database; N concurrent submitters, each on its
      own gRPC aio channel, `Submit(job_type, payload=b"{}")` in a loop, each awaiting its
      reply. A Submit answers once its job and its SUBMITTED event are committed.

How: for each run and client count, one raw window and one jobwire window, seconds apart
(the order alternates run by run, so neither side always gets the warmer machine). Each
window: clients start, --warmup seconds are not counted, then completions inside --seconds
count (or until --jobs complete). Around the window the bench samples CPU of the server
(every process of its family), mysqld and itself from /proc, MariaDB's global status, and
the exact commands each side sent (sqlcount.py: raw in this process, jobwire in the
server's). The raw table is truncated before every raw window; jobwire's rows accumulate
(bounded by --jobs per window). A window in which MariaDB restarted (other sessions on
this machine do that) or a client lost its connection is measured again, up to 3 times.

The table shows medians of --runs runs and the ratio jobwire/raw paired run by run (the
median of the per-run ratios), then PASS or MISS for 8 clients ≥ 0.5×. Both databases are
dropped at the end unless --keep. Needs MariaDB at 127.0.0.1:3306 (root, no password).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import baseline_raw
import e2e
import grpc
import pymysql
import sqlcount
import throughput
from measure import (
    CpuMeter,
    DbCounters,
    Window,
    connect,
    describe_machine,
    drop_database,
    find_pid,
    in_window,
    latencies_in,
    measure_window,
    median,
    wait_for_db,
)
from throughput import fmt, med, p50_p99, row, spread

from jobwire.v1 import job_pb2, job_pb2_grpc

JOB_TYPE = "bench.noop"  # baseline_raw's INSERT writes this job type too
PAYLOAD = b"{}"  # the raw clients' payload: both sides store the same bytes
TARGET_CLIENTS, TARGET_RATIO = 8, 0.5
RPC_TIMEOUT_S = 30.0
ATTEMPTS = 3
SETTLE_S = 2.0  # after a MariaDB restart: let it warm up and the server's pool reconnect
# A connection per client, as separate machines would have: grpc otherwise shares one
# subchannel among a process's channels, and every call would reach one serving process.
OWN_CONNECTION = [("grpc.use_local_subchannel_pool", 1)]


@dataclass
class Side:
    """One window of one side (raw INSERT or jobwire Submit)."""

    clients: int
    window: Window
    jobs: int
    latency_ms: list[float]
    errors: list[str]
    monitor_queries: int = 0  # the bench's own SHOW inside the window (raw counts this process)
    retries: dict[str, int] = field(default_factory=dict)

    @property
    def per_s(self) -> float:
        return self.jobs / self.window.seconds if self.window.seconds else float("nan")

    def per_job(self, key: str) -> float:
        """A MariaDB global status delta per job (other tenants of the server included)."""
        return self.window.db.get(key, 0) / self.jobs if self.jobs else float("nan")

    def sql_per_job(self, key: str = "query") -> float:
        """Exact commands the measured side sent, per job (sqlcount.py)."""
        if not self.window.sql or not self.jobs:
            return float("nan")
        return (self.window.sql.get(key, 0) - (self.monitor_queries if key == "query" else 0)) / self.jobs

    def cpu_ms_per_job(self, who: str) -> float:
        return self.window.cpu.get(who, float("nan")) * 1000 / self.jobs if self.jobs else float("nan")

    @property
    def void(self) -> bool:
        """MariaDB restarted in the window, or a client lost its connection: the figures mean nothing."""
        lost = any("2013" in e or "2003" in e or "UNAVAILABLE" in e for e in self.errors)
        return self.window.db_restarted or lost


@dataclass
class Results:
    raw: dict[int, list[Side | None]] = field(default_factory=dict)
    jobwire: dict[int, list[Side | None]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="jobwire Submit/s against raw PyMySQL INSERT/s")
    p.add_argument("--clients", default="1,8,32", help="comma-separated client counts (default 1,8,32)")
    p.add_argument("--runs", type=int, default=3, help="runs to take medians over (default 3)")
    p.add_argument("--seconds", type=float, default=5.0, help="counted seconds per window (default 5)")
    p.add_argument("--warmup", type=float, default=0.5, help="uncounted seconds before each window")
    p.add_argument("--jobs", type=int, default=20_000, help="end a window early after this many jobs")
    p.add_argument("--keep", action="store_true", help="keep both databases and the server log")
    p.add_argument(
        "--server-env", action="append", default=[], metavar="NAME=VALUE", help="extra environment for the server"
    )
    p.add_argument("--server-preload", type=Path, help="a Python file run inside the server before it serves")
    args = p.parse_args(argv)
    args.client_counts = [int(c) for c in args.clients.split(",") if c.strip()]
    if not args.client_counts or min(args.client_counts) < 1 or args.runs < 1 or args.seconds <= 0 or args.jobs < 1:
        p.error("--clients needs positive counts; --runs, --seconds and --jobs must be positive")
    if any("=" not in kv for kv in args.server_env):
        p.error("--server-env takes NAME=VALUE")
    return args


# -- (a) raw INSERT ---------------------------------------------------------------------


def _raw_client(
    database: str, stop: threading.Event, done: list[float], calls: list[tuple[float, float]], errors: list[str]
) -> None:
    # The lifecycle's connection settings, so step 1 runs exactly as it does there.
    conn = connect(database, init_command="SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
    try:
        with conn.cursor() as cur:
            while not stop.is_set():
                t = time.monotonic()
                cur.execute(baseline_raw.INSERT, (PAYLOAD,))
                end = time.monotonic()
                calls.append((t, end - t))
                done.append(end)
    except Exception as exc:  # noqa: BLE001 - a failed client is reported, not hidden
        errors.append(f"{type(exc).__name__}: {exc}")
        stop.set()
    finally:
        conn.close()


def run_raw(database: str, clients: int, args: argparse.Namespace, counters: DbCounters, counter_file: Path) -> Side:
    throughput.truncate(database)  # every raw window starts from an empty table
    meter = CpuMeter({"bench": os.getpid(), "mysqld": find_pid(("mariadbd", "mysqld"))})
    stop = threading.Event()
    done: list[float] = []
    calls: list[tuple[float, float]] = []
    errors: list[str] = []
    threads = [
        threading.Thread(target=_raw_client, args=(database, stop, done, calls, errors), daemon=True)
        for _ in range(clients)
    ]
    for t in threads:
        t.start()
    try:
        window = measure_window(
            meter, counters, lambda: sqlcount.read(counter_file), args.warmup, args.seconds, done, args.jobs
        )
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
    # measure_window's first SHOW GLOBAL STATUS is sent by this process inside the count.
    return Side(clients, window, in_window(done, window), latencies_in(calls, window), errors, monitor_queries=1)


# -- (b) jobwire Submit -----------------------------------------------------------------


class _Submitters:
    """N submitters on one event loop in a thread of their own, so the main thread samples the edges."""

    def __init__(self, port: int, clients: int) -> None:
        self.port, self.clients = port, clients
        self.stopping = False
        self.ready = threading.Event()
        self.done: list[float] = []
        self.calls: list[tuple[float, float]] = []
        self.errors: Counter[str] = Counter()

    async def submitter(self, channel: grpc.aio.Channel) -> None:
        stub = job_pb2_grpc.JobServiceStub(channel)
        request = job_pb2.SubmitRequest(job_type=JOB_TYPE, payload=PAYLOAD)
        while not self.stopping:
            t = time.monotonic()
            try:
                await stub.Submit(request, timeout=RPC_TIMEOUT_S)
            except grpc.aio.AioRpcError as exc:
                self.errors[f"Submit {exc.code().name}: {exc.details()}"[:120]] += 1
                await asyncio.sleep(0.01)  # a failing server is not hammered in a tight loop
                continue
            end = time.monotonic()
            self.calls.append((t, end - t))
            self.done.append(end)

    async def main(self) -> None:
        target = f"127.0.0.1:{self.port}"
        channels = [grpc.aio.insecure_channel(target, options=OWN_CONNECTION) for _ in range(self.clients)]
        try:
            for ch in channels:
                await asyncio.wait_for(ch.channel_ready(), 10)
            self.ready.set()
            await asyncio.gather(*(self.submitter(ch) for ch in channels))
        finally:
            self.ready.set()
            for ch in channels:
                await ch.close()


def run_jobwire(server: e2e.Server, clients: int, args: argparse.Namespace, counters: DbCounters) -> Side:
    runner = _Submitters(server.port, clients)
    # trees: the server is a family (a parent and its serving processes); count them all.
    meter = CpuMeter(
        {"server": server.pid, "bench": os.getpid(), "mysqld": find_pid(("mariadbd", "mysqld"))},
        trees=frozenset({"server"}),
    )
    server.new_log_lines()  # only this window's transaction retries are reported
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
        window = measure_window(meter, counters, server.sql_counts, args.warmup, args.seconds, runner.done, args.jobs)
    finally:
        runner.stopping = True  # each submitter ends after the reply it awaits
        thread.join(timeout=2 * RPC_TIMEOUT_S)
    if failure:
        raise failure[0]
    retries = Counter(m.group(1) for line in server.new_log_lines() if (m := e2e.RETRY_LOG.search(line)))
    errors = [f"{k} (×{v})" for k, v in runner.errors.items()]
    return Side(
        clients, window, in_window(runner.done, window), latencies_in(runner.calls, window), errors,
        retries=dict(retries),
    )  # fmt: skip


def steady(label: str, once: Callable[[], Side], results: Results) -> Side | None:
    """Measure again when MariaDB restarted under the window; None when every attempt was void."""
    for attempt in range(1, ATTEMPTS + 1):
        try:
            result = once()
        except (pymysql.err.OperationalError, grpc.aio.AioRpcError) as exc:
            if attempt == ATTEMPTS:
                raise
            code = exc.code().name if isinstance(exc, grpc.aio.AioRpcError) else exc.args[0]
            why = f"{type(exc).__name__} {code}"
        else:
            if not result.void:
                return result
            if attempt == ATTEMPTS:
                results.notes.append(f"{label}: still void after {ATTEMPTS} attempts, left out ({result.errors[:1]})")
                return None
            why = "MariaDB restarted in the window" if result.window.db_restarted else "database connection lost"
        results.notes.append(f"{label}: measured again ({why})")
        log(f"{label}: measuring again: {why}")
        wait_for_db()
        time.sleep(SETTLE_S)
    raise AssertionError("unreachable")


def measure(args: argparse.Namespace, results: Results, workdir: Path) -> None:
    tag = secrets.token_hex(3)
    raw_db, jw_db = f"jwbench_rawins_{tag}", f"jwbench_submit_{tag}"
    counter_file = workdir / "bench.sqlcount"
    sqlcount.install(counter_file)  # counts this process's PyMySQL commands: the raw clients'
    counters = DbCounters()
    baseline_raw.create_database(raw_db)
    env = dict(kv.split("=", 1) for kv in args.server_env)
    if args.server_preload:
        env["JWBENCH_PRELOAD"] = str(args.server_preload.resolve())
    server: e2e.Server | None = None
    try:
        log(f"starting the jobwire server on database {jw_db}")
        try:
            server = e2e.Server(jw_db, workdir / "server.log", env)
        except (RuntimeError, pymysql.err.OperationalError):
            wait_for_db()  # MariaDB restarted under the migration: once more
            server = e2e.Server(jw_db, workdir / "server.log", env)
        for run in range(1, args.runs + 1):
            for clients in args.client_counts:

                def raw_once(clients: int = clients) -> Side:
                    return run_raw(raw_db, clients, args, counters, counter_file)

                def jobwire_once(clients: int = clients, server: e2e.Server = server) -> Side:
                    return run_jobwire(server, clients, args, counters)

                # Alternate which side goes first, so a drifting machine favours neither.
                order = [("raw", raw_once), ("jobwire", jobwire_once)]
                got: dict[str, Side | None] = {}
                for name, once in order if run % 2 else order[::-1]:
                    got[name] = steady(f"{name}, {clients} clients", once, results)
                results.raw.setdefault(clients, []).append(got["raw"])
                results.jobwire.setdefault(clients, []).append(got["jobwire"])
                r, j = got["raw"], got["jobwire"]
                log(
                    f"run {run} · {clients:>2} clients: raw INSERT {fmt(r.per_s) if r else '–':>6}/s"
                    f"  jobwire Submit {fmt(j.per_s, 1) if j else '–':>7}/s"
                    + (f"  errors raw {r.errors[:1]}" if r and r.errors else "")
                    + (f"  errors jobwire {j.errors[:1]}" if j and j.errors else "")
                )
    finally:
        if server is not None:
            server.stop(drop=not args.keep)
        elif not args.keep:
            drop_database(jw_db)  # the server did not start: its database may exist all the same
        counters.close()
        sqlcount.clear(counter_file)
        if not args.keep:
            drop_database(raw_db)
        else:
            results.notes.append(f"kept: databases `{raw_db}` and `{jw_db}`, server log {workdir / 'server.log'}")


# -- the report ------------------------------------------------------------------------


def ok(items: Sequence[Side | None]) -> list[Side]:
    """The valid windows (None keeps runs paired where a window stayed void)."""
    return [x for x in items if x is not None]


def paired_ratio(jw: Sequence[Side | None], raw: Sequence[Side | None]) -> float:
    return median(j.per_s / r.per_s for j, r in zip(jw, raw, strict=True) if j and r and r.per_s)


def processes(server_env: list[str]) -> str:
    env = dict(kv.split("=", 1) for kv in server_env)
    return env.get("JOBWIRE_PROCESSES") or os.environ.get("JOBWIRE_PROCESSES") or str(os.cpu_count())


def report(args: argparse.Namespace, results: Results, machine: list[str], elapsed: float) -> str:
    counts = args.client_counts
    raw, jw = results.raw, results.jobwire

    def per_submit(c: int, key: str) -> str:
        return fmt(med(jw[c], lambda j: j.sql_per_job(key)), 2)

    def both(get: Callable[[Side], float], digits: int) -> Callable[[int], str]:
        return lambda c: f"{fmt(med(raw[c], get), digits)} / {fmt(med(jw[c], get), digits)}"

    lines = [
        f"## jobwire Submit vs raw INSERT — medians of {args.runs} run(s), {fmt(args.seconds, 1)} s windows",
        "",
        *[f"- {m}" for m in machine],
        f"- command: `{' '.join([Path(sys.executable).name, *sys.argv])}` ({fmt(elapsed)} s)",
        f"- jobwire: `python -m jobwire serve`, {processes(args.server_env)} serving process(es); N submitters,"
        ' a gRPC channel each, Submit(job_type, payload=b"{}") in a loop, each awaiting its reply',
        "- raw: N threads, an autocommit PyMySQL connection each, baseline_raw's job INSERT in a loop;"
        " the table truncated before each window",
        "",
        "| what | " + " | ".join(f"{c} client{'s' if c > 1 else ''}" for c in counts) + " |",
        "|---|" + "---|" * len(counts),
        row("raw PyMySQL INSERT, jobs/s", counts, lambda c: spread([r.per_s for r in ok(raw[c])])),
        row("**jobwire Submit, jobs/s**", counts, lambda c: f"**{spread([j.per_s for j in ok(jw[c])], 1)}**"),
        row("**ratio jobwire / raw** (paired per run)", counts, lambda c: f"**{fmt(paired_ratio(jw[c], raw[c]), 3)}**"),
        row("raw INSERT p50 / p99, ms", counts, lambda c: p50_p99(raw[c], "latency_ms", 2)),
        row("jobwire Submit p50 / p99, ms", counts, lambda c: p50_p99(jw[c], "latency_ms", 1)),
        row(
            "**jobwire server CPU, ms/submit** (all its processes)",
            counts,
            lambda c: f"**{fmt(med(jw[c], lambda j: j.cpu_ms_per_job('server')), 2)}**",
        ),
        row(
            "jobwire server busy, % of one core",
            counts,
            lambda c: fmt(med(jw[c], lambda j: 100 * j.window.cpu.get("server", float("nan")) / j.window.seconds)),
        ),
        row("mysqld CPU, ms/job: raw / jobwire", counts, both(lambda s: s.cpu_ms_per_job("mysqld"), 2)),
        row("bench (client) CPU, ms/job: raw / jobwire", counts, both(lambda s: s.cpu_ms_per_job("bench"), 2)),
        row(
            "**DB commands/job, exact (driver count; a multi-statement is one): raw / jobwire**",
            counts,
            lambda c: f"**{both(lambda s: s.sql_per_job(), 2)(c)}**",
        ),
        row(
            "jobwire per submit: COMMIT · ROLLBACK · BEGIN · COM_PING",
            counts,
            lambda c: " · ".join(per_submit(c, k) for k in ("commit", "rollback", "begin", "ping")),
        ),
        row(
            "jobwire submits per COMMIT (every server COMMIT, background ones too)",
            counts,
            lambda c: fmt(med(jw[c], lambda j: 1 / j.sql_per_job("commit") if j.sql_per_job("commit") else 0), 2),
        ),
        row(
            "MariaDB Questions/job, global (other tenants included): raw / jobwire",
            counts,
            both(lambda s: s.per_job("Questions"), 2),
        ),
        row("InnoDB fsyncs/job, global: raw / jobwire", counts, both(lambda s: s.per_job("Innodb_data_fsyncs"), 2)),
        row(
            "InnoDB row lock waits/job · ms waited/job: raw / jobwire",
            counts,
            lambda c: (
                f"{fmt(med(raw[c], lambda r: r.per_job('Innodb_row_lock_waits')), 2)} · "
                f"{fmt(med(raw[c], lambda r: r.per_job('Innodb_row_lock_time')), 1)} / "
                f"{fmt(med(jw[c], lambda j: j.per_job('Innodb_row_lock_waits')), 2)} · "
                f"{fmt(med(jw[c], lambda j: j.per_job('Innodb_row_lock_time')), 1)}"
            ),
        ),
    ]
    lines += ["", verdict(results)]
    notes = [f"{n} (×{k})" if k > 1 else n for n, k in Counter(results.notes).items()]
    for name, sides in (("raw", raw), ("jobwire", jw)):
        for clients, items in sides.items():
            errors = [e for s in ok(items) for e in s.errors]
            retries: Counter[str] = Counter()
            for s in ok(items):
                retries.update(s.retries)
            if errors:
                notes.append(f"{name} {clients} clients: errors {errors[:3]}")
            if retries:
                notes.append(f"{name} {clients} clients: server retried transactions {dict(retries)}")
    lines += ["", *[f"- {n}" for n in notes]] if notes else []
    return "\n".join(lines)


def verdict(results: Results) -> str:
    target = f"{TARGET_CLIENTS} clients ≥ {TARGET_RATIO}×"
    if TARGET_CLIENTS not in results.raw:
        return f"**NOT MEASURED** — {target} (--clients has no {TARGET_CLIENTS})"
    ratio = paired_ratio(results.jobwire[TARGET_CLIENTS], results.raw[TARGET_CLIENTS])
    if ratio != ratio:  # NaN: no valid pair
        return f"**NOT MEASURED** — {target}: no run had both windows valid"
    word = "PASS" if ratio >= TARGET_RATIO else "MISS"
    return f"**{word}** — {target}: jobwire / raw = {ratio:.3f} (median of per-run ratios)"


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    started = time.monotonic()
    wait_for_db()  # other sessions on this machine restart MariaDB now and then
    machine = describe_machine()
    results = Results()
    with tempfile.TemporaryDirectory(prefix="jwbench-submit-") as tmp:
        workdir = Path(tempfile.mkdtemp(prefix="jwbench-submit-logs-")) if args.keep else Path(tmp)
        measure(args, results, workdir)
    print(report(args, results, machine, time.monotonic() - started))


if __name__ == "__main__":
    main()
