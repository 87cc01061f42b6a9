"""A real jobwire server on port 0, served by an event loop in a thread, and blocking stubs to it.

Hypothesis drives blocking tests; the server is the same one every service test runs
(tests/served.py), only on a loop of its own so a blocking client can call it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

import grpc
import sqlalchemy as sa
from served import Served, start_server

from jobwire.db.tables import (
    artifact,
    job,
    job_day_counter,
    job_event,
    queue_limits,
    schedule,
    schedule_tenant,
    worker,
)
from jobwire.v1 import admin_pb2_grpc, job_pb2_grpc, schedule_pb2_grpc, worker_pb2_grpc

T = TypeVar("T")


class LiveServer:
    def __init__(self, database_url: str, **settings: object) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="live-server", daemon=True)
        self._thread.start()
        self.served: Served = self.run(start_server(database_url, **settings))
        self.channel = grpc.insecure_channel(self.served.target)
        self.jobs = job_pb2_grpc.JobServiceStub(self.channel)
        self.workers = worker_pb2_grpc.WorkerServiceStub(self.channel)
        self.admin = admin_pb2_grpc.AdminServiceStub(self.channel)
        self.schedules = schedule_pb2_grpc.ScheduleServiceStub(self.channel)
        self._engine = self.served.runtime.store.db.engine

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout)

    def rows(self) -> dict[str, int]:
        """Row counts of every table and the sum of job versions: equal means nothing was written."""
        counts = sa.select(
            *(sa.select(sa.func.count()).select_from(t).scalar_subquery().label(t.name)
              for t in (job, job_event, artifact, worker, job_day_counter, schedule, schedule_tenant, queue_limits)),
            sa.select(sa.func.coalesce(sa.func.sum(job.c.version), 0)).scalar_subquery().label("versions"),
        )  # fmt: skip
        with self._engine.connect() as conn:
            return {k: int(v) for k, v in conn.execute(counts).mappings().one().items()}

    def close(self) -> None:
        self.channel.close()
        self.run(self.served.channel.close())
        self.run(self.served.runtime.stop(grace=1.0))
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
