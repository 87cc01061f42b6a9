"""GET /metrics (JOBWIRE_METRICS_LISTEN): RPC counts by method and final code, latency, open streams.

Scrapes go through urllib in a thread, as Prometheus would from outside: the server's own
event loop must keep serving gRPC while it answers HTTP.
"""

from __future__ import annotations

import asyncio
import re
import time
import urllib.error
import urllib.request
from typing import Any

import grpc
import pytest
from served import start_server
from service_support import LONG_WAIT_S, claim, rpc_error, stop_server, submit, woken
from watch_support import complete, next_job, read_to_end, watch

from jobwire.rpc.auth import Authenticator
from jobwire.rpc.handlers import Wrapping
from jobwire.rpc.metrics import BUCKETS, Metrics
from jobwire.v1 import job_pb2, worker_pb2

SUBMIT, GET, WATCH = "jobwire.v1.JobService/Submit", "jobwire.v1.JobService/Get", "jobwire.v1.JobService/WatchStatus"
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]
_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def _get(port: int, path: str, method: str = "GET") -> tuple[int, dict[str, str], str]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method)
    try:
        with urllib.request.urlopen(request, timeout=5) as reply:
            return reply.status, dict(reply.headers), reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read().decode()


def parse(text: str) -> Samples:
    samples: Samples = {}
    for line in text.splitlines():
        if line.startswith("#") or not line:
            continue
        match = _LINE.match(line)
        assert match, f"not a sample line: {line!r}"
        name, labels, value = match.groups()
        samples[name, frozenset(_LABEL.findall(labels or ""))] = float(value)
    return samples


async def scrape(served) -> Samples:  # type: ignore[no-untyped-def]
    status, headers, body = await asyncio.to_thread(_get, served.runtime.host.metrics_port, "/metrics")
    assert status == 200
    assert headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    return parse(body)


