"""Long-lived streams done right: a per-process cap, and UNAVAILABLE on shutdown."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
from served import start_server
from service_support import rpc_error, submit
from watch_support import next_job, watch

from jobwire.v1 import job_pb2


async def test_streams_past_the_cap_get_resource_exhausted(tmp_path: Path) -> None:
    served = await start_server(f"sqlite:///{tmp_path / 'jobwire.db'}", max_streams=2)
    try:
        job = await submit(served)
        first, second = watch(served, job.job_no), served.jobs.WatchJobs(job_pb2.WatchJobsRequest(job_nos=[job.job_no]))
        assert (await next_job(first)) is not None and (await next_job(second)) is not None
        assert await rpc_error(watch(served, job.job_no).read()) == (
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "TOO_MANY_STREAMS",
        )
        first.cancel()  # a stream that ends frees its place
        for _ in range(50):
            third = watch(served, job.job_no)
            try:
                assert await next_job(third) is not None
                break
            except grpc.aio.AioRpcError as exc:
                assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                await asyncio.sleep(0.05)
        else:
            raise AssertionError("the cancelled stream never freed its place")
        third.cancel()
        second.cancel()
    finally:
        await served.channel.close()
        await served.runtime.stop(grace=1.0)


async def test_shutdown_ends_streams_with_unavailable_at_once(tmp_path: Path) -> None:
    served = await start_server(f"sqlite:///{tmp_path / 'jobwire.db'}")
    job = await submit(served)
    status = watch(served, job.job_no)
    many = served.jobs.WatchJobs(job_pb2.WatchJobsRequest(owner="nobody"))
    assert await next_job(status) is not None
    stopping = asyncio.create_task(served.runtime.stop(grace=30.0))
    try:
        for call in (status, many):
            # next_job gives up after STEP_TIMEOUT_S (10 s), well inside the 30 s grace: a
            # stream that waited to be cancelled at the grace's end fails here.
            code, reason = await rpc_error(next_job(call))
            assert (code, reason) == (grpc.StatusCode.UNAVAILABLE, "SERVER_STOPPING")
        await asyncio.wait_for(stopping, 10)
    finally:
        await served.channel.close()


def test_client_keepalive_is_one_the_server_accepts() -> None:
    """Long watches sit idle for hours: the client's pings keep NATs and proxies open, and
    the server must accept them, or it answers GOAWAY too_many_pings and drops every stream."""
    from jobwire.client.channel import KEEPALIVE_OPTIONS
    from jobwire.rpc.server import SERVER_OPTIONS

    client, server = dict(KEEPALIVE_OPTIONS), dict(SERVER_OPTIONS)
    assert client["grpc.keepalive_time_ms"] >= server["grpc.http2.min_ping_interval_without_data_ms"]
    assert client["grpc.keepalive_permit_without_calls"] == server["grpc.keepalive_permit_without_calls"] == 1
    # The server notices a dead peer in seconds (a worker's Session then ends: its leases go
    # to the disconnect grace), and lets clients ping every few seconds to notice it dead.
    # (grpc-core waits ping_timeout_ms for the answer, 60 s unless set, whatever keepalive_timeout_ms says)
    assert server["grpc.keepalive_time_ms"] + server["grpc.http2.ping_timeout_ms"] <= 30_000
    assert server["grpc.keepalive_timeout_ms"] == server["grpc.http2.ping_timeout_ms"]
    assert server["grpc.http2.max_pings_without_data"] == 0  # an idle connection is probed too
    assert server["grpc.http2.min_ping_interval_without_data_ms"] <= 3_000
    # A burst of reconnecting watchers must not be shed by C-core's pending-call limit.
    assert server["grpc.server.max_pending_requests"] >= 10_000
