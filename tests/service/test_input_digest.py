"""What a job was given, on SQLite and MariaDB: the payload's size and sha256 as the server
computed them at submit, in Get, a watch stream and a batch's jobs; a replayed key shows the
original's; another tenant reads nothing (NOT_FOUND, as for the job); migration 0018 digests
the payloads of jobs made before it."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import grpc
import pytest
import sqlalchemy as sa
from auth_files import Token, write_auth_file
from served import Served, start_server
from service_support import rpc_failure, stop_server

from jobwire.db.engine import Database
from jobwire.db.migrate import upgrade
from jobwire.db.tables import job
from jobwire.v1 import job_pb2

pytestmark = [pytest.mark.both_databases, pytest.mark.timeout(90)]  # columns and a migration of stored rows

ACME = Token("digest-acme-client", tenant="acme")
GLOBEX = Token("digest-globex-client", tenant="globex")
PAYLOAD = '{"file": "customers-2026-11.csv", "rows": 1200, "名": "客户"}'.encode()


@pytest.fixture
async def s(database_url: str, tmp_path: Path) -> AsyncIterator[Served]:
    served = await start_server(database_url, auth_file=write_auth_file(tmp_path / "auth.toml", [ACME, GLOBEX]))
    yield served
    await stop_server(served)


async def submit(s: Served, payload: bytes, token: Token = ACME, **fields: object) -> job_pb2.SubmitResponse:
    request = job_pb2.SubmitRequest(job_type="import", payload=payload, **fields)  # type: ignore[arg-type]
    return await s.jobs.Submit(request, metadata=token.metadata)


def digest_of(payload: bytes) -> tuple[int, str]:
    return len(payload), hashlib.sha256(payload).hexdigest()


async def test_the_digest_is_the_sha256_of_the_payload_sent(s: Served) -> None:
    made = (await submit(s, PAYLOAD)).job
    assert (made.input.size_bytes, made.input.sha256) == digest_of(PAYLOAD)
    read = await s.jobs.Get(job_pb2.GetRequest(job_no=made.job_no), metadata=ACME.metadata)
    assert (read.input.size_bytes, read.input.sha256) == digest_of(PAYLOAD)
    stream = s.jobs.WatchStatus(job_pb2.WatchStatusRequest(job_no=made.job_no), metadata=ACME.metadata)
    first = await anext(aiter(stream))
    stream.cancel()
    assert first.job.input == read.input
    empty = (await submit(s, b"")).job
    assert (empty.input.size_bytes, empty.input.sha256) == digest_of(b"")


async def test_two_submits_are_told_apart_by_their_digests_and_a_batch_digests_each_job(s: Served) -> None:
    payloads = [b'{"month": 10}', b'{"month": 11}']
    batch = await s.jobs.SubmitBatch(
        job_pb2.SubmitBatchRequest(jobs=[job_pb2.SubmitRequest(job_type="import", payload=p) for p in payloads]),
        metadata=ACME.metadata,
    )
    assert [(j.input.size_bytes, j.input.sha256) for j in batch.jobs] == [digest_of(p) for p in payloads]


async def test_a_replayed_key_shows_the_originals_digest(s: Served) -> None:
    first = await submit(s, PAYLOAD, idempotency_key="import-11")
    again = await submit(s, PAYLOAD, idempotency_key="import-11")
    assert (first.created, again.created) == (True, False)
    assert again.job.job_no == first.job.job_no
    assert (again.job.input.size_bytes, again.job.input.sha256) == digest_of(PAYLOAD)


async def test_another_tenant_reads_no_digest_as_for_any_job_it_cannot_see(s: Served) -> None:
    made = (await submit(s, PAYLOAD)).job
    theirs = await rpc_failure(s.jobs.Get(job_pb2.GetRequest(job_no=made.job_no), metadata=GLOBEX.metadata))
    unknown = await rpc_failure(s.jobs.Get(job_pb2.GetRequest(job_no="PT-20000101-999"), metadata=GLOBEX.metadata))
    assert theirs.code() == unknown.code() == grpc.StatusCode.NOT_FOUND
    assert theirs.details() == unknown.details()


def old_job(job_no: str, payload: bytes) -> dict[str, object]:
    now = datetime.now(UTC).replace(tzinfo=None)
    return {
        "tenant": "acme", "job_no": job_no, "job_type": "import", "queue": "default", "labels": "{}",
        "payload": payload, "fingerprint": "0" * 64, "status": "QUEUED", "max_attempts": 3,
        "initial_backoff_s": 1.0, "max_backoff_s": 60.0, "backoff_multiplier": 2.0, "on_lease_lost": "RETRY",
        "created_at": now, "updated_at": now, "run_after": now,
    }  # fmt: skip


def test_migration_0018_digests_the_payloads_of_older_jobs(empty_database_url: str) -> None:
    payloads = {"PT-20261101-001": PAYLOAD, "PT-20261101-002": b"", "PT-20261101-003": b"\xff" * 70_000}
    db = Database(empty_database_url)
    try:
        upgrade(db, "0017")
        older = sa.table("job", *(sa.column(name) for name in old_job("", b"")))  # as 0017 had it
        with db.engine.begin() as conn:
            conn.execute(sa.insert(older), [old_job(n, p) for n, p in payloads.items()])
        upgrade(db)
        with db.engine.connect() as conn:
            rows = conn.execute(sa.select(job.c.job_no, job.c.input_size, job.c.input_sha256, job.c.title))
            found = {r.job_no: (r.input_size, r.input_sha256, r.title) for r in rows}
    finally:
        db.dispose()
    assert found == {n: (*digest_of(p), "") for n, p in payloads.items()}