def sample(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


async def scrape_until(served, value: float, name: str, *, timeout: float = 10.0, **labels: str) -> Samples:  # type: ignore[no-untyped-def]
    """Scrape until series `name` with `labels` shows `value` (a missing series shows 0), or fail."""
    deadline = time.monotonic() + timeout
    while True:
        samples = await scrape(served)
        seen = sample(samples, name, **labels)
        if seen == value:
            return samples
        if time.monotonic() > deadline:
            raise AssertionError(f"{name}{labels} not {value} within {timeout}s: last scrape showed {seen}")
        await asyncio.sleep(0.05)


@pytest.fixture
async def metered(serve):  # type: ignore[no-untyped-def]
    return await serve(metrics_listen="127.0.0.1:0")


async def test_calls_counted_by_method_and_final_code(metered) -> None:  # type: ignore[no-untyped-def]
    assert metered.runtime.host.metrics_port
    for _ in range(2):
        await submit(metered)
    code, reason = await rpc_error(metered.jobs.Get(job_pb2.GetRequest(job_no="PT-20260101-999")))
    assert (code, reason) == (grpc.StatusCode.NOT_FOUND, "JOB_NOT_FOUND")

    samples = await scrape(metered)
    assert sample(samples, "jobwire_rpc_total", method=SUBMIT, code="OK") == 2
    # The error interceptor's status, as the caller saw it, not an exception escaping.
    assert sample(samples, "jobwire_rpc_total", method=GET, code="NOT_FOUND") == 1
    assert sample(samples, "jobwire_rpc_total", method=GET, code="OK") == 0
    assert sample(samples, "jobwire_rpc_seconds_count", method=SUBMIT) == 2
    assert sample(samples, "jobwire_rpc_seconds_count", method=GET) == 1
    assert sample(samples, "jobwire_rpc_seconds_sum", method=SUBMIT) > 0
    buckets = [sample(samples, "jobwire_rpc_seconds_bucket", method=SUBMIT, le=repr(b)) for b in BUCKETS]
    assert buckets == sorted(buckets)  # cumulative
    assert sample(samples, "jobwire_rpc_seconds_bucket", method=SUBMIT, le="+Inf") == 2


async def test_health_state_is_exposed(metered) -> None:  # type: ignore[no-untyped-def]
    samples = await scrape_until(metered, 1, "jobwire_up")
    assert sample(samples, "jobwire_database_up") == 1


async def test_stream_is_open_until_it_ends_then_counted(metered) -> None:  # type: ignore[no-untyped-def]
    job = await submit(metered)
    call = watch(metered, job.job_no)
    assert (await next_job(call)) is not None
    samples = await scrape(metered)
    assert sample(samples, "jobwire_streams_open", method=WATCH) == 1
    assert sample(samples, "jobwire_rpc_total", method=WATCH, code="OK") == 0  # counted when it ends

    (lease,) = await claim(metered, job.job_type)
    await complete(metered, lease)
    await read_to_end(call)
    samples = await scrape_until(metered, 1, "jobwire_rpc_total", method=WATCH, code="OK")
    assert sample(samples, "jobwire_streams_open", method=WATCH) == 0
    assert sample(samples, "jobwire_rpc_seconds_count", method=WATCH) == 1


async def test_stream_the_caller_leaves_is_counted_cancelled(metered) -> None:  # type: ignore[no-untyped-def]
    job = await submit(metered)
    call = watch(metered, job.job_no)
    assert (await next_job(call)) is not None
    assert sample(await scrape(metered), "jobwire_streams_open", method=WATCH) == 1
    call.cancel()
    samples = await scrape_until(metered, 0, "jobwire_streams_open", method=WATCH)
    assert sample(samples, "jobwire_rpc_total", method=WATCH, code="CANCELLED") == 1


async def test_a_waiting_claim_is_counted_until_it_returns(metered) -> None:  # type: ignore[no-untyped-def]
    status, _, body = await asyncio.to_thread(_get, metered.runtime.host.metrics_port, "/metrics")
    assert status == 200
    assert "# HELP jobwire_claims_waiting Claims waiting for work (long polls) in this server.\n" in body
    assert "# TYPE jobwire_claims_waiting gauge\n" in body
    assert sample(parse(body), "jobwire_claims_waiting") == 0

    waiting = asyncio.create_task(claim(metered, "frames", wait=LONG_WAIT_S))
    await scrape_until(metered, 1, "jobwire_claims_waiting")  # the waiting claim is counted
    assert not waiting.done()
    job = await submit(metered, "frames")
    leases = await woken(waiting)
    assert [lease.job_no for lease in leases] == [job.job_no]
    # The claim left its wait before its reply was sent: no lag to wait out.
    assert sample(await scrape(metered), "jobwire_claims_waiting") == 0
    assert metered.runtime.host.metrics.claims_waiting() == 0

    # and a claim whose caller leaves while it waits is no longer counted either
    request = worker_pb2.ClaimRequest(worker_id="w2", job_types=[worker_pb2.JobTypeSpec(name="frames")])
    request.wait.FromSeconds(int(LONG_WAIT_S))
    call = metered.workers.Claim(request)
    # Counted, as the scrape shows (a second read of the gauge after it could meet the claim
    # between two rounds of its wait, uncounted for a moment: it failed once under load).
    await scrape_until(metered, 1, "jobwire_claims_waiting")
    call.cancel()
    await scrape_until(metered, 0, "jobwire_claims_waiting")  # a claim whose caller left is no longer counted


async def test_only_get_is_answered_and_an_idle_client_holds_up_nothing(metered) -> None:  # type: ignore[no-untyped-def]
    port = metered.runtime.host.metrics_port
    assert (await asyncio.to_thread(_get, port, "/metrics", "POST"))[0] == 405
    # A client that connects and says nothing must not hold up gRPC or other scrapes.
    _, idle = await asyncio.open_connection("127.0.0.1", port)
    try:
        await submit(metered)
        assert sample(await scrape(metered), "jobwire_rpc_total", method=SUBMIT, code="OK") == 1
    finally:
        idle.close()


async def test_no_endpoint_unless_configured(served) -> None:  # type: ignore[no-untyped-def]
    assert served.runtime.host.metrics_port is None
    await submit(served)
    assert served.runtime.host.metrics.count(SUBMIT, "OK") == 1  # still counted, just not served


async def test_endpoint_closes_with_the_server(database_url: str) -> None:
    served = await start_server(database_url, metrics_listen="127.0.0.1:0")
    port = served.runtime.host.metrics_port
    await stop_server(served)
    with pytest.raises(ConnectionError):
        await asyncio.open_connection("127.0.0.1", port)


# -- without a server: a stream handler that writes with context.write (grpc's Health.Watch shape)


class _Context:
    def __init__(self) -> None:
        self.written: list[object] = []

    def code(self) -> None:
        return None

    def invocation_metadata(self) -> tuple[()]:
        return ()

    async def write(self, message: object) -> None:
        self.written.append(message)


async def test_writer_shaped_stream_is_timed_too() -> None:
    metrics = Metrics()

    async def watch_writer(request: object, context: Any) -> None:
        await context.write("one")
        assert metrics.open_streams("svc/Watch") == 1

    handler = Wrapping(Authenticator(None), metrics).handler(
        "svc/Watch", grpc.unary_stream_rpc_method_handler(watch_writer)
    )
    context = _Context()
    await handler.unary_stream(object(), context)
    assert context.written == ["one"]
    assert metrics.open_streams("svc/Watch") == 0
    assert metrics.count("svc/Watch", "OK") == 1
    assert 'jobwire_rpc_seconds_count{method="svc/Watch"} 1.0\n' in metrics.render()
