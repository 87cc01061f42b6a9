"""Wiring WorkerService into a server process."""

from __future__ import annotations

from jobwire.runtime.parts import Runtime
from jobwire.v1 import worker_pb2, worker_pb2_grpc
from jobwire.worker.server.leasing import Leasing
from jobwire.worker.server.result_uploads import Results
from jobwire.worker.server.runnable import RunnableWatcher
from jobwire.worker.server.servicer import WorkerServicer


def add_worker_service(rt: Runtime) -> None:
    """WorkerService and its runnable-work watcher (call inside the running loop)."""
    RunnableWatcher(rt.tail, rt.wakeup, rt.store.now)
    leasing = Leasing(
        rt.store, rt.commits, rt.wakeup, blocking=rt.blocking, metrics=rt.host.metrics, tenants=rt.host.tenants
    )
    kept = Results(
        rt.store, rt.blocking, rt.results, leasing,
        max_inline=rt.settings.max_inline_result_bytes, max_bytes=rt.settings.max_result_bytes,
    )  # fmt: skip
    servicer = WorkerServicer(leasing, rt.settings, kept, rt.transfers, rt.host.metrics)
    name = worker_pb2.DESCRIPTOR.services_by_name["WorkerService"].full_name
    rt.host.add_servicer(worker_pb2_grpc.add_WorkerServiceServicer_to_server, servicer, name)
