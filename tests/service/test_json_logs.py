"""JSON log lines of a real server and a real SDK worker, on SQLite: each line parses,
names the job of a job call, says why an attempt failed, and never holds a payload or a token."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from served import Served
from service_support import get, run_worker_until, submit

from jobwire.observe.logs import JsonLines
from jobwire.v1 import job_pb2, worker_pb2, worker_pb2_grpc
from jobwire.worker.sdk import Handlers, JobContext, Worker, WorkerConfig

pytestmark = pytest.mark.timeout(60)

PAYLOAD = b"payload-c0ffee-do-not-log"
BEARER = "bearer-5ecret-do-not-log"
handlers = Handlers()


@handlers.job("doomed")
def doomed(ctx: JobContext) -> None:
    # A careless handler hands its payload to the log: the JSON lines must not take it.
    logging.getLogger("examples.doomed").info("working on %d bytes", len(ctx.payload), extra={"payload": ctx.payload})
    raise ValueError("the input has no header row")


class RecordingStub:
    """The real WorkerService stub, keeping every worker token it was granted."""

    def __init__(self, stub: worker_pb2_grpc.WorkerServiceStub) -> None:
        self._stub = stub
        self.tokens: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stub, name)

    async def Claim(self, request: worker_pb2.ClaimRequest, *, timeout: float | None = None) -> Any:
        reply = await self._stub.Claim(request, timeout=timeout)
        self.tokens += [lease.worker_token for lease in reply.leases]
        return reply


@pytest.fixture
def json_log() -> Iterator[io.StringIO]:
    """Every record of this process at DEBUG, as the JSON lines JOBWIRE_LOG_FORMAT=json writes."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonLines())
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    yield out
    root.removeHandler(handler)
    root.setLevel(level)


async def test_json_lines_name_the_job_say_why_it_failed_and_hold_no_secret(
    serve: Any, tmp_path: Path, json_log: io.StringIO
) -> None:
    s: Served = await serve()
    # One attempt: the handler's bug is retryable, and one failure is the line to look at.
    job = await submit(s, "doomed", payload=PAYLOAD, retry_policy=job_pb2.RetryPolicy(max_attempts=1))
    await get(s, job.job_no)
    stub = RecordingStub(worker_pb2_grpc.WorkerServiceStub(s.channel))
    config = WorkerConfig(
        target=s.target, worker_id="w-json", concurrency=1, claim_wait=0.2, grace_period=2, token=BEARER,
        tmp_root=tmp_path / "tmp",
    )  # fmt: skip
    await run_worker_until(s, Worker(config, handlers, stub=stub), job.job_no, job_pb2.Job.FAILED)

    text = json_log.getvalue()
    lines = [json.loads(line) for line in text.splitlines()]
    assert lines and all({"time", "level", "message", "logger"} <= line.keys() for line in lines)

    def calls(method: str) -> list[dict[str, Any]]:
        return [x for x in lines if x["logger"] == "jobwire.rpc.calls" and x.get("method", "").endswith(method)]

    for method in ("JobService/Submit", "JobService/Get", "WorkerService/Fail"):  # Get: polled by `when` too
        named = {(x["job_no"], x["code"], x["tenant"]) for x in calls(method)}
        assert named == {(job.job_no, "OK", "default")}, method
    assert not [x for x in calls("WorkerService/Claim") if "job_no" in x]  # no call inherits another's job
    failed = [x for x in lines if x.get("error_category")]
    assert [(x["job_no"], x["worker_id"], x["error_category"]) for x in failed] == [
        (job.job_no, "w-json", "PROCESSING_ERROR")
    ]
    assert "ValueError: the input has no header row" in failed[0]["message"]
    (handler_line,) = [x for x in lines if x["logger"] == "examples.doomed"]
    assert (handler_line["job_no"], handler_line["worker_id"]) == (job.job_no, "w-json")

    assert stub.tokens, "the worker claimed nothing"
    for secret in (PAYLOAD.decode(), BEARER, *stub.tokens):
        assert secret not in text
