"""A worker the server will not let in says why and stops; a server that is away is waited for."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace

import grpc
import pytest
from sdk_support import FakeWorkerService, make_lease, rpc_error, unavailable

from jobwire.worker.sdk import Handlers, JobContext, Result, Worker, WorkerConfig, WorkerRefused
from jobwire.worker.sdk import _frames as frames
from jobwire.worker.sdk._rpc import describe

handlers = Handlers()


@handlers.job("echo")
def echo(ctx: JobContext) -> Result:
    return Result.from_bytes(ctx.payload)


def unauthenticated() -> grpc.aio.AioRpcError:
    return rpc_error(grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED", "a valid bearer token is required")


def denied(details: str) -> grpc.aio.AioRpcError:
    return rpc_error(grpc.StatusCode.PERMISSION_DENIED, "PERMISSION_DENIED", details)


async def refused_by(fake: FakeWorkerService, config: WorkerConfig) -> str:
    with pytest.raises(WorkerRefused) as refused:
        await asyncio.wait_for(Worker(config, handlers, stub=fake).run(), 5)
    assert len(fake.of("Claim")) == 1  # at once: no backoff, no second try
    return str(refused.value)


async def test_a_wrong_token_stops_the_worker_naming_the_token_settings(
    config: WorkerConfig, fake: FakeWorkerService
) -> None:
    fake.fail_next("Claim", unauthenticated())
    said = await refused_by(fake, replace(config, token="wrong"))
    assert "does not know this worker's token (UNAUTHENTICATED): check" in said  # the code once, the fix named
    assert "JOBWIRE_TOKEN, or --token-file / JOBWIRE_TOKEN_FILE" in said


async def test_no_token_at_all_says_to_set_one(config: WorkerConfig, fake: FakeWorkerService) -> None:
    fake.fail_next("Claim", unauthenticated())
    said = await refused_by(fake, replace(config, token=None))
    assert said.startswith("the server needs a token and none was given") and "set JOBWIRE_TOKEN" in said


async def test_a_token_without_the_role_or_the_queues_names_them(config: WorkerConfig, fake: FakeWorkerService) -> None:
    fake.fail_next("Claim", denied("this token may not use queue 'video'"))
    said = await refused_by(fake, replace(config, token="t", queues=("video",)))
    assert "this token may not use queue 'video'" in said  # the server's own words
    assert 'role "worker"' in said and "(video, set by --queue)" in said


async def test_an_unavailable_server_is_waited_for(config: WorkerConfig, fake: FakeWorkerService) -> None:
    fake.fail_next("Claim", unavailable(), unavailable())
    fake.pending.append(make_lease("PT-1", "echo", b"hi"))
    worker = Worker(config, handlers, stub=fake)
    task = asyncio.create_task(worker.run())
    await fake.wait_for("Complete", timeout=10)
    worker.shutdown()
    assert await asyncio.wait_for(task, 5) == 0


async def test_a_refusal_after_the_token_was_let_in_is_waited_out(
    config: WorkerConfig, fake: FakeWorkerService
) -> None:
    # Claims worked, then an auth file reload went wrong: jobs may be running, and an
    # operator is at work; the worker backs off as for an outage and does not quit.
    worker = Worker(config, handlers, stub=fake)
    task = asyncio.create_task(worker.run())
    await fake.wait_for("Claim")
    fake.fail_next("Claim", unauthenticated())
    fake.pending.append(make_lease("PT-1", "echo", b"hi"))
    await fake.wait_for("Complete", timeout=10)
    assert not task.done()
    worker.shutdown()
    assert await asyncio.wait_for(task, 5) == 0


@pytest.mark.parametrize("session_said_it", [False, True])
async def test_a_claim_failure_is_warned_once_not_again_for_a_session_that_said_it(
    config: WorkerConfig, fake: FakeWorkerService, caplog: pytest.LogCaptureFixture, session_said_it: bool
) -> None:
    # A session down logs its own warning each time it cannot open; the claims it cut short
    # would repeat it (two warnings a retry): they go to DEBUG. Any other failure is warned.
    failure = frames.session_down("the worker's session is down: refused") if session_said_it else unavailable()
    fake.fail_next("Claim", failure)
    fake.pending.append(make_lease("PT-1", "echo", b"hi"))
    worker = Worker(config, handlers, stub=fake)
    task = asyncio.create_task(worker.run())
    with caplog.at_level(logging.DEBUG, logger="jobwire.worker"):
        await fake.wait_for("Complete", timeout=10)
    worker.shutdown()
    assert await asyncio.wait_for(task, 5) == 0
    said = [r for r in caplog.records if r.getMessage().startswith("claim failed")]
    assert [r.levelno for r in said] == [logging.DEBUG if session_said_it else logging.WARNING]


def test_a_reason_that_repeats_the_code_is_said_once() -> None:
    assert describe(unauthenticated()) == "UNAUTHENTICATED: a valid bearer token is required"
    assert describe(denied("no")) == "PERMISSION_DENIED: no"
    lost = rpc_error(grpc.StatusCode.FAILED_PRECONDITION, "WORKER_LEASE_LOST", "gone")
    assert describe(lost) == "FAILED_PRECONDITION WORKER_LEASE_LOST: gone"
