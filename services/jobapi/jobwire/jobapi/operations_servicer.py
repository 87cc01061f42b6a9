"""google.longrunning.Operations over jobs: a generic LRO client can get, list, wait on,
cancel and delete jobwire jobs. Decode, validate, call the JobService use cases, encode.

Each operation is a job (`operations/<job_no>`, see jobwire.rpc.operations); tenancy and
roles are JobService's (a client token; rpc/auth maps the service to that role).
"""

from __future__ import annotations

import asyncio
from contextlib import aclosing

import grpc
from google.longrunning import operations_pb2, operations_pb2_grpc
from google.protobuf import empty_pb2

from jobwire.domain import limits
from jobwire.domain.commands import JobFilter
from jobwire.domain.errors import InvalidArgument
from jobwire.jobapi.jobs import Jobs
from jobwire.jobapi.watch import Watches
from jobwire.rpc import auth, convert
from jobwire.rpc import operations as ops
from jobwire.v1 import job_pb2

MAX_WAIT_S = 60.0  # WaitOperation's default and its ceiling: a wait is one held stream, not a session
DEADLINE_MARGIN_S = 0.5  # answer this long before the caller's deadline, so the answer arrives


def wait_seconds(request: operations_pb2.WaitOperationRequest, time_remaining: float | None) -> float:
    """How long WaitOperation may wait: `timeout` (unset: the default), capped, within the deadline."""
    wanted = MAX_WAIT_S
    if request.HasField("timeout"):
        timeout = convert.seconds(request.timeout, "timeout")
        if timeout < 0:
            raise InvalidArgument("timeout", "must be a non-negative duration")
        wanted = min(timeout, MAX_WAIT_S)
    if time_remaining is not None:
        wanted = min(wanted, max(time_remaining - DEADLINE_MARGIN_S, 0.0))
    return wanted


class OperationsServicer(operations_pb2_grpc.OperationsServicer):  # type: ignore[misc]
    def __init__(self, jobs: Jobs, watches: Watches) -> None:
        self.jobs = jobs
        self.watches = watches

    async def GetOperation(
        self, request: operations_pb2.GetOperationRequest, context: grpc.aio.ServicerContext
    ) -> operations_pb2.Operation:
        job = await self.jobs.get(auth.current(), ops.job_no_of(request.name))
        return ops.operation(convert.job_to_proto(job))

    async def ListOperations(
        self, request: operations_pb2.ListOperationsRequest, context: grpc.aio.ServicerContext
    ) -> operations_pb2.ListOperationsResponse:
        if request.name not in ("", ops.COLLECTION):
            raise InvalidArgument("name", f'must be empty or "{ops.COLLECTION}"')
        if request.filter:
            raise InvalidArgument("filter", "is not supported: leave it empty")
        where = JobFilter(scope=auth.current().scope)
        jobs, token = await self.jobs.list_jobs(where, limits.page_size(request.page_size), request.page_token)
        return operations_pb2.ListOperationsResponse(
            operations=[ops.operation(convert.job_to_proto(job)) for job in jobs], next_page_token=token
        )

    async def WaitOperation(
        self, request: operations_pb2.WaitOperationRequest, context: grpc.aio.ServicerContext
    ) -> operations_pb2.Operation:
        job_no = ops.job_no_of(request.name)
        seconds = wait_seconds(request, context.time_remaining())
        await self.jobs.check_visible(auth.current(), [job_no])
        return ops.operation(await self._latest_within(auth.current().tenant, job_no, seconds))

    async def _latest_within(self, tenant: str, job_no: str, seconds: float) -> job_pb2.Job:
        """The job as it is when it ends or `seconds` pass, from WatchStatus's change feed."""
        latest: job_pb2.Job | None = None
        limit = asyncio.timeout(seconds)
        try:
            # aclosing: a timeout ends the stream at once, and its subscription with it
            async with limit, aclosing(self.watches.status(tenant, job_no, 0, "")) as updates:
                async for update in updates:
                    latest = update.job
        except TimeoutError:
            if not limit.expired():  # some other time limit (the store's): not ours to hide
                raise
        if latest is None:  # the time ran out before the stream's first message
            return convert.job_to_proto(await self.jobs.get(auth.current(), job_no))
        return latest

    async def CancelOperation(
        self, request: operations_pb2.CancelOperationRequest, context: grpc.aio.ServicerContext
    ) -> empty_pb2.Empty:
        await self.jobs.cancel(auth.current(), ops.job_no_of(request.name))
        return empty_pb2.Empty()

    async def DeleteOperation(
        self, request: operations_pb2.DeleteOperationRequest, context: grpc.aio.ServicerContext
    ) -> empty_pb2.Empty:
        await self.jobs.delete(auth.current(), ops.job_no_of(request.name))
        return empty_pb2.Empty()
