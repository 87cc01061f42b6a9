"""Claim latency against the size of `job`: a few thousand queued jobs among 10,000 or 1,000,000 rows.

    .venv/bin/python bench/claims.py                          # 10k and 1M rows, 3 runs of 10 s each
    .venv/bin/python bench/claims.py --runs 1 --seconds 5     # a quick look (~2 min: the 1M fill takes ~1)
    .venv/bin/python bench/claims.py --sizes 10000,200000 --claimers 16 --keep

The target (performance issue): Claim p99 with 1,000,000 rows in `job` (mostly finished, a
few thousand queued) at most 1.5x the p99 with 10,000 rows.

How it measures:

1. Per size in --sizes: a fresh MariaDB database with `python -m jobwire serve` on it
   (bench/e2e.py's Server: migrated at start, every statement the server sends counted).
2. Templates: through gRPC the server itself makes one job of each shape the fill copies
   (READY with its artifact, FAILED, CANCELLED while queued, QUEUED), so every column of a
   copied row holds what the server writes, not a guess of it.
3. Fill, in SQL: INSERT ... SELECT from MariaDB's sequence engine (`seq_1_to_N`), 50,000
   rows a statement, until `job` holds exactly the size: finished jobs (96 % READY, 2 %
   FAILED, 2 % CANCELLED) spread over the past 14 days (inside the 30-day retention, so the
   server's retention leaves them alone) with those days' job numbers and `job_day_counter`
   rows, so new submits cannot collide; then --queued QUEUED jobs of the claimers' type
   submitted over the last hour (today's numbers after what the server has reserved), and an
   artifact row per READY job. No job_event rows: a claim never reads them (the event tail
   reads only new ones), and 6+ events a job would make the fill take far longer.
   ANALYZE TABLE at the end. Each fill is timed and logged (1,000,000 rows: about a minute
   here). Then a bounded wait while InnoDB writes out the fill's dirty pages: their flushing
   would otherwise slow the first windows' commits and be counted against the table.
4. Rounds (--runs), each measuring every size on its already-filled database, the order
   alternating per round: the queue is topped up to --queued over gRPC, then --claimers
   claimers (a connection each, as separate workers) loop Claim(max_jobs=1, wait=--claim-wait)
   then Complete with a valid artifact, while --submitters replace every claimed job with a
   Submit so the queue keeps its shape. After --warmup seconds, every Claim started in the
   next --seconds counts (only claims: completes and submits are not in the figures).
   A window in which MariaDB restarted (other sessions do that) is measured again.
5. Report: medians over the runs of p50, p99, claims/s, the server's statements per claimed
   job (sqlcount deltas: its Claim, its Complete and the Submit that replaced it, since the
   server commits concurrent calls together), CPU; the ratio p99(size)/p99(smallest) paired
   run by run with PASS/MISS against 1.5x; and EXPLAIN (before) and ANALYZE (after) of the
   claim's candidate SELECT, the exact text jobwire.db.sql renders, at each size.

Markdown report to stdout, progress to stderr. Every loop is bounded by --seconds or by a
count; the run stops by itself and drops its databases unless --keep. Needs MariaDB at
127.0.0.1:3306 (root, no password) with the SEQUENCE engine (MariaDB's default).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import secrets
import shlex
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))

import e2e  # noqa: E402
import grpc  # noqa: E402
import pymysql  # noqa: E402
from google.protobuf.duration_pb2 import Duration  # noqa: E402
from measure import CpuMeter, connect, describe_machine, find_pid, median, pct, wait_for_db  # noqa: E402
from sqlalchemy import DateTime  # noqa: E402

from jobwire.db.sql import statements_for  # noqa: E402
from jobwire.db.tables import job as job_table  # noqa: E402
from jobwire.v1 import job_pb2, job_pb2_grpc, worker_pb2, worker_pb2_grpc  # noqa: E402

TARGET_RATIO = 1.5
JOB_TYPE = "bench.claims"
TENANT = QUEUE = "default"  # what a caller without auth gets, and the claim's default queue
PAYLOAD = json.dumps({"input": "s3://bench-in/2026/11/29/scan-000123.pdf", "dpi": 300, "pages": [1, 12]}).encode()
LABELS = {"source": "bench", "team": "ingest"}
SHA_HEX = "5f" * 32  # any 64 lowercase hex digits pass Complete's check
OWN_CONNECTION = [("grpc.use_local_subchannel_pool", 1)]  # one connection per channel, as separate workers
RPC_TIMEOUT_S = 30.0
EMPTY_PAUSE_S = 0.05  # after an empty claim (queue drained), so an empty queue does not turn into a spin
MAX_CYCLES = 1_000_000  # per claimer and window: a bound, never reached in --seconds
TOP_UP_CONCURRENCY = 16
WINDOW_TRIES = 3
SETTLE_MAX_S = 90.0  # wait at most this long after the fills for InnoDB to write their dirty pages

FILL_DAYS = 14  # finished jobs spread over this many past days: inside the 30-day retention
FILL_CHUNK = 50_000  # rows per INSERT ... SELECT: bounded transactions, progress in the log
FILL_STATEMENT_TIMEOUT_S = 600  # max_statement_time: one chunk that takes this long is a failure
KINDS = {"READY": 0, "FAILED": 1, "CANCELLED": 2, "QUEUED": 3}  # template kinds (jwbench_tpl.k)
FAILED_EVERY, CANCELLED_AT = 50, 25  # seq % 50 == 0: FAILED, == 25: CANCELLED, else READY (96/2/2 %)
TEMPLATE_FINISHED = 3  # READY, FAILED and CANCELLED template jobs, left in the table as rows of their own

# Global MariaDB counters around each window: Uptime to see a restart, the rest as evidence of
# how much the claims read (global: other tenants of the server land in them too).
STATUS = (
    "Uptime",
    "Handler_read_key",
    "Handler_read_next",
    "Innodb_buffer_pool_read_requests",
    "Innodb_buffer_pool_reads",
    "Innodb_row_lock_waits",
    "Innodb_data_fsyncs",
)
TIME_COLUMNS = [c.name for c in job_table.c if isinstance(c.type, DateTime)]
JOB_COLUMNS = [c.name for c in job_table.c if c.name != "id"]


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    p.add_argument("--sizes", default="10000,1000000", help="rows in `job` per database, comma-separated")
    p.add_argument("--queued", type=int, default=2000, help="QUEUED jobs in each database, kept there while measuring")
    p.add_argument("--claimers", type=int, default=8, help="concurrent Claim loops, a connection each")
    p.add_argument("--submitters", type=int, default=4, help="Submit loops replacing claimed jobs")
    p.add_argument("--claim-wait", type=float, default=0.0, help="Claim long-poll wait, seconds (0: answer at once)")
    p.add_argument("--seconds", type=float, default=10.0, help="counted seconds per window")
    p.add_argument("--warmup", type=float, default=2.0, help="uncounted seconds before each window")
    p.add_argument("--runs", type=int, default=3, help="rounds; each measures every size once")
    p.add_argument(
        "--server-env", action="append", default=[], metavar="NAME=VALUE", help="extra environment for the servers"
    )
    p.add_argument("--keep", action="store_true", help="keep the databases and server logs")
    args = p.parse_args(argv)
    args.size_list = sorted({int(s) for s in args.sizes.split(",") if s.strip()})
    if not args.size_list or args.runs < 1 or args.seconds <= 0 or args.claimers < 1 or args.queued < 1:
        p.error("--sizes, --runs, --seconds, --claimers and --queued must be positive")
    if min(args.size_list) <= args.queued + TEMPLATE_FINISHED:
        p.error("every size must be larger than --queued + 3 (the finished templates)")
    if any("=" not in kv for kv in args.server_env):
        p.error("--server-env takes NAME=VALUE")
    return args


# -- the fill ------------------------------------------------------------------------------


@dataclass
class Fill:
    size: int
    database: str
    seconds: float = 0.0
    parts: dict[str, float] = field(default_factory=dict)  # job, artifact, analyze: seconds each
    statuses: dict[str, int] = field(default_factory=dict)
    mib: dict[str, float] = field(default_factory=dict)  # data and index sizes of `job`
    explain_head: list[str] = field(default_factory=list)
    explain: list[tuple[Any, ...]] = field(default_factory=list)
    analyze: dict[str, Any] = field(default_factory=dict)


async def make_templates(port: int) -> list[str]:
    """One job of each shape the fill copies, made by the server: READY, FAILED, CANCELLED, QUEUED."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        jobs, workers = job_pb2_grpc.JobServiceStub(channel), worker_pb2_grpc.WorkerServiceStub(channel)
        request = job_pb2.SubmitRequest(job_type=JOB_TYPE, payload=PAYLOAD, owner="bench", labels=LABELS)
        nos = [(await jobs.Submit(request, timeout=RPC_TIMEOUT_S)).job.job_no for _ in range(4)]
        await jobs.Cancel(job_pb2.CancelRequest(job_no=nos[2]), timeout=RPC_TIMEOUT_S)  # QUEUED -> CANCELLED
        claim = worker_pb2.ClaimRequest(
            worker_id="bench-template", job_types=[worker_pb2.JobTypeSpec(name=JOB_TYPE)], max_jobs=2
        )
        leases = list((await workers.Claim(claim, timeout=RPC_TIMEOUT_S)).leases)  # the two oldest: nos[0], nos[1]
        if sorted(lease.job_no for lease in leases) != sorted(nos[:2]):
            raise RuntimeError(f"template claim got {[lease.job_no for lease in leases]}, expected {nos[:2]}")
        done, failed = leases
        for stage, units in (("PREPARING", 1), ("PROCESSING", 40), ("VERIFYING", 1), ("DELIVERING", 1)):
            report = worker_pb2.ReportStageRequest(
                job_no=done.job_no,
                worker_token=done.worker_token,
                stage=stage,
                processed_units=units,
                total_units=units,
            )
            await workers.ReportStage(report, timeout=RPC_TIMEOUT_S)
        artifact = job_pb2.Artifact(
            uri=f"file:///bench/{done.job_no}", size_bytes=48_213, sha256=SHA_HEX, content_type="application/pdf",
            summary="12 pages",
        )  # fmt: skip
        await workers.Complete(
            worker_pb2.CompleteRequest(job_no=done.job_no, worker_token=done.worker_token, result=artifact),
            timeout=RPC_TIMEOUT_S,
        )
        await workers.ReportStage(
            worker_pb2.ReportStageRequest(job_no=failed.job_no, worker_token=failed.worker_token, stage="PREPARING",
                                          processed_units=1, total_units=1),
            timeout=RPC_TIMEOUT_S,
        )  # fmt: skip
        await workers.Fail(
            worker_pb2.FailRequest(
                job_no=failed.job_no, worker_token=failed.worker_token,
                category=job_pb2.JobError.Category.INPUT_INVALID, message="page 7 cannot be read", retryable=False,
                detail="bench template: a permanent failure",
            ),
            timeout=RPC_TIMEOUT_S,
        )  # fmt: skip
        return nos


