"""Checkpoints in the trail, on SQLite and MariaDB: each one saved is a CHECKPOINT_SAVED event
with its size and sha256 (never its bytes); an admin reads the latest one's bytes
(AdminService.GetCheckpoint); a client is refused, another tenant finds no such job."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from auth_files import Token, write_auth_file
from served import Served, start_server
from service_support import LEASE_LOST, rpc_error, rpc_failure, stop_server

from jobwire.client.status import error_reason
from jobwire.v1 import admin_pb2, job_pb2, worker_pb2

pytestmark = [pytest.mark.both_databases, pytest.mark.timeout(90)]  # events and bytes each database stores

CLIENT = Token("checkpoint-client", tenant="acme")
WORKER = Token("checkpoint-worker", tenant="acme", role="worker")
ADMIN = Token("checkpoint-admin", tenant="acme", role="admin")
OTHER = Token("checkpoint-globex-admin", tenant="globex", roles=("client", "admin"))
SAVES = [b'{"row": 100}', b'{"row": 2500, "file": "customers-2026-11.csv"}', b"\x00\xff" * 3000]


@pytest.fixture
async def s(database_url: str, tmp_path: Path) -> AsyncIterator[Served]:
    auth = write_auth_file(tmp_path / "auth.toml", [CLIENT, WORKER, ADMIN, OTHER])
    served = await start_server(database_url, auth_file=auth)
    yield served
    await stop_server(served)


async def leased(s: Served) -> tuple[job_pb2.Job, worker_pb2.Lease]:
    job = (await s.jobs.Submit(job_pb2.SubmitRequest(job_type="import"), metadata=CLIENT.metadata)).job
    claim = worker_pb2.ClaimRequest(worker_id="w1", job_types=[worker_pb2.JobTypeSpec(name="import")])
    (lease,) = (await s.workers.Claim(claim, metadata=WORKER.metadata)).leases
    return job, lease


def report(lease: worker_pb2.Lease, units: int, checkpoint: bytes, token: str = "") -> worker_pb2.ReportStageRequest:
    return worker_pb2.ReportStageRequest(
        job_no=lease.job_no, worker_token=token or lease.worker_token, stage="PROCESSING", processed_units=units,
        checkpoint=checkpoint,
    )  # fmt: skip


async def trail(s: Served, job_no: str) -> admin_pb2.ListEventsResponse:
    return await s.admin.ListEvents(admin_pb2.ListEventsRequest(job_no=job_no), metadata=ADMIN.metadata)


def get_checkpoint(s: Served, job_no: str, token: Token) -> object:
    return s.admin.GetCheckpoint(admin_pb2.GetCheckpointRequest(job_no=job_no), metadata=token.metadata)


async def test_three_saves_are_three_events_with_sizes_and_digests_and_an_admin_reads_the_last(s: Served) -> None:
    job, lease = await leased(s)
    missing = await rpc_failure(get_checkpoint(s, job.job_no, ADMIN))  # none saved yet
    assert (missing.code(), error_reason(missing)) == (grpc.StatusCode.NOT_FOUND, "CHECKPOINT_NOT_FOUND")
    await s.workers.ReportStage(report(lease, 100, SAVES[0]), metadata=WORKER.metadata)
    await s.workers.ReportStage(report(lease, 2500, SAVES[1]), metadata=WORKER.metadata)
    await s.workers.Release(
        worker_pb2.ReleaseRequest(job_no=job.job_no, worker_token=lease.worker_token, checkpoint=SAVES[2]),
        metadata=WORKER.metadata,
    )
    found = await trail(s, job.job_no)
    saved = [e for e in found.events if e.kind == "CHECKPOINT_SAVED"]
    assert [(e.size_bytes, e.sha256) for e in saved] == [(len(b), hashlib.sha256(b).hexdigest()) for b in SAVES]
    assert [(e.attempt, e.detail) for e in saved] == [(1, ""), (1, ""), (1, "")]
    assert [e.stage for e in saved[:2]] == ["PROCESSING", "PROCESSING"]
    assert SAVES[1] not in found.SerializeToString()  # the trail never carries the bytes

    latest = await get_checkpoint(s, job.job_no, ADMIN)
    assert (latest.job_no, latest.data, latest.size_bytes) == (job.job_no, SAVES[2], len(SAVES[2]))  # type: ignore[attr-defined]
    assert latest.sha256 == hashlib.sha256(SAVES[2]).hexdigest()  # type: ignore[attr-defined]


async def test_a_client_is_refused_and_another_tenant_finds_no_such_job(s: Served) -> None:
    job, lease = await leased(s)
    await s.workers.ReportStage(report(lease, 1, SAVES[0]), metadata=WORKER.metadata)
    client = await rpc_failure(get_checkpoint(s, job.job_no, CLIENT))
    assert client.code() == grpc.StatusCode.PERMISSION_DENIED
    theirs = await rpc_failure(get_checkpoint(s, job.job_no, OTHER))
    unknown = await rpc_failure(get_checkpoint(s, "PT-20000101-999", OTHER))
    assert theirs.code() == unknown.code() == grpc.StatusCode.NOT_FOUND
    assert (error_reason(theirs), theirs.details()) == (error_reason(unknown), unknown.details()) == (
        "JOB_NOT_FOUND", unknown.details(),
    )  # fmt: skip


async def test_a_refused_reports_checkpoint_leaves_no_event(s: Served) -> None:
    job, lease = await leased(s)
    forged = "1.AAAAAAAAAAAAAAAAAAAAAAAA"
    refused = await rpc_error(s.workers.ReportStage(report(lease, 5, SAVES[0], token=forged), metadata=WORKER.metadata))
    assert refused == LEASE_LOST
    assert "CHECKPOINT_SAVED" not in [e.kind for e in (await trail(s, job.job_no)).events]
    assert error_reason(await rpc_failure(get_checkpoint(s, job.job_no, ADMIN))) == "CHECKPOINT_NOT_FOUND"


async def test_a_watch_resumed_across_checkpoints_and_evidence_replays_only_the_jobs_changes(s: Served) -> None:
    """A checkpoint's and an evidence entry's rows share the version of the change they came
    with and carry no snapshot: a watch that resumes from before them (after a reconnect)
    gets the job's versions, never those rows (the soak found INTERNAL here)."""
    job, lease = await leased(s)
    await s.workers.ReportStage(report(lease, 100, SAVES[0]), metadata=WORKER.metadata)
    await s.workers.RecordEvidence(
        worker_pb2.RecordEvidenceRequest(
            job_no=lease.job_no, worker_token=lease.worker_token,
            entries=[worker_pb2.EvidenceEntry(key="request_id", value="r-1")],
        ),
        metadata=WORKER.metadata,
    )  # fmt: skip
    await s.workers.ReportStage(report(lease, 2500, SAVES[1]), metadata=WORKER.metadata)
    await s.workers.Complete(
        worker_pb2.CompleteRequest(job_no=lease.job_no, worker_token=lease.worker_token, inline_result=b"done"),
        metadata=WORKER.metadata,
    )
    watch = s.jobs.WatchStatus(job_pb2.WatchStatusRequest(job_no=job.job_no, after_version=1), metadata=CLIENT.metadata)
    seen = [update.job async for update in watch]
    versions = [j.version for j in seen]
    assert versions == sorted(set(versions)) and versions[0] > 1, versions
    assert seen[-1].status == job_pb2.Job.READY
