"""Where a job's statements go: every SQL statement the server sends per job life, by shape.

throughput.py counts statements per job; this says which ones, so a change that adds one
to the hot path shows by name (the dependents lookup that every ending once made did).
It runs the server in this process on a fresh MariaDB database, wraps PyMySQL's and
asyncmy's command function to record each statement with its literals blanked, drives
`--jobs` job lives (Submit, Claim, 3 ReportStage, Complete; raw aio stubs, as e2e.py) from
`--clients` closed-loop clients, and prints statements per job, most frequent first.

Counts, not times: the figure is the same on a busy machine. With several clients group
commit shares statements among concurrent calls, so the count per job falls.

Usage: python bench/statements.py [--jobs 400] [--clients 8] [--keep]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import secrets
from collections import Counter
from typing import Any

import asyncmy.connection
import grpc
import pymysql.connections
from e2e import REPORTS, SHA
from google.protobuf.duration_pb2 import Duration
from measure import connect, drop_database
from pymysql.constants import COMMAND

from jobwire.jobapi.app import add_jobapi
from jobwire.runtime.parts import open_runtime
from jobwire.runtime.settings import Settings
from jobwire.v1 import job_pb2, job_pb2_grpc, worker_pb2, worker_pb2_grpc
from jobwire.worker.server.app import add_worker_service

JOB_TYPE = "bench.noop"
WARM_UP_JOBS = 5  # pool connections, prepared caches and the day's job numbers first
SHOWN = 120  # characters of each statement's shape


class Recorder:
    """Statement shapes sent while `on`, counted by (driver, shape)."""

    def __init__(self) -> None:
        self.on = False
        self.shapes: Counter[str] = Counter()

    def record(self, driver: str, command: int, sql: Any) -> None:
        if self.on and command == COMMAND.COM_QUERY:
            self.shapes[f"{driver} {shape(sql)}"] += 1

    def install(self) -> None:
        sync, aio = pymysql.connections.Connection._execute_command, asyncmy.connection.Connection._execute_command

        def reads(conn: Any, command: int, sql: Any) -> Any:
            self.record("read ", command, sql)
            return sync(conn, command, sql)

        async def writes(conn: Any, command: int, sql: Any) -> Any:
            self.record("write", command, sql)
            return await aio(conn, command, sql)

        pymysql.connections.Connection._execute_command = reads  # type: ignore[method-assign]
        asyncmy.connection.Connection._execute_command = writes


def shape(sql: Any) -> str:
    """The statement with literals and numbers blanked and value lists folded."""
    text = sql.decode(errors="replace") if isinstance(sql, bytes | bytearray) else str(sql)
    text = re.sub(r"'(?:[^'\\]|\\.)*'", "?", text)
    text = re.sub(r"\b\d+(?:\.\d+)?\b", "?", text)
    text = re.sub(r"\(\?(?:, ?\?)*\)(?:, ?\(\?(?:, ?\?)*\))+", "(?...),...", text)
    return re.sub(r"\s+", " ", text)[:SHOWN]


async def life(jobs: job_pb2_grpc.JobServiceStub, workers: worker_pb2_grpc.WorkerServiceStub, n: int) -> None:
    """One job's life; a claim may take another client's job, which this client then finishes."""
    await jobs.Submit(job_pb2.SubmitRequest(job_type=JOB_TYPE, payload=b"{}", owner=f"bench-{n}"))
    claim = worker_pb2.ClaimRequest(
        worker_id=f"bench-{n}", job_types=[worker_pb2.JobTypeSpec(name=JOB_TYPE)], max_jobs=1, wait=Duration(seconds=2)
    )
    for lease in (await workers.Claim(claim)).leases:
        for stage, processed, total in REPORTS:
            report = worker_pb2.ReportStageRequest(
                job_no=lease.job_no, worker_token=lease.worker_token, stage=stage,
                processed_units=processed, total_units=total,
            )  # fmt: skip
            await workers.ReportStage(report)
        artifact = job_pb2.Artifact(uri=f"file:///bench/{lease.job_no}", sha256=SHA, content_type="text/plain")
        await workers.Complete(
            worker_pb2.CompleteRequest(job_no=lease.job_no, worker_token=lease.worker_token, result=artifact)
        )


async def measure(database: str, jobs: int, clients: int, recorder: Recorder) -> None:
    rt = open_runtime(Settings(database_url=f"mysql+pymysql://root@127.0.0.1:3306/{database}", listen="127.0.0.1:0"))
    add_jobapi(rt)
    add_worker_service(rt)
    port = await rt.host.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    stubs = job_pb2_grpc.JobServiceStub(channel), worker_pb2_grpc.WorkerServiceStub(channel)
    try:
        for n in range(WARM_UP_JOBS):
            await life(*stubs, n)
        recorder.on = True

        async def client(n: int) -> None:
            for _ in range(jobs // clients):
                await life(*stubs, n)

        await asyncio.gather(*(client(n) for n in range(clients)))
        recorder.on = False
    finally:
        await channel.close()
        await rt.stop(grace=1.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=400)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--keep", action="store_true", help="keep the database")
    args = parser.parse_args()
    database = f"jwbench_statements_{secrets.token_hex(3)}"
    conn = connect()
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{database}`")
    conn.close()
    recorder = Recorder()
    recorder.install()
    jobs = args.jobs // args.clients * args.clients
    try:
        asyncio.run(measure(database, jobs, args.clients, recorder))
    finally:
        if not args.keep:
            drop_database(database)
    print(f"{sum(recorder.shapes.values()) / jobs:.2f} statements per job life ({jobs} jobs, {args.clients} clients)")
    for statement, count in recorder.shapes.most_common():
        print(f"{count / jobs:7.2f}  {statement}")


if __name__ == "__main__":
    main()