def _column_exprs(created: str, number: str) -> str:
    """The SELECT list copying template `t` (row of jwbench_tpl) into a new job of sequence row `s`.

    `created` is the new row's created_at (SQL); `number` its job number (SQL). Every other
    time moves with created_at by the template's own offset (so started, finished, heartbeat
    and run_after keep the server's order); tokens get a fresh secret; the rest is the
    template's, byte for byte.
    """
    exprs = []
    for name in JOB_COLUMNS:
        if name == "job_no":
            exprs.append(number)
        elif name == "created_at":
            exprs.append(created)
        elif name in TIME_COLUMNS:
            exprs.append(
                f"IF(t.{name} IS NULL, NULL,"
                f" DATE_ADD({created}, INTERVAL TIMESTAMPDIFF(MICROSECOND, t.created_at, t.{name}) MICROSECOND))"
            )
        elif name in ("worker_token", "ended_token"):
            exprs.append(
                f"IF(t.{name} IS NULL, NULL,"
                f" CONCAT(t.lease_epoch, '.', LEFT(SHA2(CONCAT('jwbench.{name}.', s.seq), 256), 24)))"
            )
        elif name == "idempotency_key":
            exprs.append("NULL")  # UNIQUE(tenant, key): copies cannot share one
        else:
            exprs.append(f"t.{name}")
    return ", ".join(exprs)


