"""GET /metrics of a family (`--processes 2`): what both children counted, summed once, and
the database's gauges shown once, not once per process (prometheus-client's multiprocess mode)."""

from __future__ import annotations

import asyncio
import re
import urllib.request
from collections.abc import Iterator

import grpc
import pytest
from processes import start_server_process
from prometheus_client.parser import text_string_to_metric_families
from served import eventually
from test_family import OWN_CONNECTION, SHA, Family, _connections, stop

from jobwire.v1 import job_pb2, job_pb2_grpc, worker_pb2, worker_pb2_grpc

pytestmark = pytest.mark.timeout(120)
CHANNELS, PER_CHANNEL, DONE_PER_CHANNEL = 12, 4, 2
_METRICS_PORT = re.compile(r"metrics of all 2 processes at GET /metrics on port (\d+)")


@pytest.fixture
def family(database_url: str) -> Iterator[tuple[Family, int]]:
    server = start_server_process(
        ["jobwire", "serve", "--processes", "2", "--listen", "127.0.0.1:0"],
        {"JOBWIRE_DATABASE_URL": database_url, "JOBWIRE_METRICS_LISTEN": "127.0.0.1:0",
         "JOBWIRE_REAPER_INTERVAL_SECONDS": "0.2"},
    )  # fmt: skip
    started = Family(server)
    try:
        (port,) = {int(m.group(1)) for line in server.output if (m := _METRICS_PORT.search(line))}
        yield started, port
    finally:
        stop(started)


def _scrape(port: int) -> dict[str, float]:
    """Each series summed over its labels, by sample name."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        body = reply.read().decode()
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(body):  # the whole scrape parses
        for s in family.samples:
            key = s.name if s.name != "jobwire_jobs" else f"jobwire_jobs:{s.labels['status']}"
            totals[key] = totals.get(key, 0.0) + s.value
    return totals


async def _work(stubs: tuple[job_pb2_grpc.JobServiceStub, worker_pb2_grpc.WorkerServiceStub]) -> None:
    """On one connection: submit PER_CHANNEL jobs, claim and complete DONE_PER_CHANNEL of them."""
    jobs, workers = stubs
    for _ in range(PER_CHANNEL):
        await jobs.Submit(job_pb2.SubmitRequest(job_type="bulk"))
    for _ in range(DONE_PER_CHANNEL):
        reply = await workers.Claim(
            worker_pb2.ClaimRequest(worker_id="w1", job_types=[worker_pb2.JobTypeSpec(name="bulk")], max_jobs=1)
        )
        (lease,) = reply.leases
        artifact = job_pb2.Artifact(uri=f"file:///{lease.job_no}", size_bytes=0, sha256=SHA)
        await workers.Complete(
            worker_pb2.CompleteRequest(job_no=lease.job_no, worker_token=lease.worker_token, result=artifact)
        )


async def test_counts_of_both_children_add_up_and_database_gauges_are_not_doubled(family) -> None:  # type: ignore[no-untyped-def]
    started, port = family
    channels = [grpc.aio.insecure_channel(started.target, options=OWN_CONNECTION) for _ in range(CHANNELS)]
    try:
        stubs = [(job_pb2_grpc.JobServiceStub(c), worker_pb2_grpc.WorkerServiceStub(c)) for c in channels]
        for c in channels:
            await c.channel_ready()

        async def both_serving() -> bool:
            counts = [_connections(pid, started.port) for pid in started.children()]
            return len(counts) == 2 and all(counts)

        # The kernel spreads connections at random: all 12 on one child happens 1 time in 2048.
        await eventually(both_serving, what="both processes holding connections")
        await asyncio.gather(*(_work(s) for s in stubs))
    finally:
        for c in channels:
            await c.close()

    submitted, done = CHANNELS * PER_CHANNEL, CHANNELS * DONE_PER_CHANNEL

    async def read() -> dict[str, float] | None:
        totals = await asyncio.to_thread(_scrape, port)
        # A reading once every queued job is due. Each process estimates the database's clock
        # (jobwire.db.clock) and their estimates differ by up to a reading's round trip: a job
        # the other child submitted just before a census (run_after its own "now") may not be
        # due yet by the census's clock. A depth doubled (one per process) would never match.
        settled = totals.get("jobwire_queue_depth") == totals.get("jobwire_jobs:QUEUED")
        return totals if totals.get("jobwire_jobs:READY") == done and settled else None

    totals = await eventually(read, what="the gauges read after the last Complete, every queued job due")
    assert totals["jobwire_jobs_submitted_total"] == submitted
    assert totals["jobwire_jobs_claimed_total"] == done
    assert totals["jobwire_jobs_completed_total"] == done
    assert totals["jobwire_job_run_seconds_count"] == done
    # One reading of the database, not one per process: the READY count is the rows'.
    assert totals["jobwire_jobs:QUEUED"] == submitted - done
    assert totals["jobwire_queue_depth"] == submitted - done
