"""One tenant's due schedules against another's one: how long the other waits, and firings/s.

    .venv/bin/python bench/schedules.py                        # 2,000 + 1 due, 3 runs on MariaDB (~1 min)
    .venv/bin/python bench/schedules.py --schedules 6000 --runs 1
    .venv/bin/python bench/schedules.py --database sqlite      # the same on a SQLite file

The scenario of issue 22's finding 1: tenant A has --schedules schedules due, tenant B has
one, due after all of A's (the worst place for it in a round that takes them oldest first).
What is measured, in-process, with the server's own parts (its store, thread pool and group
commit, built as a server builds them) on a fresh database each run:

  * B's wait: from the first round's start until B's firing has its job;
  * firings/s: every due schedule fired (A's and B's), divided by the time until the last
    one's job and advance were done, rounds called back to back (no interval between them);
  * missed: fire times counted missed (each was due 5 s before the first round, so none is,
    unless the rounds' work pushed it past JOBWIRE_SCHEDULE_MISFIRE_GRACE_SECONDS).

The schedules fire once a year (`0 0 1 1 *`) with their next fire time set 5 s in the
past, so a run of any length fires each exactly once; the template is a bare Submit.
Medians of --runs runs. Each MariaDB database is dropped at the end unless --keep. Needs
MariaDB at 127.0.0.1:3306 (root, no password) unless --database sqlite.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from datetime import datetime, timedelta
from pathlib import Path

import sqlalchemy as sa
from measure import connect, drop_database

from jobwire.db.tables import schedule
from jobwire.jobapi.firing import ScheduleLoop
from jobwire.jobapi.jobs import Jobs
from jobwire.runtime.parts import open_runtime
from jobwire.runtime.settings import Settings
from jobwire.v1 import job_pb2

TEMPLATE = job_pb2.SubmitRequest(job_type="tick", payload=b"{}").SerializeToString(deterministic=True)


def rows(tenant: str, count: int, due: datetime) -> list[dict[str, object]]:
    return [
        {"tenant": tenant, "schedule_id": f"s{i}", "cron": "0 0 1 1 *", "every_s": None, "time_zone": "UTC",
         "template": TEMPLATE, "overlap": "ALLOW", "catch_up": "NONE", "paused": False, "next_fire_at": due,
         "created_at": due - timedelta(days=1)}
        for i in range(count)
    ]  # fmt: skip


async def one_run(url: str, count: int) -> tuple[float, float, float]:
    """(B's wait in s, firings/s, fire times counted missed) of one run on the database at `url`."""
    settings = Settings(database_url=url, listen="127.0.0.1:0", schedule_interval_seconds=0, reaper_interval_seconds=0)
    rt = open_runtime(settings)
    try:
        now = rt.store.now().replace(microsecond=0)
        with rt.store.db.engine.begin() as conn:
            conn.execute(sa.insert(schedule), rows("a", count, now - timedelta(seconds=5)))
            conn.execute(sa.insert(schedule), rows("b", 1, now - timedelta(seconds=4)))
        jobs = Jobs(
            rt.store, rt.blocking, rt.commits, rt.wakeup,
            no_worker_after=timedelta(minutes=5), worker_gone_after=timedelta(minutes=1),
        )  # fmt: skip
        b_fired = float("nan")
        submit = jobs.submit

        async def timed(who, new):  # type: ignore[no-untyped-def]
            nonlocal b_fired
            made = await submit(who, new)
            if who.tenant == "b":
                b_fired = time.perf_counter()
            return made

        jobs.submit = timed  # type: ignore[method-assign]
        loop = ScheduleLoop(jobs, settings, rt.host.metrics)
        due = sa.select(sa.func.count()).select_from(schedule).where(schedule.c.next_fire_at <= now)
        start = time.perf_counter()
        while True:
            await loop.tick()
            with rt.store.db.engine.connect() as conn:
                if not conn.execute(due).scalar_one():
                    break
        took = time.perf_counter() - start
        return b_fired - start, (count + 1) / took, rt.host.metrics.firings("missed")
    finally:
        await rt.stop(grace=1.0)


def database(kind: str, keep: bool, scratch: Path) -> tuple[str, str | None]:
    """A fresh database's URL and, for MariaDB, its name (to drop)."""
    if kind == "sqlite":
        return f"sqlite:///{scratch / f'{uuid.uuid4().hex[:8]}.db'}", None
    name = f"jwbench_schedules_{uuid.uuid4().hex[:8]}"
    conn = connect()
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
    conn.close()
    return f"mysql+pymysql://root@127.0.0.1:3306/{name}", None if keep else name


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schedules", type=int, default=2000, help="due schedules of tenant A (B has one)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--database", choices=("mariadb", "sqlite"), default="mariadb")
    parser.add_argument("--keep", action="store_true", help="keep the MariaDB databases")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as scratch:
        for run in range(1, args.runs + 1):
            url, drop = database(args.database, args.keep, Path(scratch))
            try:
                results.append(asyncio.run(one_run(url, args.schedules)))
            finally:
                if drop:
                    drop_database(drop)
            wait, rate, missed = results[-1]
            print(f"run {run}: B's firing after {wait:.2f} s, {rate:.0f} firings/s, {missed:.0f} missed", flush=True)
    waits, rates, misses = zip(*results, strict=True)
    print(
        f"\n{args.schedules} due of tenant A + 1 of tenant B on {args.database}, medians of {args.runs} runs: "
        f"B's firing after {statistics.median(waits):.2f} s, {statistics.median(rates):.0f} firings/s, "
        f"{statistics.median(misses):.0f} missed"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
