"""What every test folder shares: an all-in-one server on port 0, and bounded polling.

It lives beside tests/conftest.py, whose folder pytest puts on sys.path, so unit,
service, e2e and fault tests import the one copy (fixtures of one folder are not
another's, which is how copies of this had grown).

Every server started here keeps its time on a clock the test can move (`Served.clock`,
tests/clocks.py): a lease, a deadline or a run_after is passed by `served.clock.advance`,
and a round of housekeeping that sees it by `housekeeping_round`, never by sleeping.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import grpc
from clocks import MovableClock, movable_clock
from google.longrunning import operations_pb2_grpc

from jobwire.db.retention import keep_files
from jobwire.jobapi.app import add_jobapi
from jobwire.runtime.housekeeping import Housekeeping
from jobwire.runtime.parts import Runtime, open_runtime
from jobwire.runtime.settings import Settings
from jobwire.v1 import admin_pb2_grpc, job_pb2_grpc, schedule_pb2_grpc, worker_pb2_grpc
from jobwire.worker.server.app import add_worker_service

T = TypeVar("T")


@dataclass
class Served:
    """A running all-in-one server and stubs on one aio channel."""

    runtime: Runtime
    target: str
    channel: grpc.aio.Channel
    jobs: job_pb2_grpc.JobServiceStub
    workers: worker_pb2_grpc.WorkerServiceStub
    admin: admin_pb2_grpc.AdminServiceStub
    operations: operations_pb2_grpc.OperationsStub  # google.longrunning over the same jobs
    schedules: schedule_pb2_grpc.ScheduleServiceStub

    @property
    def is_mysql(self) -> bool:
        return self.runtime.store.db.is_mysql

    @property
    def clock(self) -> MovableClock:
        """The server's time, to move (installed by `start_server`)."""
        clock = self.runtime.store.db.clock
        assert isinstance(clock, MovableClock), "a server started by start_server"
        return clock

    @classmethod
    def on(cls, runtime: Runtime, target: str, channel: grpc.aio.Channel) -> Served:
        """The server's stubs over `channel` (another channel to the same server, say)."""
        return cls(
            runtime=runtime,
            target=target,
            channel=channel,
            jobs=job_pb2_grpc.JobServiceStub(channel),
            workers=worker_pb2_grpc.WorkerServiceStub(channel),
            admin=admin_pb2_grpc.AdminServiceStub(channel),
            operations=operations_pb2_grpc.OperationsStub(channel),
            schedules=schedule_pb2_grpc.ScheduleServiceStub(channel),
        )

    async def close(self) -> None:
        await self.channel.close()
        await self.runtime.stop(grace=1.0)


async def start_server(database_url: str, **settings: object) -> Served:
    """An all-in-one server on 127.0.0.1, port 0 (or `listen=`), over `database_url`, with Settings overrides."""
    config = Settings(**{"database_url": database_url, "listen": "127.0.0.1:0", **settings})  # type: ignore[arg-type]
    rt = open_runtime(config)
    movable_clock(rt.store)  # before anything reads the time: the loops start at the first await
    add_jobapi(rt)
    add_worker_service(rt)
    port = await rt.host.start()
    target = f"{config.listen.rpartition(':')[0]}:{port}"
    return Served.on(rt, target, grpc.aio.insecure_channel(target))


async def housekeeping_round(served: Served) -> None:
    """One whole round of the server's housekeeping (the reaper, the timeout and dependency
    sweeps, retention) now, by the server's clock: start the server with
    `reaper_interval_seconds=0` so that no round of its own runs besides."""
    rt = served.runtime
    keeper = Housekeeping(rt.store, rt.blocking, rt.settings, deleter=keep_files, metrics=rt.host.metrics.jobs)
    await keeper.tick()


async def eventually(probe: Callable[[], Awaitable[T | None]], timeout: float = 10.0, what: str = "") -> T:
    """Poll `probe` until it returns something truthy, or fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = await probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {what}")
        await asyncio.sleep(0.05)