def _job_number(prefix: str, day: str, seq: str) -> str:
    """The server's format, f"{prefix}-{day}-{n:03d}": at least three digits, more when needed."""
    return f"CONCAT('{prefix}-', {day}, '-', LPAD({seq}, GREATEST(3, CHAR_LENGTH({seq})), '0'))"


def _chunks(total: int) -> Iterator[tuple[int, int]]:
    for first in range(1, total + 1, FILL_CHUNK):
        yield first, min(total, first + FILL_CHUNK - 1)


def fill(database: str, size: int, queued: int, template_nos: list[str]) -> Fill:
    """Fill `job` in SQL to exactly `size` rows, `queued` of them QUEUED; ANALYZE; EXPLAIN the claim."""
    out = Fill(size=size, database=database)
    started = time.monotonic()
    conn = connect(database)
    try:
        with conn.cursor() as cur:
            cur.execute(f"SET SESSION max_statement_time = {FILL_STATEMENT_TIMEOUT_S}")
            names = ", ".join(f"'{no}'" for no in template_nos)
            cur.execute(
                "CREATE TEMPORARY TABLE jwbench_tpl (PRIMARY KEY (k)) SELECT job.*,"
                " CASE status " + " ".join(f"WHEN '{s}' THEN {k}" for s, k in KINDS.items()) + " END AS k"
                f" FROM job WHERE job_no IN ({names})"
            )
            cur.execute("SELECT status FROM jwbench_tpl ORDER BY k")
            got = [row[0] for row in cur.fetchall()]
            if got != list(KINDS):
                raise RuntimeError(f"templates came out {got}, expected {list(KINDS)}")
            cur.execute(
                "CREATE TEMPORARY TABLE jwbench_tpl_artifact SELECT artifact.* FROM artifact"
                " JOIN job ON job.id = artifact.job_id WHERE job.job_no IN (" + names + ") AND job.status = 'READY'"
            )
            cur.execute("SELECT UTC_TIMESTAMP(6), UTC_DATE()")
            now, today = cur.fetchone()
            prefix = template_nos[0].split("-", 1)[0]
            finished = size - queued - TEMPLATE_FINISHED
            to_queue = queued - 1  # the QUEUED template is one of them
            per_day = math.ceil(finished / FILL_DAYS)
            step_us = 86_400_000_000 // per_day
            day0 = f"TIMESTAMP'{today.isoformat()} 00:00:00' - INTERVAL {FILL_DAYS} DAY"
            created = f"({day0} + INTERVAL ((s.seq - 1) DIV {per_day}) * 86400000000 + ((s.seq - 1) MOD {per_day}) * {step_us} MICROSECOND)"  # noqa: E501
            number = _job_number(prefix, f"DATE_FORMAT({created}, '%Y%m%d')", f"((s.seq - 1) MOD {per_day} + 1)")
            kind = (
                f"CASE WHEN s.seq MOD {FAILED_EVERY} = 0 THEN {KINDS['FAILED']}"
                f" WHEN s.seq MOD {FAILED_EVERY} = {CANCELLED_AT} THEN {KINDS['CANCELLED']} ELSE {KINDS['READY']} END"
            )
            insert = f"INSERT INTO job ({', '.join(JOB_COLUMNS)}) SELECT {_column_exprs(created, number)}"
            # ids follow creation: jwbench_tpl is an eq_ref lookup per sequence row, read in order.
            t_job = time.monotonic()
            t_artifact = 0.0
            for first, last in _chunks(finished):
                cur.execute("SELECT COALESCE(MAX(id), 0) FROM job")
                (before,) = cur.fetchone()
                cur.execute(f"{insert} FROM seq_{first}_to_{last} s JOIN jwbench_tpl t ON t.k = {kind}")
                t = time.monotonic()
                cur.execute(
                    "INSERT INTO artifact (job_id, uri, size_bytes, sha256, content_type, summary, created_at)"
                    " SELECT j.id, CONCAT('file:///bench/', j.job_no), a.size_bytes, SHA2(j.job_no, 256),"
                    f" a.content_type, a.summary, j.finished_at FROM job j JOIN jwbench_tpl_artifact a"
                    f" WHERE j.id > {before} AND j.status = 'READY'"
                )
                t_artifact += time.monotonic() - t
                if last == finished or last % 200_000 < FILL_CHUNK:
                    log(f"  {database}: {last:,} of {finished:,} finished jobs ({time.monotonic() - t_job:.0f} s)")
            # Past days' counters say which numbers are taken, as the server would have left them.
            days = [(d, min(per_day, finished - d * per_day)) for d in range(FILL_DAYS) if d * per_day < finished]
            counted = "ON DUPLICATE KEY UPDATE last_seq = GREATEST(last_seq, VALUES(last_seq))"
            cur.executemany(
                "INSERT INTO job_day_counter (tenant, day, last_seq)"
                f" VALUES (%s, DATE_FORMAT({day0} + INTERVAL %s DAY, '%%Y%%m%%d'), %s) {counted}",
                [(TENANT, d, last) for d, last in days],
            )
            # Queued jobs: submitted over the last hour of today, numbered after what the server reserved.
            day = today.strftime("%Y%m%d")
            cur.execute(
                "SELECT COALESCE(MAX(last_seq), 0) FROM job_day_counter WHERE tenant = %s AND day = %s", (TENANT, day)
            )
            (reserved,) = cur.fetchone()
            since = max(now.replace(hour=0, minute=0, second=0, microsecond=0), now - timedelta(hours=1))
            q_step = int((now - since).total_seconds() * 1e6) // max(1, to_queue)
            q_created = f"(TIMESTAMP'{since.isoformat(sep=' ')}' + INTERVAL (s.seq - 1) * {q_step} MICROSECOND)"
            q_number = _job_number(prefix, f"'{day}'", f"(s.seq + {reserved})")
            q_insert = f"INSERT INTO job ({', '.join(JOB_COLUMNS)}) SELECT {_column_exprs(q_created, q_number)}"
            for first, last in _chunks(to_queue):
                cur.execute(f"{q_insert} FROM seq_{first}_to_{last} s JOIN jwbench_tpl t ON t.k = {KINDS['QUEUED']}")
            cur.execute(
                f"INSERT INTO job_day_counter (tenant, day, last_seq) VALUES (%s, %s, %s) {counted}",
                (TENANT, day, reserved + to_queue),
            )
            out.parts["job"] = time.monotonic() - t_job - t_artifact
            out.parts["artifact"] = t_artifact
            t = time.monotonic()
            cur.execute("ANALYZE TABLE job, artifact")
            cur.fetchall()
            out.parts["analyze"] = time.monotonic() - t
            cur.execute("SELECT status, COUNT(*) FROM job GROUP BY status")
            out.statuses = {str(s): int(n) for s, n in cur.fetchall()}
            cur.execute(
                "SELECT data_length, index_length FROM information_schema.TABLES"
                " WHERE table_schema = %s AND table_name = 'job'",
                (database,),
            )
            data, index = cur.fetchone()
            out.mib = {"data": data / 2**20, "index": index / 2**20}
    finally:
        conn.close()
    out.seconds = time.monotonic() - started
    total = sum(out.statuses.values())
    if total != size or out.statuses.get("QUEUED") != queued:
        raise RuntimeError(f"{database}: filled {out.statuses}, expected {size} rows with {queued} QUEUED")
    out.explain_head, out.explain = explain_claim(database)
    return out


