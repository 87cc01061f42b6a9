"""ListJobs(page_size=20) latency against the size of one tenant: ~1,000 jobs, then ~100,000.

    .venv/bin/python bench/list_jobs.py                        # SQLite and MariaDB, 1k and 100k
    .venv/bin/python bench/list_jobs.py --databases sqlite --sizes 1000,20000 --calls 100

The target (security review, finding 5): the first page of a tenant's jobs costs the same
whatever the tenant's size, for any filters; before, 281 ms median at 107,893 jobs against
7 ms at 1,087 (no filter), and later (one index per leading filter, the other filters
checked row by row) still 83.5 ms against 1.6 ms on SQLite for a rare label.

How it measures, per database (a fresh SQLite file, or a fresh MariaDB database at
127.0.0.1:3306, root, no password):

1. An all-in-one server (the JobService of `python -m jobwire serve`) in this process on
   port 0, housekeeping off, over that database.
2. Templates through gRPC: one job of each status the page may hold (QUEUED and CANCELLED),
   so a copied row holds what the server writes.
3. Fill, in SQL, up to each size in --sizes: copies of the templates with fresh job numbers
   (a day no server uses), 5,000 rows a statement, and as many again of a second tenant
   between them (the review's server had two). Job n of a tenant (`copy_of`): QUEUED when n
   is even, else CANCELLED; every 7th of another owner and job type; every 11th in queue q1,
   CANCELLED; among the oldest 1,000 only, 20 READY of that owner and 20 QUEUED in q1 (at
   every size a page of 20 of each, from the bottom of the tenant's jobs); the label
   bench=rare on job 0 alone. No ANALYZE: a server never runs one, so the planners see what
   they would in service.
4. Per size: --calls ListJobs of the first page, one after another, for each of FILTERS: the
   ones the gateway and jobctl send (none, a status, an owner), and the combined and rare
   ones (owner + READY, queue q1 + QUEUED: what a token of queue q1 alone sends with a
   status, a label only job 0 has); p50 and p99 of each, and the jobs the page held.
   Then the rare label's pages followed to the end: the calls and the time it took to
   reach job 0.
5. Report: a table per database, and the ratio p50(largest)/p50(smallest) per filter.

Progress to stderr, the table to stdout. The databases are removed at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc
import sqlalchemy as sa

from jobwire.db.tables import job
from jobwire.jobapi.app import add_jobapi
from jobwire.runtime.parts import Runtime, open_runtime
from jobwire.runtime.settings import Settings
from jobwire.v1 import job_pb2, job_pb2_grpc

MYSQL = "mysql+pymysql://root@127.0.0.1:3306"
CHUNK = 5_000
OLDEST = 1_000  # 20 of these are READY of bench-owner, 20 QUEUED in q1; none of the later jobs
RARE_LABEL = {"bench": "rare"}  # job 0 alone
FILTERS = {
    "none": job_pb2.ListJobsRequest(page_size=20),
    "status QUEUED": job_pb2.ListJobsRequest(page_size=20, statuses=[job_pb2.Job.QUEUED]),
    "owner": job_pb2.ListJobsRequest(page_size=20, owner="bench-owner"),
    "owner + READY": job_pb2.ListJobsRequest(page_size=20, owner="bench-owner", statuses=[job_pb2.Job.READY]),
    "queue q1 + QUEUED": job_pb2.ListJobsRequest(page_size=20, queue="q1", statuses=[job_pb2.Job.QUEUED]),
    "rare label": job_pb2.ListJobsRequest(page_size=20, labels=RARE_LABEL),
}


def log(message: str) -> None:
    print(f"[list_jobs] {message}", file=sys.stderr, flush=True)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--databases", default="sqlite,mysql", help="sqlite, mysql or both (comma-separated)")
    parser.add_argument("--sizes", default="1000,100000", help="jobs of the tenant at each measurement")
    parser.add_argument("--calls", type=int, default=200, help="ListJobs calls per filter and size")
    return parser.parse_args(argv)


async def start(url: str) -> tuple[Runtime, grpc.aio.Channel]:
    settings = Settings(database_url=url, listen="127.0.0.1:0", reaper_interval_seconds=0)  # type: ignore[call-arg]
    rt = open_runtime(settings)
    add_jobapi(rt)
    port = await rt.host.start()
    return rt, grpc.aio.insecure_channel(f"127.0.0.1:{port}")


async def templates(stub: job_pb2_grpc.JobServiceStub) -> None:
    await stub.Submit(job_pb2.SubmitRequest(job_type="frames", payload=b"{}"))
    cancelled = await stub.Submit(job_pb2.SubmitRequest(job_type="frames", payload=b"{}", owner="bench-owner"))
    await stub.Cancel(job_pb2.CancelRequest(job_no=cancelled.job.job_no))


def copy_of(templates: dict[str, dict[str, Any]], n: int, tenant: str) -> dict[str, Any]:
    """Job n of `tenant`: a copy of the QUEUED or the CANCELLED template, as the docstring says."""
    status = "QUEUED" if n % 2 == 0 else "CANCELLED"
    changes: dict[str, Any] = {}
    if n % 7 == 0:
        changes.update(owner="bench-owner", job_type="reports")
    if n % 11 == 0:
        changes["queue"], status = "q1", "CANCELLED"
    if n < OLDEST and n % 50 == 25:
        changes["queue"], status = "q1", "QUEUED"
    if n < OLDEST and n % 50 == 1:
        changes["owner"], status = "bench-owner", "READY"
    if n == 0:
        changes["labels"] = json.dumps(RARE_LABEL)
    row = {k: v for k, v in templates["QUEUED" if status == "QUEUED" else "CANCELLED"].items() if k != "id"}
    row.update(changes, status=status, tenant=tenant, job_no=f"BX-20000101-{tenant[0]}{n:09d}", idempotency_key=None)
    return row


def fill(engine: sa.Engine, size: int) -> None:
    """Copy the template rows until the measured tenant has `size` jobs, the other tenant as many."""
    with engine.begin() as conn:
        made = conn.execute(sa.select(job).where(job.c.tenant == "default", job.c.job_no.not_like("BX-%")))
        templates = {r["status"]: dict(r) for r in made.mappings()}
        have = int(conn.execute(sa.select(sa.func.count()).where(job.c.tenant == "default")).scalar_one())
    started = time.monotonic()
    n = have - len(templates)
    while n < size:
        batch = []
        for _ in range(min(CHUNK, size - n)):
            batch += [copy_of(templates, n, tenant) for tenant in ("default", "other")]
            n += 1
        with engine.begin() as conn:
            conn.execute(sa.insert(job), batch)
    log(f"filled to {size} jobs in {time.monotonic() - started:.1f} s")


Figure = tuple[float, float, int]  # p50 and p99 in ms, the jobs on the page


async def measure(stub: job_pb2_grpc.JobServiceStub, calls: int) -> dict[str, Figure]:
    out = {}
    for name, request in FILTERS.items():
        for _ in range(5):  # warm the caches and the channel
            await stub.ListJobs(request)
        took = []
        for _ in range(calls):
            began = time.perf_counter()
            reply = await stub.ListJobs(request)
            took.append((time.perf_counter() - began) * 1000)
        took.sort()
        out[name] = (statistics.median(took), took[min(len(took) - 1, int(len(took) * 0.99))], len(reply.jobs))
    return out


async def walk_to_rare(stub: job_pb2_grpc.JobServiceStub) -> tuple[int, float]:
    """The rare label's pages followed until job 0 is listed: (calls, ms in all)."""
    request = job_pb2.ListJobsRequest(page_size=20, labels=RARE_LABEL)
    calls, began = 0, time.perf_counter()
    while True:
        reply = await stub.ListJobs(request)
        calls += 1
        if any(j.job_no.endswith("d000000000") for j in reply.jobs):
            return calls, (time.perf_counter() - began) * 1000
        assert reply.next_page_token, "the rare label's job was never listed"
        request.page_token = reply.next_page_token


