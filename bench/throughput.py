"""jobwire throughput against its baselines, measured in one run on this machine.

The machine is shared and noisy, so every figure jobwire is judged by is measured in the
same run, interleaved with jobwire's own (run 1: raw, jobwire, echo at each client count,
then the peers; run 2: the same; ...), and the table shows medians of --runs runs with
the ratio jobwire/raw paired run by run:

  (a) raw PyMySQL job lifecycle (bench/baseline_raw.py), the floor;
  (b) jobwire end to end over gRPC against `python -m jobwire serve` on a fresh MariaDB
      database (bench/e2e.py): Submit, Claim (batch, long poll), 3 ReportStage, Complete;
  (c) grpcio unary echo (bench/echo.py), the RPC ceiling (--skip-echo to leave out);
  (d) unless --skip-peers: --peer-jobs no-op jobs through jobwire (a plain gRPC worker
      and the SDK worker over a Session and over unary calls, bench/noop.py) and through
      RQ SimpleWorker and Celery solo on Redis (bench/peers.py; pip install -r
      bench/requirements.txt), timed the same way; the SDK worker / Celery solo ratio is
      paired run by run (issue 25's target: at least 1.0 over the Session).

Usage: python bench/throughput.py [--clients 1,8,32] [--runs 3] [--seconds 5] [--jobs N]
Everything is on loopback; every loop is bounded by --seconds and --jobs; it stops itself.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import secrets
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import baseline_raw
import e2e
import echo
import grpc
import noop
import peers
import pymysql
import sqlcount
from measure import DbCounters, connect, describe_machine, median, pct, wait_for_db

ROOT = Path(__file__).resolve().parent.parent
# Reference figures measured before jobwire (docs/performance.md), for the eye: this run's
# own baselines are what the ratios use.
REFERENCE = {
    "raw": {1: 361, 8: 936, 32: 693},
    "echo": {1: 1619, 8: 4121, 32: 3823},
    "RQ SimpleWorker": 304,
    "Celery solo": 688,
}
RPCS_PER_JOB = 6  # Submit, Claim (one lease), 3 ReportStage, Complete


@dataclass
class Results:
    raw: dict[int, list[baseline_raw.RawResult]] = field(default_factory=dict)
    jobwire: dict[int, list[e2e.E2eResult]] = field(default_factory=dict)
    echo: dict[int, list[echo.EchoResult]] = field(default_factory=dict)
    peers: dict[str, list[peers.PeerResult]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="jobwire throughput vs raw PyMySQL, gRPC echo, RQ and Celery")
    p.add_argument("--jobs", type=int, default=100_000, help="stop a window early after this many jobs")
    p.add_argument("--clients", default="1,8,32", help="comma-separated client counts (default 1,8,32)")
    p.add_argument("--runs", type=int, default=3, help="runs to take medians over (default 3)")
    p.add_argument("--seconds", type=float, default=5.0, help="counted seconds per window (default 5)")
    p.add_argument("--warmup", type=float, default=0.5, help="uncounted seconds before each window")
    p.add_argument("--batch", type=int, default=4, help="jobwire worker slots per Claim loop, = max_jobs")
    p.add_argument("--claim-wait", type=float, default=1.0, help="Claim long-poll wait, seconds")
    p.add_argument("--skip-peers", action="store_true", help="leave out RQ and Celery")
    p.add_argument("--peer-jobs", type=int, default=2000, help="no-op jobs per peer run (default 2000)")
    p.add_argument("--skip-echo", action="store_true", help="leave out the gRPC echo ceiling")
    p.add_argument("--echo-seconds", type=float, default=2.0, help="counted seconds per echo window")
    p.add_argument("--json", type=Path, help="also write every run's figures here")
    p.add_argument(
        "--server-preload",
        type=Path,
        help="a Python file run inside the jobwire server before it serves (what-if experiments)",
    )
    p.add_argument(
        "--server-env", action="append", default=[], metavar="NAME=VALUE", help="extra environment for the server"
    )
    p.add_argument(
        "--processes", type=int, help="jobwire serving processes (JOBWIRE_PROCESSES; default: the server's, the cores)"
    )
    p.add_argument("--keep", action="store_true", help="keep the databases and server logs")
    args = p.parse_args(argv)
    args.client_counts = [int(c) for c in args.clients.split(",") if c.strip()]
    if not args.client_counts or min(args.client_counts) < 1 or args.runs < 1 or args.seconds <= 0:
        p.error("--clients needs positive counts; --runs and --seconds must be positive")
    if any("=" not in kv for kv in args.server_env):
        p.error("--server-env takes NAME=VALUE")
    return args


def measure(args: argparse.Namespace, results: Results, workdir: Path) -> None:
    tag = secrets.token_hex(3)
    raw_db, jw_db = f"jwbench_raw_{tag}", f"jwbench_jw_{tag}"
    counter_file = workdir / "bench.sqlcount"
    sqlcount.install(counter_file)
    counters = DbCounters()
    baseline_raw.create_database(raw_db)
    log(f"starting the jobwire server on database {jw_db}")
    env = dict(kv.split("=", 1) for kv in args.server_env)
    if args.processes:
        env["JOBWIRE_PROCESSES"] = str(args.processes)
    if args.server_preload:
        env["JWBENCH_PRELOAD"] = str(args.server_preload.resolve())
    try:
        server = e2e.Server(jw_db, workdir / "server.log", env)
    except (RuntimeError, pymysql.err.OperationalError):
        wait_for_db()  # MariaDB restarted under the migration: once more
        server = e2e.Server(jw_db, workdir / "server.log", env)
    peer_skip = None if args.skip_peers else peers.available()
    if peer_skip:
        results.notes.append(f"peers skipped: {peer_skip}")
    try:
        for run in range(1, args.runs + 1):
            for clients in args.client_counts:

                def raw_once(clients: int = clients) -> baseline_raw.RawResult:
                    truncate(raw_db)
                    return baseline_raw.run_lifecycle(
                        raw_db, clients, args.seconds, args.warmup, args.jobs, counters,
                        lambda: sqlcount.read(counter_file),
                    )  # fmt: skip

                def jobwire_once(clients: int = clients) -> e2e.E2eResult:
                    return e2e.run_e2e(
                        server, clients, args.seconds, args.warmup, args.jobs, counters, args.batch, args.claim_wait
                    )

                r = steady(f"raw, {clients} clients", raw_once, results)
                results.raw.setdefault(clients, []).append(r)
                j = steady(f"jobwire, {clients} clients", jobwire_once, results)
                results.jobwire.setdefault(clients, []).append(j)
                line = f"run {run} · {clients:>2} clients: raw {r.jobs_per_s:6.0f}/s  jobwire {j.jobs_per_s:6.1f}/s"
                if not args.skip_echo:
                    ech = echo.run_echo(clients, args.echo_seconds, min(args.warmup, 0.3))
                    results.echo.setdefault(clients, []).append(ech)
                    line += f"  echo {ech.calls_per_s:6.0f}/s"
                log(line + (f"  errors {r.errors[:1]} {j.errors}" if r.errors or j.errors else ""))
            runners: list[Callable[[], peers.PeerResult]] = []
            if not args.skip_peers:
                transports = noop.TRANSPORTS if run % 2 else noop.TRANSPORTS[::-1]
                runners += [lambda: noop.run_raw(server.port, jw_db, args.peer_jobs)]
                runners += [
                    functools.partial(noop.run_jobwire, server.port, jw_db, args.peer_jobs, workdir, t)
                    for t in transports
                ]
            if not args.skip_peers and not peer_skip:
                runners += [
                    lambda: peers.run_rq(args.peer_jobs, workdir / "peers.log"),
                    lambda: peers.run_celery(args.peer_jobs, workdir / "peers.log"),
                ]
            for runner in runners:
                p = runner()
                results.peers.setdefault(p.name, []).append(p)
                log(f"run {run} · {p.name}: {p.jobs_per_s:6.0f} jobs/s")
    finally:
        server.stop(drop=not args.keep)
        counters.close()
        if not args.keep:
            baseline_raw.drop_database(raw_db)


T = TypeVar("T", baseline_raw.RawResult, e2e.E2eResult)
ATTEMPTS = 3
SETTLE_S = 2.0  # after a restart: let MariaDB warm up and the server's pool reconnect


def steady(label: str, once: Callable[[], T], results: Results) -> T:
    """Run a measurement again when MariaDB restarted under it (other sessions restart it).

    A window is void when the server's Uptime went back or a client lost its connection;
    after ATTEMPTS the last result stands, with its errors in the report.
    """
    for attempt in range(1, ATTEMPTS + 1):
        try:
            result = once()
        except (pymysql.err.OperationalError, grpc.aio.AioRpcError) as exc:
            if attempt == ATTEMPTS:
                raise
            code = exc.code().name if isinstance(exc, grpc.aio.AioRpcError) else exc.args[0]
            why = f"{type(exc).__name__} {code}"
        else:
            if not void(result) or attempt == ATTEMPTS:
                return result
            why = "MariaDB restarted in the window" if result.window.db_restarted else "database connection lost"
        results.notes.append(f"{label}: measured again ({why})")
        log(f"{label}: measuring again: {why}")
        wait_for_db()
        time.sleep(SETTLE_S)
    raise AssertionError("unreachable")


def void(result: baseline_raw.RawResult | e2e.E2eResult) -> bool:
    """MariaDB restarted in the window, or a client lost its connection: the figures mean nothing."""
    lost = any("2013" in e or "2003" in e or "UNAVAILABLE" in e for e in result.errors)
    return result.window.db_restarted or lost


def truncate(database: str) -> None:
    conn = connect(database)
    with conn.cursor() as cur:
        cur.execute("TRUNCATE TABLE job")
        cur.execute("TRUNCATE TABLE artifact")
    conn.close()


# -- the report ------------------------------------------------------------------------


def fmt(value: float, digits: int = 0) -> str:
    if value != value:  # NaN
        return "–"
    return f"{value:,.{digits}f}"


def spread(values: Sequence[float], digits: int = 0) -> str:
    if len(values) < 2:
        return fmt(median(values), digits)
    return f"{fmt(median(values), digits)} ({fmt(min(values), digits)}–{fmt(max(values), digits)})"


def row(label: str, counts: Sequence[int], cell: Callable[[int], str]) -> str:
    return "| " + label + " | " + " | ".join(cell(c) for c in counts) + " |"


def med(items: Sequence[Any], get: Callable[[Any], float]) -> float:
    return median(get(x) for x in items if x is not None)


def ok(items: Sequence[T | None]) -> list[T]:
    return [x for x in items if x is not None]


def report(args: argparse.Namespace, results: Results, machine: list[str], elapsed: float) -> str:
    counts = args.client_counts
    # Windows still void after ATTEMPTS stay out of the medians (None keeps runs paired).
    raw = {c: [None if void(r) else r for r in rs] for c, rs in results.raw.items()}
    jw = {c: [None if void(j) else j for j in js] for c, js in results.jobwire.items()}
    ech = results.echo
    left_out = sum(x is None for xs in (*raw.values(), *jw.values()) for x in xs)
    if left_out:
        results.notes.append(f"{left_out} window(s) still void after {ATTEMPTS} attempts: left out of the medians")
    lines = [
        f"## jobwire throughput — medians of {args.runs} run(s), {fmt(args.seconds, 1)} s windows",
        "",
        *[f"- {m}" for m in machine],
        f"- command: `{' '.join([Path(sys.executable).name, *sys.argv])}` ({fmt(elapsed)} s)",
        f"- jobwire server: `python -m jobwire serve`, {args.processes or os.cpu_count()} serving process(es)",
        f"- jobwire clients: N submitters + N job slots in Claim loops of {args.batch} slots (max_jobs = free"
        f" slots, long poll {fmt(args.claim_wait, 1)} s); raw clients: N threads, one lifecycle after another",
        "",
        "| what | " + " | ".join(f"{c} client{'s' if c > 1 else ''}" for c in counts) + " |",
        "|---|" + "---|" * len(counts),
        row(
            "raw PyMySQL lifecycle, jobs/s (reference)",
            counts,
            lambda c: f"{spread([r.jobs_per_s for r in ok(raw[c])])} ({REFERENCE['raw'].get(c, '–')})",
        ),
        row("**jobwire end to end, jobs/s**", counts, lambda c: f"**{spread([j.jobs_per_s for j in ok(jw[c])], 1)}**"),
        row("**ratio jobwire / raw** (paired per run)", counts, lambda c: f"**{fmt(paired_ratio(jw[c], raw[c]), 3)}**"),
        row(
            "raw claim p50 / p99, ms",
            counts,
            lambda c: p50_p99(raw[c], "claim_ms", 2),
        ),
        row("jobwire Submit p50 / p99, ms", counts, lambda c: p50_p99(jw[c], "submit_ms")),
        row("jobwire Claim p50 / p99, ms (incl. long-poll waits)", counts, lambda c: p50_p99(jw[c], "claim_ms")),
        row("jobwire ReportStage p50 / p99, ms", counts, lambda c: p50_p99(jw[c], "report_ms")),
        row("jobwire Complete p50 / p99, ms", counts, lambda c: p50_p99(jw[c], "complete_ms")),
        row(
            "jobwire empty claims, share · leases per claim",
            counts,
            lambda c: (
                f"{fmt(100 * med(jw[c], lambda j: j.empty_claim_share), 1)} % · "
                f"{fmt(med(jw[c], lambda j: j.leases_per_claim), 2)}"
            ),
        ),
        row(
            "**jobwire server process CPU, ms/job**",
            counts,
            lambda c: f"**{fmt(med(jw[c], lambda j: j.cpu_ms_per_job('server')), 2)}**",
        ),
        row(
            "jobwire server process busy, % of one core",
            counts,
            lambda c: fmt(med(jw[c], lambda j: 100 * j.window.cpu.get("server", float("nan")) / j.window.seconds)),
        ),
        row(
            "mysqld CPU, ms/job: raw / jobwire",
            counts,
            lambda c: (
                f"{fmt(med(raw[c], lambda r: r.cpu_ms_per_job('mysqld')), 2)} / "
                f"{fmt(med(jw[c], lambda j: j.cpu_ms_per_job('mysqld')), 2)}"
            ),
        ),
        row(
            "bench (client) CPU, ms/job: raw / jobwire",
            counts,
            lambda c: (
                f"{fmt(med(raw[c], lambda r: r.cpu_ms_per_job('bench')), 2)} / "
                f"{fmt(med(jw[c], lambda j: j.cpu_ms_per_job('bench')), 2)}"
            ),
        ),
        row(
            "**DB statements/job, exact (driver count): raw / jobwire**",
            counts,
            lambda c: (
                f"**{fmt(med(raw[c], lambda r: r.sql_per_job()), 1)} / "
                f"{fmt(med(jw[c], lambda j: j.sql_per_job()), 1)}**"
            ),
        ),
        row(
            "jobwire per job: COMMIT · ROLLBACK · COM_PING",
            counts,
            lambda c: " · ".join(
                fmt(med(jw[c], lambda j, k=k: j.sql_per_job(k)), 1) for k in ("commit", "rollback", "ping")
            ),
        ),
        row(
            "MariaDB Questions/job, global delta (other tenants included): raw / jobwire",
            counts,
            lambda c: (
                f"{fmt(med(raw[c], lambda r: r.per_job('Questions')), 1)} / "
                f"{fmt(med(jw[c], lambda j: j.per_job('Questions')), 1)}"
            ),
        ),
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
    if ech:
        lines += [
            row(
                "gRPC unary echo, calls/s (reference)",
                counts,
                lambda c: f"{spread([e.calls_per_s for e in ech[c]])} ({REFERENCE['echo'].get(c, '–')})",
            ),
            row(
                f"jobwire RPCs/s ({RPCS_PER_JOB}/job) / echo calls/s",
                counts,
                lambda c: fmt(
                    med(jw[c], lambda j: j.jobs_per_s) * RPCS_PER_JOB / med(ech[c], lambda e: e.calls_per_s), 3
                ),
            ),
            row(
                "echo server CPU, ms/call",
                counts,
                lambda c: fmt(med(ech[c], lambda e: e.server_cpu_ms_per_call), 3),
            ),
        ]
    if results.peers:
        best = max(counts, key=lambda c: med(jw[c], lambda j: j.jobs_per_s))
        best_jw = med(jw[best], lambda j: j.jobs_per_s)
        lines += [
            "",
            f"| peer ({args.peer_jobs} no-op jobs, worker already running) | jobs/s | reference "
            f"| enqueue/s | worker CPU ms/job | jobwire SDK no-op, session · unary / this"
            f" | jobwire lifecycle ({best} clients) / this |",
            "|---|---|---|---|---|---|---|",
        ]
        sdks = [results.peers.get(noop.sdk_name(t), []) for t in noop.TRANSPORTS]
        for name, items in results.peers.items():
            rate = med(items, lambda p: p.jobs_per_s)
            lines.append(
                f"| {name} | {spread([p.jobs_per_s for p in items])} | {REFERENCE.get(name, '–')} "
                f"| {fmt(med(items, lambda p: p.enqueue_per_s))} "
                f"| {fmt(med(items, lambda p: p.worker_cpu_ms_per_job), 2)} "
                f"| {' · '.join(fmt(med(sdk, lambda p: p.jobs_per_s) / rate, 3) if sdk else '–' for sdk in sdks)} "
                f"| {fmt(best_jw / rate, 3)} |"
            )
        celery = results.peers.get("Celery solo")
        if celery:
            paired = [
                f"{t} {fmt(median(s.jobs_per_s / c.jobs_per_s for s, c in zip(sdk, celery, strict=False)), 3)}"
                for t, sdk in zip(noop.TRANSPORTS, sdks, strict=True)
                if sdk
            ]
            target = "no-op jobs, paired per run (target ≥ 1.0)"
            lines += ["", f"**SDK worker / Celery solo**, {target}: {', '.join(paired)}"]
    notes = [f"{n} (×{k})" if k > 1 else n for n, k in Counter(results.notes).items()]
    problems = problems_seen(results)
    lines += ["", *[f"- {n}" for n in notes + problems]] if notes or problems else []
    return "\n".join(lines)


def paired_ratio(jw: Sequence[e2e.E2eResult | None], raw: Sequence[baseline_raw.RawResult | None]) -> float:
    return median(j.jobs_per_s / r.jobs_per_s for j, r in zip(jw, raw, strict=False) if j and r and r.jobs_per_s)


def p50_p99(items: Sequence[Any], attr: str, digits: int = 1) -> str:
    p50 = med(items, lambda j: pct(getattr(j, attr), 50))
    p99 = med(items, lambda j: pct(getattr(j, attr), 99))
    return f"{fmt(p50, digits)} / {fmt(p99, digits)}"


def problems_seen(results: Results) -> list[str]:
    out = []
    for clients, items in results.jobwire.items():
        errors: dict[str, int] = {}
        retries: dict[str, int] = {}
        for j in items:
            for k, v in j.errors.items():
                errors[k] = errors.get(k, 0) + v
            for k, v in j.retries.items():
                retries[k] = retries.get(k, 0) + v
        if errors:
            out.append(f"jobwire {clients} clients: RPC errors {errors}")
        if retries:
            out.append(f"jobwire {clients} clients: server retried transactions {retries}")
    for clients, raws in results.raw.items():
        errs = [e for r in raws for e in r.errors]
        if errs:
            out.append(f"raw {clients} clients: errors {errs[:3]}")
    return out


def dump_json(path: Path, results: Results) -> None:
    def plain(obj: Any) -> Any:
        if hasattr(obj, "__dataclass_fields__"):
            return {k: plain(v) for k, v in vars(obj).items() if k not in ("calls",)}
        if isinstance(obj, dict):
            return {str(k): plain(v) for k, v in obj.items()}
        if isinstance(obj, list | tuple):
            return [plain(v) for v in obj]
        return obj

    summary = plain(results)
    for kind in ("raw", "jobwire"):  # latency lists become percentiles: the file stays small
        for items in summary[kind].values():
            for item in items:
                for key in [k for k in item if k.endswith("_ms")]:
                    values = item.pop(key)
                    item[key.removesuffix("_ms") + "_p50_p99_ms"] = [pct(values, 50), pct(values, 99)]
    path.write_text(json.dumps(summary, indent=1, default=str))


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    started = time.monotonic()
    wait_for_db()  # other sessions on this machine restart MariaDB now and then
    machine = describe_machine()
    results = Results()
    with tempfile.TemporaryDirectory(prefix="jwbench-") as tmp:
        workdir = Path(tempfile.mkdtemp(prefix="jwbench-logs-")) if args.keep else Path(tmp)
        measure(args, results, workdir)
        if args.keep:
            results.notes.append(f"server and peer logs kept in {workdir}")
    text = report(args, results, machine, time.monotonic() - started)
    print(text)
    if args.json:
        dump_json(args.json, results)


if __name__ == "__main__":
    main()