def settle() -> str:
    """Wait (bounded) until InnoDB has written out the fill's dirty pages; what happened, for the report.

    A fill of 1,000,000 rows leaves the buffer pool full of dirty pages; while the page
    cleaner writes them, every COMMIT's fsync waits behind that I/O, and the first windows
    would measure the fill rather than the table. Done when at most 5 % of the pool is
    dirty, or when the count stops falling for 3 s (other tenants keep some pages dirty).
    """
    names = "'Innodb_buffer_pool_pages_dirty', 'Innodb_buffer_pool_pages_total'"
    started, first, last, flat, total = time.monotonic(), -1, -1, 0, 0
    with connect() as conn, conn.cursor() as cur:
        while time.monotonic() - started < SETTLE_MAX_S:
            cur.execute(f"SHOW GLOBAL STATUS WHERE Variable_name IN ({names})")
            values = {str(k): int(v) for k, v in cur.fetchall()}
            dirty, total = values["Innodb_buffer_pool_pages_dirty"], values["Innodb_buffer_pool_pages_total"]
            first = dirty if first < 0 else first
            flat = flat + 1 if 0 <= last <= dirty else 0
            last = dirty
            if dirty <= total * 0.05 or flat >= 3:
                break
            time.sleep(1.0)
    return (
        f"waited {time.monotonic() - started:.0f} s after the fills for InnoDB to write their dirty pages"
        f" ({first:,} → {last:,} dirty of {total:,} pages)"
    )


