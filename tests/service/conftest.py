"""Real gRPC servers on port 0 over real databases (SQLite and MariaDB), plus stubs."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc
import pytest

from jobwire.jobapi.app import add_jobapi
from jobwire.rpc.config import Settings
from jobwire.serving import Runtime, open_runtime
from jobwire.v1 import admin_pb2_grpc, job_pb2_grpc, worker_pb2_grpc
from jobwire.worker.server.app import add_worker_service


@dataclass
class Served:
    """A running all-in-one server and stubs on one aio channel."""

    runtime: Runtime
    target: str
    channel: grpc.aio.Channel
    jobs: job_pb2_grpc.JobServiceStub
    workers: worker_pb2_grpc.WorkerServiceStub
    admin: admin_pb2_grpc.AdminServiceStub

    @property
    def is_mysql(self) -> bool:
        return self.runtime.store.db.is_mysql


async def start_server(database_url: str, **settings: object) -> Served:
    config = Settings(database_url=database_url, listen="127.0.0.1:0", **settings)  # type: ignore[arg-type]
    rt = open_runtime(config)
    add_jobapi(rt)
    add_worker_service(rt)
    port = await rt.host.start()
    target = f"127.0.0.1:{port}"
    channel = grpc.aio.insecure_channel(target)
    return Served(
        runtime=rt,
        target=target,
        channel=channel,
        jobs=job_pb2_grpc.JobServiceStub(channel),
        workers=worker_pb2_grpc.WorkerServiceStub(channel),
        admin=admin_pb2_grpc.AdminServiceStub(channel),
    )


@pytest.fixture
async def served(database_url: str) -> AsyncIterator[Served]:
    """One server per test over a fresh database of each kind."""
    s = await start_server(database_url)
    try:
        yield s
    finally:
        await s.channel.close()
        await s.runtime.stop(grace=1.0)
