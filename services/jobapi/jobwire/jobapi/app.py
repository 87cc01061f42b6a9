"""Wiring JobService and AdminService into a server process."""

from __future__ import annotations

from jobwire.jobapi.admin_servicer import AdminServicer
from jobwire.jobapi.job_servicer import JobServicer
from jobwire.jobapi.jobs import Jobs
from jobwire.serving import Runtime
from jobwire.v1 import admin_pb2, admin_pb2_grpc, job_pb2, job_pb2_grpc


def add_jobapi(rt: Runtime) -> None:
    jobs = Jobs(rt.store, rt.blocking, rt.wakeup)
    job_pb2_grpc.add_JobServiceServicer_to_server(JobServicer(jobs), rt.host.server)
    admin_pb2_grpc.add_AdminServiceServicer_to_server(AdminServicer(jobs), rt.host.server)
    rt.host.add_service(job_pb2.DESCRIPTOR.services_by_name["JobService"].full_name)
    rt.host.add_service(admin_pb2.DESCRIPTOR.services_by_name["AdminService"].full_name)