# -- the claim's SELECT ---------------------------------------------------------------------

CLAIM_SQL: str = statements_for("mysql").claim(1)  # exactly what the server sends for one job type
CLAIM_PARAMS = {"tenant": TENANT, "queue": QUEUE, "t0": JOB_TYPE, "limit": 1}


def claim_sql_shown() -> str:
    """The claim SELECT with its long select list (the job's columns as one JSON object) cut short."""
    tail = CLAIM_SQL.split(" FROM job", 1)[1]
    return "SELECT JSON_OBJECT('id', job.id, ...), job.payload, job.checkpoint, UTC_TIMESTAMP(6) FROM job" + tail


def explain_claim(database: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    with connect(database) as conn, conn.cursor() as cur:
        cur.execute("EXPLAIN " + CLAIM_SQL, CLAIM_PARAMS)
        return [d[0] for d in cur.description], list(cur.fetchall())


def analyze_claim(database: str) -> dict[str, Any]:
    """ANALYZE runs the SELECT (autocommit: its row lock ends with it) and says what it read."""
    with connect(database) as conn, conn.cursor() as cur:
        cur.execute("ANALYZE FORMAT=JSON " + CLAIM_SQL, CLAIM_PARAMS)
        plan = json.loads(cur.fetchone()[0])
    table = _find_table(plan) or {}
    keep = ("access_type", "key", "used_key_parts", "rows", "r_rows", "r_filtered", "r_engine_stats",
            "r_table_time_ms")  # fmt: skip
    out = {k: table[k] for k in keep if k in table}
    out["r_total_time_ms"] = plan.get("query_block", {}).get("r_total_time_ms")
    return out


def _find_table(node: Any) -> dict[str, Any] | None:
    if isinstance(node, dict):
        if node.get("table_name") == "job":
            return node
        children: Any = node.values()
    elif isinstance(node, list):
        children = node
    else:
        return None
    for child in children:
        found = _find_table(child)
        if found is not None:
            return found
    return None


# -- measuring ----------------------------------------------------------------------------


@dataclass
class Measured:
    size: int
    run: int
    seconds: float = 0.0
    claim_ms: list[float] = field(default_factory=list)
    leases: int = 0  # jobs the counted claims got
    empty: int = 0  # counted claims that got none
    complete_ms: list[float] = field(default_factory=list)
    submits: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    sql: dict[str, int] = field(default_factory=dict)
    cpu: dict[str, float] = field(default_factory=dict)
    status: dict[str, int] = field(default_factory=dict)
    queued: tuple[int, int] = (0, 0)  # QUEUED jobs at the window's start and end
    tries: int = 1

    @property
    def claims_per_s(self) -> float:
        return len(self.claim_ms) / self.seconds if self.seconds else float("nan")

    def per_lease(self, value: float) -> float:
        return value / self.leases if self.leases else float("nan")


@dataclass
class Sample:
    sql: dict[str, int]
    cpu: dict[str, float]
    status: dict[str, int]
    queued: int


def count_queued(database: str) -> int:
    with connect(database) as conn, conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM job WHERE tenant = %s AND queue = %s AND status = 'QUEUED'", (TENANT, QUEUE))
        return int(cur.fetchone()[0])


def sample(server: e2e.Server, meter: CpuMeter, opening: bool) -> Sample:
    """Counters at one edge of a window; the queue is counted outside the window (before it
    opens, after it closes), or its ~2,000 index reads would land in the global deltas."""
    queued = count_queued(server.database) if opening else -1
    with connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW GLOBAL STATUS WHERE Variable_name IN (" + ", ".join(f"'{n}'" for n in STATUS) + ")")
        status = {str(k): int(v) for k, v in cur.fetchall()}
    out = Sample(server.sql_counts(), meter.sample(), status, queued)
    if not opening:
        out.queued = count_queued(server.database)
    return out


async def top_up(port: int, database: str, want: int) -> int:
    """Submit over gRPC until `want` jobs are QUEUED (the last window's claims took some); how many."""
    missing = max(0, want - await asyncio.to_thread(count_queued, database))
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = job_pb2_grpc.JobServiceStub(channel)
        request = job_pb2.SubmitRequest(job_type=JOB_TYPE, payload=PAYLOAD, owner="bench", labels=LABELS)
        for first in range(0, missing, TOP_UP_CONCURRENCY):
            batch = range(first, min(missing, first + TOP_UP_CONCURRENCY))
            await asyncio.gather(*(stub.Submit(request, timeout=RPC_TIMEOUT_S) for _ in batch))
    return missing


async def _window(server: e2e.Server, args: argparse.Namespace, m: Measured) -> None:
    """Claimers and submitters on one loop; counters sampled (in a thread) at the counted window's edges."""
    target = f"127.0.0.1:{server.port}"
    meter = CpuMeter(
        {"server": server.pid, "mysqld": find_pid(("mariadbd", "mysqld")), "bench": os.getpid()},
        trees=frozenset({"server"}),
    )
    channels = [grpc.aio.insecure_channel(target, options=OWN_CONNECTION) for _ in range(args.claimers + 1)]
    stop = asyncio.Event()
    owed = asyncio.Semaphore(0)  # one permit per claimed job: a submitter replaces it
    claims: list[tuple[float, float, int]] = []  # (start, seconds, leases)
    completes: list[tuple[float, float]] = []
    submits: list[float] = []
    errors: Counter[str] = Counter()
    wait = Duration(seconds=int(args.claim_wait), nanos=int(args.claim_wait % 1 * 1e9))
    spec = [worker_pb2.JobTypeSpec(name=JOB_TYPE)]
    artifact = job_pb2.Artifact(size_bytes=48_213, sha256=SHA_HEX, content_type="application/pdf", summary="12 pages")

    async def claimer(n: int, channel: grpc.aio.Channel) -> None:
        stub = worker_pb2_grpc.WorkerServiceStub(channel)
        request = worker_pb2.ClaimRequest(worker_id=f"claims-{n}", job_types=spec, max_jobs=1, wait=wait)
        for _ in range(MAX_CYCLES):
            if stop.is_set():
                return
            t = time.monotonic()
            try:
                reply = await stub.Claim(request, timeout=RPC_TIMEOUT_S)
            except grpc.aio.AioRpcError as exc:
                errors[f"Claim {exc.code().name}: {exc.details()}"[:120]] += 1
                await asyncio.sleep(EMPTY_PAUSE_S)
                continue
            claims.append((t, time.monotonic() - t, len(reply.leases)))
            if not reply.leases:
                await asyncio.sleep(EMPTY_PAUSE_S)
            for lease in reply.leases:  # completed even after stop: no lease outlives the window
                owed.release()
                done = job_pb2.Artifact()
                done.CopyFrom(artifact)
                done.uri = f"file:///bench/{lease.job_no}"
                t = time.monotonic()
                try:
                    await stub.Complete(
                        worker_pb2.CompleteRequest(job_no=lease.job_no, worker_token=lease.worker_token, result=done),
                        timeout=RPC_TIMEOUT_S,
                    )
                    completes.append((t, time.monotonic() - t))
                except grpc.aio.AioRpcError as exc:
                    errors[f"Complete {exc.code().name}: {exc.details()}"[:120]] += 1

    async def submitter(channel: grpc.aio.Channel) -> None:
        stub = job_pb2_grpc.JobServiceStub(channel)
        request = job_pb2.SubmitRequest(job_type=JOB_TYPE, payload=PAYLOAD, owner="bench", labels=LABELS)
        for _ in range(MAX_CYCLES):
            await owed.acquire()
            if stop.is_set():
                return
            try:
                await stub.Submit(request, timeout=RPC_TIMEOUT_S)
                submits.append(time.monotonic())
            except grpc.aio.AioRpcError as exc:
                errors[f"Submit {exc.code().name}: {exc.details()}"[:120]] += 1

    try:
        for ch in channels:
            await asyncio.wait_for(ch.channel_ready(), 10)
        tasks = [asyncio.create_task(claimer(n, ch)) for n, ch in enumerate(channels[:-1])]
        tasks += [asyncio.create_task(submitter(channels[-1])) for _ in range(args.submitters)]
        await asyncio.sleep(args.warmup)
        before = await asyncio.to_thread(sample, server, meter, True)
        t0 = time.monotonic()
        await asyncio.sleep(args.seconds)
        t1 = time.monotonic()
        after = await asyncio.to_thread(sample, server, meter, False)
        stop.set()
        for _ in range(args.submitters):
            owed.release()
        await asyncio.wait_for(asyncio.gather(*tasks), RPC_TIMEOUT_S * 3)
    finally:
        for ch in channels:
            await ch.close()
    counted = [(d, n) for s, d, n in claims if t0 <= s < t1]
    m.seconds = t1 - t0
    m.claim_ms = [d * 1000 for d, _ in counted]
    m.leases = sum(n for _, n in counted)
    m.empty = sum(1 for _, n in counted if n == 0)
    m.complete_ms = [d * 1000 for s, d in completes if t0 <= s < t1]
    m.submits = sum(1 for s in submits if t0 <= s < t1)
    m.errors = errors
    m.sql = {k: after.sql[k] - before.sql[k] for k in after.sql}
    m.cpu = CpuMeter.delta(before.cpu, after.cpu)
    m.status = {k: after.status.get(k, 0) - before.status.get(k, 0) for k in STATUS}
    m.queued = (before.queued, after.queued)


def measure(server: e2e.Server, args: argparse.Namespace, size: int, run: int) -> Measured:
    """One counted window; again (up to 3 tries) when MariaDB restarted inside it."""
    m = Measured(size=size, run=run)
    for attempt in range(1, WINDOW_TRIES + 1):
        m = Measured(size=size, run=run, tries=attempt)
        topped = asyncio.run(top_up(server.port, server.database, args.queued))
        log(f"run {run} · {size:,} rows: {topped} jobs submitted to bring the queue back to {args.queued}")
        try:
            asyncio.run(_window(server, args, m))
        except (grpc.aio.AioRpcError, pymysql.err.OperationalError) as exc:
            log(f"run {run} · {size:,} rows: window failed ({exc}); the database may have restarted")
            wait_for_db()
            continue
        if m.status.get("Uptime", 0) >= int(m.seconds) - 1:
            return m
        log(f"run {run} · {size:,} rows: MariaDB restarted inside the window; measuring again")
        wait_for_db()
    return m


# -- the report ---------------------------------------------------------------------------


def _cell(values: Sequence[float], digits: int = 1, spread: bool = False) -> str:
    present = [v for v in values if v == v]
    if not present:
        return "–"
    text = f"{median(present):,.{digits}f}"
    if spread and len(present) > 1:
        text += f" ({min(present):,.{digits}f}–{max(present):,.{digits}f})"
    return text


def report(
    args: argparse.Namespace,
    machine: list[str],
    fills: dict[int, Fill],
    settled: str,
    results: list[Measured],
    elapsed: float,
) -> str:
    sizes = args.size_list
    env = {**os.environ, **dict(kv.split("=", 1) for kv in args.server_env)}
    processes = env.get("JOBWIRE_PROCESSES") or os.cpu_count()  # the server's own default: the cores
    by_size = {s: [m for m in results if m.size == s] for s in sizes}
    lines = [
        f"## jobwire Claim latency against rows in `job` — medians of {args.runs} run(s), {args.seconds:g} s windows",
        "",
        *[f"- {line}" for line in machine],
        f"- command: `{shlex.join([sys.executable, *sys.argv])}` ({elapsed:.0f} s)",
        f"- {args.claimers} claimers, a connection each: Claim(max_jobs=1, wait={args.claim_wait:g} s) then Complete;"
        f" {args.submitters} submitters replace each claimed job, so ~{args.queued:,} stay QUEUED; only Claims counted;"
        f" server: `python -m jobwire serve`, {processes} serving process(es) (JOBWIRE_PROCESSES)",
    ]
    for s in sizes:
        f = fills[s]
        mix = " · ".join(f"{k} {v:,}" for k, v in sorted(f.statuses.items(), key=lambda kv: -kv[1]))
        parts = ", ".join(f"{k} {v:.1f} s" for k, v in f.parts.items())
        lines.append(
            f"- fill {s:,} rows: {f.seconds:.1f} s ({parts}); {mix};"
            f" `job` {f.mib['data']:,.0f} MiB data + {f.mib['index']:,.0f} MiB indexes"
        )
    lines.append(f"- {settled}")
    lines += [
        "",
        "| rows in `job` | Claim p50, ms | **Claim p99, ms** | claims/s | empty claims | Complete p50 / p99, ms"
        " | server statements · pings per claimed job | server CPU ms per claim · busy % of a core"
        " | mysqld CPU ms per claim | index lookups · next-reads · buffer pool page reads · misses per claim (global)"
        " | row lock waits · fsyncs per claim (global) | QUEUED start → end |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in sizes:
        ms = by_size[s]
        busy = [m.cpu.get("server", float("nan")) / m.seconds * 100 for m in ms]
        lines.append(
            f"| {s:,} | {_cell([pct(m.claim_ms, 50) for m in ms], spread=True)}"
            f" | **{_cell([pct(m.claim_ms, 99) for m in ms], spread=True)}**"
            f" | {_cell([m.claims_per_s for m in ms], 0)}"
            f" | {sum(m.empty for m in ms)} of {sum(len(m.claim_ms) for m in ms):,}"
            f" | {_cell([pct(m.complete_ms, 50) for m in ms])} / {_cell([pct(m.complete_ms, 99) for m in ms])}"
            f" | {_cell([m.per_lease(m.sql.get('query', 0)) for m in ms])}"
            f" · {_cell([m.per_lease(m.sql.get('ping', 0)) for m in ms])}"
            f" | {_cell([m.per_lease(m.cpu.get('server', float('nan')) * 1000) for m in ms], 2)} · {_cell(busy, 0)}"
            f" | {_cell([m.per_lease(m.cpu.get('mysqld', float('nan')) * 1000) for m in ms], 2)}"
            f" | {_cell([m.per_lease(m.status.get('Handler_read_key', 0)) for m in ms])}"
            f" · {_cell([m.per_lease(m.status.get('Handler_read_next', 0)) for m in ms])}"
            f" · {_cell([m.per_lease(m.status.get('Innodb_buffer_pool_read_requests', 0)) for m in ms], 0)}"
            f" · {_cell([m.per_lease(m.status.get('Innodb_buffer_pool_reads', 0)) for m in ms], 2)}"
            f" | {_cell([m.per_lease(m.status.get('Innodb_row_lock_waits', 0)) for m in ms], 2)}"
            f" · {_cell([m.per_lease(m.status.get('Innodb_data_fsyncs', 0)) for m in ms], 2)}"
            f" | {' · '.join(f'{m.queued[0]:,} → {m.queued[1]:,}' for m in ms)} |"
        )
    small = sizes[0]
    lines += ["", f"Claim p99 per run, ms, and the ratio to {small:,} rows paired run by run:", ""]
    head = ["run", *[f"{s:,} rows" for s in sizes], *[f"{s:,} / {small:,}" for s in sizes[1:]]]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    ratios: dict[int, list[float]] = {s: [] for s in sizes[1:]}
    for run in range(1, args.runs + 1):
        p99 = {m.size: pct(m.claim_ms, 99) for m in results if m.run == run}
        for s in sizes[1:]:
            ratios[s].append(p99.get(s, float("nan")) / p99.get(small, float("nan")))
        lines.append(
            f"| {run} | " + " | ".join(f"{p99.get(s, float('nan')):.1f}" for s in sizes)
            + "".join(f" | {ratios[s][-1]:.2f}" for s in sizes[1:]) + " |"
        )  # fmt: skip
    lines.append("")
    for s in sizes[1:]:
        ratio = median(ratios[s])
        verdict = "PASS" if ratio <= TARGET_RATIO else "MISS"
        lines.append(
            f"**p99({s:,}) / p99({small:,}) = {ratio:.2f}** (median of the per-run ratios) → **{verdict}**"
            f" (target ≤ {TARGET_RATIO}×)"
        )
    notes = []
    for m in results:
        if m.errors:
            notes.append(f"run {m.run} · {m.size:,} rows: errors {dict(m.errors)}")
        if m.tries > 1:
            notes.append(f"run {m.run} · {m.size:,} rows: measured {m.tries} times (MariaDB restarted)")
    if notes:
        lines += ["", *[f"- {n}" for n in notes]]
    lines += ["", "### The claim's candidate SELECT (jobwire.db.sql, one job type, max_jobs=1)", "", "```sql",
              claim_sql_shown(), "```", ""]  # fmt: skip
    for s in sizes:
        f = fills[s]
        lines += [f"EXPLAIN after the fill, {s:,} rows:", ""]
        lines += ["| " + " | ".join(f.explain_head) + " |", "|" + "---|" * len(f.explain_head)]
        lines += ["| " + " | ".join("" if v is None else str(v) for v in row) + " |" for row in f.explain]
        if f.analyze:
            lines += ["", f"ANALYZE after the last round, {s:,} rows: `{json.dumps(f.analyze)}`"]
        lines.append("")
    return "\n".join(lines)


# -- main ---------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    started = time.monotonic()
    wait_for_db()
    machine = describe_machine()
    with tempfile.TemporaryDirectory(prefix="jwbench-claims-") as tmp:
        workdir = Path(tempfile.mkdtemp(prefix="jwbench-claims-logs-")) if args.keep else Path(tmp)
        text = _measure_all(args, machine, workdir, started)
    print(text)


def _measure_all(args: argparse.Namespace, machine: list[str], workdir: Path, started: float) -> str:
    env = dict(kv.split("=", 1) for kv in args.server_env)
    tag = secrets.token_hex(3)
    servers: dict[int, e2e.Server] = {}
    fills: dict[int, Fill] = {}
    results: list[Measured] = []
    settled = ""
    try:
        for size in args.size_list:
            database = f"jwbench_claims_{size}_{tag}"
            log(f"{size:,} rows: starting the server on {database} (it migrates)")
            servers[size] = e2e.Server(database, workdir / f"server-{size}.log", env)
            nos = asyncio.run(make_templates(servers[size].port))
            log(f"{size:,} rows: templates {nos}; filling")
            fills[size] = fill(database, size, args.queued, nos)
            f = fills[size]
            log(f"{size:,} rows: filled in {f.seconds:.1f} s {f.parts}; {f.statuses}; key {f.explain[0][5:7]}")
        settled = settle()
        log(settled)
        for run in range(1, args.runs + 1):
            # Alternate the order, so neither size always runs right after the other's load.
            for size in args.size_list if run % 2 else args.size_list[::-1]:
                m = measure(servers[size], args, size, run)
                results.append(m)
                log(
                    f"run {run} · {size:,} rows: {len(m.claim_ms):,} claims, {m.claims_per_s:.0f}/s,"
                    f" p50 {pct(m.claim_ms, 50):.1f} ms, p99 {pct(m.claim_ms, 99):.1f} ms, empty {m.empty},"
                    f" errors {sum(m.errors.values())}"
                )
        for size in args.size_list:
            fills[size].analyze = analyze_claim(servers[size].database)
    finally:
        for server in servers.values():
            server.stop(drop=not args.keep)
    text = report(args, machine, fills, settled, results, time.monotonic() - started)
    if args.keep:
        text += f"\nDatabases {', '.join(s.database for s in servers.values())} and server logs in {workdir} kept.\n"
    return text


if __name__ == "__main__":
    main()
