"""Wiring JobService, ScheduleService, AdminService and google.longrunning.Operations into a server process."""

from __future__ import annotations

from datetime import timedelta

from jobwire.jobapi import firing
from jobwire.jobapi.admin_servicer import AdminServicer
from jobwire.jobapi.feed import ChangeFeed
from jobwire.jobapi.job_servicer import JobServicer
from jobwire.jobapi.jobs import Jobs
from jobwire.jobapi.operations_servicer import OperationsServicer
from jobwire.jobapi.result_downloads import ResultReader
from jobwire.jobapi.schedule_servicer import ScheduleServicer
from jobwire.jobapi.schedules import Schedules
from jobwire.jobapi.watch import StreamRegistry, Watches
from jobwire.rpc import operations
from jobwire.runtime.housekeeping import load_deleter
from jobwire.runtime.parts import Runtime
from jobwire.v1 import admin_pb2, admin_pb2_grpc, job_pb2, job_pb2_grpc, schedule_pb2, schedule_pb2_grpc


def add_jobapi(rt: Runtime) -> None:
    no_worker_after = timedelta(seconds=rt.settings.no_worker_after_seconds)
    deleter = load_deleter(rt.settings.artifact_deleter)
    gone_after = timedelta(seconds=rt.settings.lease_seconds + rt.settings.stall_grace)
    jobs = Jobs(
        rt.store, rt.blocking, rt.commits, rt.wakeup,
        no_worker_after=no_worker_after, worker_gone_after=gone_after,
        list_scan_rows=rt.settings.list_scan_rows, deleter=deleter, news=rt.news,
    )  # fmt: skip
    watches = add_watching(rt, no_worker_after)
    rt.host.add_servicer(
        job_pb2_grpc.add_JobServiceServicer_to_server,
        JobServicer(jobs, watches, rt.settings, ResultReader(rt.results), rt.transfers),
        job_pb2.DESCRIPTOR.services_by_name["JobService"].full_name,
    )
    rt.host.add_servicer(
        schedule_pb2_grpc.add_ScheduleServiceServicer_to_server,
        ScheduleServicer(
            Schedules(rt.store, rt.blocking, max_per_tenant=rt.settings.max_schedules_per_tenant), rt.settings
        ),
        schedule_pb2.DESCRIPTOR.services_by_name["ScheduleService"].full_name,
    )
    schedules = firing.schedule_loop(jobs, rt.settings, rt.host.metrics)
    if schedules is not None:
        rt.lead("schedules", schedules.run)
    rt.host.add_servicer(
        operations.add_OperationsServicer_to_server,
        OperationsServicer(jobs, watches),
        operations.SERVICE,
    )
    rt.host.add_servicer(
        admin_pb2_grpc.add_AdminServiceServicer_to_server,
        AdminServicer(jobs),
        admin_pb2.DESCRIPTOR.services_by_name["AdminService"].full_name,
    )


def add_watching(rt: Runtime, no_worker_after: timedelta) -> Watches:
    """The streams' view of the process's event tail, and their registry."""
    feed = ChangeFeed(rt.tail, rt.store, rt.blocking, no_worker_after=no_worker_after)
    registry = StreamRegistry(
        rt.settings.max_streams, max_watched_jobs=rt.settings.max_watched_jobs, tenants=rt.host.tenants
    )
    rt.host.add_stop_hook(registry.stop)  # streams end UNAVAILABLE before the server drains
    return Watches(feed, rt.store, rt.blocking, registry)
