"""Idempotency keys: concurrent submits with one key create one job; another payload is refused."""

from __future__ import annotations

import asyncio

import grpc
import pytest
import sqlalchemy as sa
from service_support import db_query, db_rows, open_stubs, rpc_failure

from jobwire.client.status import error_reason
from jobwire.db.tables import job
from jobwire.v1 import job_pb2


def _request(key: str, payload: bytes = b'{"rows": 1200}', **fields) -> job_pb2.SubmitRequest:  # type: ignore[no-untyped-def]
    return job_pb2.SubmitRequest(job_type="import", payload=payload, idempotency_key=key, owner="u-7", **fields)


async def test_twelve_concurrent_submits_with_one_key_create_one_job(served) -> None:  # type: ignore[no-untyped-def]
    callers = await open_stubs(served.target, 12)
    try:
        replies = await asyncio.gather(*(c.jobs.Submit(_request("order-4711")) for c in callers))
    finally:
        for c in callers:
            await c.close()
    assert sorted(r.created for r in replies) == [False] * 11 + [True]
    job_nos = {r.job.job_no for r in replies}
    assert len(job_nos) == 1
    first = next(r.job for r in replies if r.created)
    for reply in replies:
        assert reply.job.job_no == first.job_no and reply.job.version == first.version
        assert reply.job.status == job_pb2.Job.QUEUED
    rows = await db_query(served, sa.select(job.c.job_no, job.c.idempotency_key))
    assert rows == [{"job_no": first.job_no, "idempotency_key": "order-4711"}]

    # later replays too, sequentially
    again = await served.jobs.Submit(_request("order-4711"))
    assert (again.created, again.job.job_no) == (False, first.job_no)


async def test_the_same_key_with_another_request_is_already_exists(served) -> None:  # type: ignore[no-untyped-def]
    first = await served.jobs.Submit(_request("order-4712"))
    rows = await db_rows(served)
    for other in (
        _request("order-4712", payload=b'{"rows": 1201}'),
        _request("order-4712", payload=b""),
        job_pb2.SubmitRequest(job_type="export", payload=b'{"rows": 1200}', idempotency_key="order-4712", owner="u-7"),
        _request("order-4712", priority=5),
        _request("order-4712", queue="bulk"),
    ):
        exc = await rpc_failure(served.jobs.Submit(other))
        assert (exc.code(), error_reason(exc)) == (grpc.StatusCode.ALREADY_EXISTS, "IDEMPOTENCY_KEY_REUSED")
        assert await db_rows(served) == rows
    assert (await served.jobs.Submit(_request("order-4712"))).job.job_no == first.job.job_no


async def test_concurrent_conflicting_submits_create_one_job_and_refuse_the_rest(served) -> None:  # type: ignore[no-untyped-def]
    callers = await open_stubs(served.target, 12)
    try:
        results = await asyncio.gather(
            *(c.jobs.Submit(_request("race", payload=b"%d" % (i % 2))) for i, c in enumerate(callers)),
            return_exceptions=True,
        )
    finally:
        for c in callers:
            await c.close()
    created = [r for r in results if isinstance(r, job_pb2.SubmitResponse) and r.created]
    replayed = [r for r in results if isinstance(r, job_pb2.SubmitResponse) and not r.created]
    refused = [r for r in results if isinstance(r, grpc.aio.AioRpcError)]
    assert len(created) == 1 and len(replayed) + len(refused) == 11
    assert all(r.job.job_no == created[0].job.job_no for r in replayed)
    assert all(
        (e.code(), error_reason(e)) == (grpc.StatusCode.ALREADY_EXISTS, "IDEMPOTENCY_KEY_REUSED") for e in refused
    )
    assert len(refused) == 6  # the six with the other payload
    assert len(await db_query(served, sa.select(job.c.id))) == 1


async def test_concurrent_submits_without_a_key_get_distinct_job_numbers(served) -> None:  # type: ignore[no-untyped-def]
    callers = await open_stubs(served.target, 12)
    try:
        replies = await asyncio.gather(*(c.jobs.Submit(job_pb2.SubmitRequest(job_type="import")) for c in callers))
    finally:
        for c in callers:
            await c.close()
    assert all(r.created for r in replies)
    job_nos = [r.job.job_no for r in replies]
    assert len(set(job_nos)) == 12
    prefix = {n.rsplit("-", 1)[0] for n in job_nos}
    assert len(prefix) == 1 and prefix.pop().startswith("PT-")
    assert sorted(int(n.rsplit("-", 1)[1]) for n in job_nos) == list(range(1, 13))


@pytest.mark.both_databases  # each database's collation of the key column
async def test_keys_are_compared_exactly(served) -> None:  # type: ignore[no-untyped-def]
    """Keys differing only in case are different keys, on SQLite and MariaDB (utf8mb4_bin, not a _ci collation)."""
    a = await served.jobs.Submit(_request("Key-1"))
    b = await served.jobs.Submit(_request("key-1"))
    assert a.created and b.created and a.job.job_no != b.job.job_no
