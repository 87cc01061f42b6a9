"""The raw PyMySQL job lifecycle: the floor jobwire is measured against (its reference figures: docs/performance.md).

Each client is a thread with its own autocommit PyMySQL connection at READ COMMITTED and
runs, per job:

1. INSERT the job (autocommit);
2. claim: BEGIN; SELECT id ... WHERE status='QUEUED' ORDER BY priority DESC, id LIMIT 1
   FOR UPDATE SKIP LOCKED; UPDATE it to RUNNING with a token and a lease; COMMIT;
3. three progress UPDATEs guarded by id and token (autocommit);
4. complete: BEGIN; INSERT the artifact; UPDATE to READY; COMMIT.

The claim index is (status, priority DESC, id), matching the ORDER BY; `index="asc"`
builds (status, priority, id) instead, the filesort trap: MySQL sorts every candidate
instead of reading the index in order.

Run alone: `python bench/baseline_raw.py --clients 1,8,32 --seconds 5`.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlcount
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
    pct,
)

SCHEMA = """
CREATE TABLE job (
  id BIGINT AUTO_INCREMENT PRIMARY KEY,
  status VARCHAR(16) NOT NULL,
  priority INT NOT NULL DEFAULT 0,
  job_type VARCHAR(64) NOT NULL,
  payload BLOB NOT NULL,
  worker_id VARCHAR(64) NULL,
  worker_token VARCHAR(64) NULL,
  stage VARCHAR(32) NULL,
  processed_units BIGINT NOT NULL DEFAULT 0,
  total_units BIGINT NULL,
  lease_expires_at DATETIME(6) NULL,
  created_at DATETIME(6) NOT NULL,
  updated_at DATETIME(6) NOT NULL,
  finished_at DATETIME(6) NULL,
  KEY ix_claim {index}
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4
"""
ARTIFACT = """
CREATE TABLE artifact (
  id BIGINT AUTO_INCREMENT PRIMARY KEY,
  job_id BIGINT NOT NULL,
  uri VARCHAR(2048) NOT NULL,
  size_bytes BIGINT NOT NULL,
  sha256 CHAR(64) NOT NULL,
  created_at DATETIME(6) NOT NULL,
  UNIQUE KEY uq_artifact_job (job_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4
"""
INDEXES = {"desc": "(status, priority DESC, id)", "asc": "(status, priority, id)"}

INSERT = (
    "INSERT INTO job (status, priority, job_type, payload, created_at, updated_at)"
    " VALUES ('QUEUED', 0, 'bench.noop', %s, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))"
)
PICK = "SELECT id FROM job WHERE status = 'QUEUED' ORDER BY priority DESC, id LIMIT 1 FOR UPDATE SKIP LOCKED"
LEASE = (
    "UPDATE job SET status = 'RUNNING', worker_id = %s, worker_token = %s, stage = 'PREPARING',"
    " lease_expires_at = UTC_TIMESTAMP(6) + INTERVAL 30 SECOND, updated_at = UTC_TIMESTAMP(6)"
    " WHERE id = %s AND status = 'QUEUED'"
)
PROGRESS = (
    "UPDATE job SET stage = %s, processed_units = %s, total_units = %s,"
    " lease_expires_at = UTC_TIMESTAMP(6) + INTERVAL 30 SECOND, updated_at = UTC_TIMESTAMP(6)"
    " WHERE id = %s AND worker_token = %s"
)
STORE_ARTIFACT = (
    "INSERT INTO artifact (job_id, uri, size_bytes, sha256, created_at) VALUES (%s, %s, 0, %s, UTC_TIMESTAMP(6))"
)
FINISH = (
    "UPDATE job SET status = 'READY', worker_token = NULL, lease_expires_at = NULL,"
    " finished_at = UTC_TIMESTAMP(6), updated_at = UTC_TIMESTAMP(6) WHERE id = %s AND worker_token = %s"
)
STAGES = (("PREPARING", 1, 1), ("PROCESSING", 50, 100), ("VERIFYING", 1, 1))
SHA = "0" * 64


@dataclass
class RawStats:
    done: list[float] = field(default_factory=list)
    insert: list[tuple[float, float]] = field(default_factory=list)
    claim: list[tuple[float, float]] = field(default_factory=list)
    empty_claims: int = 0
    errors: list[str] = field(default_factory=list)


def create_database(name: str, index: str = "desc") -> None:
    conn = connect()
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
        cur.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
        cur.execute(f"USE `{name}`")
        cur.execute(SCHEMA.format(index=INDEXES[index]))
        cur.execute(ARTIFACT)
    conn.close()


def _client(database: str, n: int, stop: threading.Event, stats: RawStats) -> None:
    conn = connect(database, init_command="SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
    worker = f"raw-{n}"
    payload = b"{}"
    try:
        with conn.cursor() as cur:
            while not stop.is_set():
                t = time.monotonic()
                cur.execute(INSERT, (payload,))
                stats.insert.append((t, time.monotonic() - t))

                t = time.monotonic()
                conn.begin()
                cur.execute(PICK)
                row = cur.fetchone()
                if row is None:
                    conn.rollback()
                    stats.empty_claims += 1
                    continue
                job_id, token = row[0], secrets.token_hex(8)
                cur.execute(LEASE, (worker, token, job_id))
                conn.commit()
                stats.claim.append((t, time.monotonic() - t))

                for stage, processed, total in STAGES:
                    cur.execute(PROGRESS, (stage, processed, total, job_id, token))

                conn.begin()
                cur.execute(STORE_ARTIFACT, (job_id, f"file:///bench/raw/{job_id}", SHA))
                cur.execute(FINISH, (job_id, token))
                conn.commit()
                stats.done.append(time.monotonic())
    except Exception as exc:  # noqa: BLE001 - a failed client is reported, not hidden
        stats.errors.append(f"{type(exc).__name__}: {exc}")
        stop.set()
    finally:
        conn.close()


@dataclass
class RawResult:
    clients: int
    jobs_per_s: float
    window: Window
    jobs: int
    insert_ms: list[float]
    claim_ms: list[float]
    empty_claims: int
    errors: list[str]

    def per_job(self, key: str) -> float:
        """A MariaDB global status delta per job (includes other tenants of the server)."""
        return self.window.db.get(key, 0) / self.jobs if self.jobs else float("nan")

    def sql_per_job(self, key: str = "query") -> float:
        """Commands this bench's own connections sent, per job (the monitoring SHOW excluded)."""
        if not self.window.sql or not self.jobs:
            return float("nan")
        return (self.window.sql.get(key, 0) - (1 if key == "query" else 0)) / self.jobs

    def cpu_ms_per_job(self, who: str) -> float:
        return self.window.cpu.get(who, float("nan")) * 1000 / self.jobs if self.jobs else float("nan")


def run_lifecycle(
    database: str,
    clients: int,
    seconds: float,
    warmup: float,
    cap: int,
    counters: DbCounters,
    sql: Callable[[], dict[str, int]],
    processes: bool = False,
) -> RawResult:
    """One measurement: `clients` threads (or processes) for warm-up + `seconds`, then stop."""
    meter = CpuMeter({"bench": os.getpid(), "mysqld": find_pid(("mariadbd", "mysqld"))})
    if processes:
        return _run_processes(database, clients, seconds, warmup, counters, meter, sql)
    stats, stop = RawStats(), threading.Event()
    threads = [threading.Thread(target=_client, args=(database, n, stop, stats), daemon=True) for n in range(clients)]
    for t in threads:
        t.start()
    try:
        window = measure_window(meter, counters, sql, warmup, seconds, stats.done, cap)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
    return _result(clients, window, stats)


def _result(clients: int, window: Window, stats: RawStats) -> RawResult:
    jobs = in_window(stats.done, window)
    return RawResult(
        clients=clients,
        jobs_per_s=jobs / window.seconds,
        window=window,
        jobs=jobs,
        insert_ms=latencies_in(stats.insert, window),
        claim_ms=latencies_in(stats.claim, window),
        empty_claims=stats.empty_claims,
        errors=stats.errors,
    )


def _process_client(database: str, n: int, stop: Any, out: Any) -> None:
    stats = RawStats()
    _client(database, n, stop, stats)
    out.put(stats)


def _run_processes(
    database: str,
    clients: int,
    seconds: float,
    warmup: float,
    counters: DbCounters,
    meter: CpuMeter,
    sql: Callable[[], dict[str, int]],
) -> RawResult:
    """The same clients as separate processes: no shared GIL. Their CPU is counted as 'bench'.

    Exact statement counts are not kept in this mode (the Questions delta still is).
    """
    ctx = multiprocessing.get_context("fork")
    stop, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_process_client, args=(database, n, stop, out), daemon=True) for n in range(clients)]
    for p in procs:
        p.start()
    meter = CpuMeter({**meter.pids, **{f"client{n}": p.pid for n, p in enumerate(procs)}})
    try:
        window = measure_window(meter, counters, sql, warmup, seconds, [], 10**9)
    finally:
        stop.set()
    merged = RawStats()
    for _ in procs:
        part: RawStats = out.get(timeout=30)
        merged.done += part.done
        merged.insert += part.insert
        merged.claim += part.claim
        merged.empty_claims += part.empty_claims
        merged.errors += part.errors
    for p in procs:
        p.join(timeout=10)
    window.sql = {}  # forked clients share the counter file but not the counts: no exact figure
    bench = sum(v for k, v in window.cpu.items() if k == "bench" or k.startswith("client"))
    cpu = {k: v for k, v in window.cpu.items() if not k.startswith("client")}
    window.cpu = {**cpu, "bench": bench}
    return _result(clients, window, merged)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--clients", default="1,8,32")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--warmup", type=float, default=0.5)
    parser.add_argument("--index", choices=sorted(INDEXES), default="desc")
    parser.add_argument("--processes", action="store_true", help="one process per client instead of threads")
    args = parser.parse_args()
    database = f"jwbench_raw_{secrets.token_hex(3)}"
    counter_file = Path(f"/tmp/{database}.sqlcount")
    sqlcount.install(counter_file)
    counters = DbCounters()
    try:
        for clients in (int(c) for c in args.clients.split(",")):
            create_database(database, args.index)
            r = run_lifecycle(
                database, clients, args.seconds, args.warmup, 10**9, counters,
                lambda: sqlcount.read(counter_file), args.processes,
            )  # fmt: skip
            print(
                f"{clients:>3} clients: {r.jobs_per_s:7.0f} jobs/s  claim p50 {pct(r.claim_ms, 50):.2f} ms"
                f" p99 {pct(r.claim_ms, 99):.2f} ms  statements/job {r.sql_per_job():.1f}"
                f" (Questions {r.per_job('Questions'):.1f})"
                f"  bench CPU {r.cpu_ms_per_job('bench'):.2f} ms/job"
                f"  mysqld CPU {r.cpu_ms_per_job('mysqld'):.2f} ms/job"
                + (f"  errors: {r.errors[:3]}" if r.errors else "")
            )
    finally:
        counters.close()
        drop_database(database)
        sqlcount.clear(counter_file)


if __name__ == "__main__":
    main()