Figures = dict[int, dict[str, Figure]]  # size -> filter -> figure
Walks = dict[int, tuple[int, float]]  # size -> (calls, ms) to reach the rare label's job


async def one_database(kind: str, sizes: list[int], calls: int, workdir: Path) -> tuple[Figures, Walks]:
    name = f"jobwire_bench_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(MYSQL + "/") if kind == "mysql" else None
    if admin is not None:
        with admin.begin() as conn:
            conn.execute(sa.text(f"CREATE DATABASE {name} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"))
    url = f"{MYSQL}/{name}" if kind == "mysql" else f"sqlite:///{workdir / (name + '.db')}"
    rt, channel = await start(url)
    engine = sa.create_engine(url)
    try:
        stub = job_pb2_grpc.JobServiceStub(channel)
        await templates(stub)
        found, walks = {}, {}
        for size in sizes:
            fill(engine, size)
            found[size] = await measure(stub, calls)
            walks[size] = await walk_to_rare(stub)
            log(f"{kind} {size}: " + ", ".join(f"{k} p50 {v[0]:.1f} ms" for k, v in found[size].items()))
        return found, walks
    finally:
        engine.dispose()
        await channel.close()
        await rt.stop(grace=1.0)
        if admin is not None:
            with admin.begin() as conn:
                conn.execute(sa.text(f"DROP DATABASE IF EXISTS {name}"))
            admin.dispose()


def report(results: dict[str, tuple[Figures, Walks]]) -> str:
    lines = ["| database | jobs | filter | p50 ms | p99 ms | on the page |", "|---|---:|---|---:|---:|---:|"]
    ratios, walked = [], []
    for kind, (by_size, walks) in results.items():
        for size, by_filter in by_size.items():
            for f, (p50, p99, n) in by_filter.items():
                lines.append(f"| {kind} | {size:,} | {f} | {p50:.1f} | {p99:.1f} | {n} |")
            calls, ms = walks[size]
            walked.append(f"- {kind}, {size:,} jobs: the rare label's job listed after {calls} call(s), {ms:.1f} ms")
        small, large = min(by_size), max(by_size)
        for f in FILTERS:
            ratios.append(f"- {kind}, {f}: p50 at {large:,} / p50 at {small:,} = "
                          f"{by_size[large][f][0] / by_size[small][f][0]:.2f}x")  # fmt: skip
    return "\n".join([*lines, "", *ratios, "", *walked])


async def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    sizes = sorted(int(s) for s in args.sizes.split(","))
    results = {}
    with tempfile.TemporaryDirectory() as workdir:
        for kind in args.databases.split(","):
            results[kind] = await one_database(kind, sizes, args.calls, Path(workdir))
    print(report(results))


if __name__ == "__main__":
    asyncio.run(main())
