"""Wiring WorkerService into a server process."""

from __future__ import annotations

from jobwire.runtime.leadership import process_name
from jobwire.runtime.parts import Runtime
from jobwire.v1 import worker_pb2, worker_pb2_grpc
from jobwire.worker.server.disconnects import Disconnects
from jobwire.worker.server.leasing import Leasing
from jobwire.worker.server.result_uploads import Results
from jobwire.worker.server.runnable import RunnableWatcher
from jobwire.worker.server.servicer import WorkerServicer, decode_claim, lease_proto
from jobwire.worker.server.session_push import PushHub


def add_worker_service(rt: Runtime) -> None:
    """WorkerService, its runnable-work watcher and its Sessions' pushes (call inside the running loop)."""
    RunnableWatcher(rt.tail, rt.wakeup, rt.store.now)
    metrics = rt.host.metrics
    leasing = Leasing(
        rt.store, rt.commits, rt.wakeup, blocking=rt.blocking, metrics=metrics, tenants=rt.host.tenants,
        kinds_per_tenant=rt.settings.max_claim_kinds_per_tenant,
        kinds_kept_s=rt.settings.retention_worker_days * 86_400,
    )  # fmt: skip
    kept = Results(
        rt.store, rt.blocking, rt.results, leasing,
        max_inline=rt.settings.max_inline_result_bytes, max_bytes=rt.settings.max_result_bytes,
    )  # fmt: skip
    disconnects = Disconnects(
        rt.commits, now=rt.store.now, grace_s=rt.settings.session_grace_seconds, metrics=metrics, by=process_name()
    )
    rt.host.add_stop_hook(disconnects.stop)
    pushes = PushHub(
        rt.tail, leasing, disconnects, blocking=rt.blocking, metrics=metrics,
        decode=lambda request: decode_claim(request, rt.settings), encode=lease_proto,
    )  # fmt: skip
    servicer = WorkerServicer(leasing, rt.settings, kept, rt.transfers, metrics, pushes)
    name = worker_pb2.DESCRIPTOR.services_by_name["WorkerService"].full_name
    rt.host.add_servicer(worker_pb2_grpc.add_WorkerServiceServicer_to_server, servicer, name)
