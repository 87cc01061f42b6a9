"""AdminService.ListWorkers over real gRPC: who claimed, on which queues and job types, holding how many leases."""

from __future__ import annotations

import time
from datetime import timedelta

import grpc
import sqlalchemy as sa
from db_edits import db_execute
from service_support import artifact, claim, spec, submit

from jobwire.db.tables import worker
from jobwire.v1 import admin_pb2, job_pb2, worker_pb2


async def workers(served, queue: str = "") -> dict[str, admin_pb2.WorkerInfo]:  # type: ignore[no-untyped-def]
    reply = await served.admin.ListWorkers(admin_pb2.ListWorkersRequest(queue=queue))
    ids = [w.worker_id for w in reply.workers]
    assert len(ids) == len(set(ids)), f"a worker listed twice: {ids}"
    return {w.worker_id: w for w in reply.workers}


async def test_list_workers_reports_leases_queues_and_job_types(served) -> None:  # type: ignore[no-untyped-def]
    before = time.time()
    a1 = await submit(served, "frames", queue="a")
    a2 = await submit(served, "frames", queue="a")
    b1 = await submit(served, "report", queue="b")
    await submit(served, "report", queue="b")  # left queued: w2 takes only one

    w1 = await claim(served, "frames", worker_id="w1", queues=["a"], max_jobs=5)
    assert sorted(lease.job_no for lease in w1) == sorted([a1.job_no, a2.job_no])
    w2 = await claim(served, "report", worker_id="w2", queues=["b"], max_jobs=1)
    assert [lease.job_no for lease in w2] == [b1.job_no]
    assert await claim(served, "frames", worker_id="w3", queues=["a"]) == []  # seen, holds nothing
    assert await claim(served, "other", worker_id="w4", queues=["b", "a"]) == []

    listed = await workers(served)
    assert set(listed) == {"w1", "w2", "w3", "w4"}
    expected = {
        # worker: (leases_held, queues, job_types)
        "w1": (2, ["a"], ["frames"]),
        "w2": (1, ["b"], ["report"]),
        "w3": (0, ["a"], ["frames"]),
        "w4": (0, ["a", "b"], ["other"]),
    }
    for worker_id, (held, queues, job_types) in expected.items():
        w = listed[worker_id]
        assert (w.leases_held, sorted(w.queues), sorted(w.job_types)) == (held, queues, job_types), worker_id
        assert w.HasField("last_seen_at"), worker_id
        seen = w.last_seen_at.seconds + w.last_seen_at.nanos / 1e9
        assert before - 5 <= seen <= time.time() + 5, (worker_id, seen, before)

    # the queue filter: exactly the workers claiming on that queue
    assert set(await workers(served, "a")) == {"w1", "w3", "w4"}
    assert set(await workers(served, "b")) == {"w2", "w4"}
    assert await workers(served, "nobody-claims-here") == {}

    # leases_held follows the leases: ending one of w1's drops its count, others unchanged
    await served.workers.Complete(
        worker_pb2.CompleteRequest(job_no=w1[0].job_no, worker_token=w1[0].worker_token, result=artifact())
    )
    after = await workers(served)
    assert {k: v.leases_held for k, v in after.items()} == {"w1": 1, "w2": 1, "w3": 0, "w4": 0}


async def test_multi_job_type_worker_lists_every_type(served) -> None:  # type: ignore[no-untyped-def]
    reply = await served.workers.Claim(
        worker_pb2.ClaimRequest(worker_id="multi", job_types=[spec("frames"), spec("report"), spec("scan")])
    )
    assert list(reply.leases) == []
    (w,) = (await workers(served)).values()
    assert w.worker_id == "multi"
    assert sorted(w.job_types) == ["frames", "report", "scan"]
    assert list(w.queues) == ["default"]  # no queues named means "default"
    assert w.leases_held == 0
    assert set(await workers(served, "default")) == {"multi"}


async def _all_pages(served, **fields) -> tuple[list[admin_pb2.WorkerInfo], list[int]]:  # type: ignore[no-untyped-def]
    """Every worker across pages, and the encoded size of each reply."""
    request = admin_pb2.ListWorkersRequest(**fields)
    found, sizes = [], []
    while True:
        reply = await served.admin.ListWorkers(request)
        found += list(reply.workers)
        sizes.append(reply.ByteSize())
        if not reply.next_page_token:
            return found, sizes
        request.page_token = reply.next_page_token


async def test_many_large_workers_come_in_pages_under_the_message_limit(served) -> None:  # type: ignore[no-untyped-def]
    """Security review, finding 5: 700 workers with 100 job types each made one reply over
    4 MiB (RESOURCE_EXHAUSTED); ListWorkers now pages, by count and by size."""
    from jobwire.domain.limits import MAX_GRPC_MESSAGE_BYTES

    types = [spec(f"type-{i:02d}-" + "x" * 54) for i in range(100)]  # names of 64 characters
    queues = [f"queue-{i:02d}-" + "q" * 55 for i in range(10)]  # x 100 types: a claim's most pairs
    count = 400  # ~9.6 kB each as a page counts them: over a page's 3 MiB
    for n in range(count):
        await served.workers.Claim(
            worker_pb2.ClaimRequest(worker_id=f"worker-{n:03d}-" + "w" * 117, job_types=types, queues=queues)
        )
    found, sizes = await _all_pages(served, page_size=500)
    assert [w.worker_id for w in found] == sorted(f"worker-{n:03d}-" + "w" * 117 for n in range(count))
    assert len(sizes) >= 2 and max(sizes) < MAX_GRPC_MESSAGE_BYTES
    small, pages = await _all_pages(served, page_size=7)
    assert [w.worker_id for w in small] == [w.worker_id for w in found] and len(pages) == 58
    by_queue, _ = await _all_pages(served, queue=queues[5], page_size=40)
    assert len(by_queue) == count


async def test_a_queue_filter_matches_whole_names_only(served) -> None:  # type: ignore[no-untyped-def]
    await claim(served, "frames", worker_id="w-under", queues=["a_b"])
    await claim(served, "frames", worker_id="w-plain", queues=["axb", "a"])
    assert set(await workers(served, "a_b")) == {"w-under"}  # `_` is not a LIKE wildcard here
    assert set(await workers(served, "a")) == {"w-plain"}


async def test_workers_not_seen_for_the_retention_period_are_forgotten(served) -> None:  # type: ignore[no-untyped-def]
    from datetime import timedelta

    await claim(served, "frames", worker_id="w-old")
    store = served.runtime.store
    assert store.purge_workers(timedelta(days=7)) == 0
    assert set(await workers(served)) == {"w-old"}
    assert store.purge_workers(timedelta(seconds=-1)) == 2  # the worker and its one kind: "not since a second from now"
    assert await workers(served) == {}


async def test_claims_write_one_row_per_kind_of_job_at_most_a_bound_and_housekeeping_forgets_them(served) -> None:  # type: ignore[no-untyped-def]
    """Security review, finding 10: 50 claims x 64 queues x 100 job types wrote 320,000
    worker_claim rows, never deleted. A row is a (tenant, queue, job type), whoever claims;
    a claim names at most MAX_CLAIM_KINDS pairs; the rows go with the worker retention."""
    from datetime import timedelta

    from service_support import db_query, rpc_error

    from jobwire.db.tables import worker_claim
    from jobwire.worker.server.servicer import MAX_CLAIM_KINDS

    async def kinds() -> int:
        return len(await db_query(served, sa.select(worker_claim.c.queue)))

    types = [spec(f"type-{i}") for i in range(5)]
    for n in range(50):
        await served.workers.Claim(
            worker_pb2.ClaimRequest(worker_id=f"new-worker-{n}", job_types=types, queues=["q1", "q2", "q3", "q4"])
        )
    assert await kinds() == 4 * 5  # not 50 x 20: new worker ids add no row

    too_many = worker_pb2.ClaimRequest(
        worker_id="wide", job_types=[spec(f"t-{i}") for i in range(100)], queues=[f"q-{i}" for i in range(11)]
    )
    assert MAX_CLAIM_KINDS < 11 * 100
    assert await rpc_error(served.workers.Claim(too_many)) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT")
    assert await kinds() == 20  # refused whole: nothing written

    store = served.runtime.store
    assert store.purge_workers(timedelta(days=7)) == 0
    assert store.purge_workers(timedelta(seconds=-1)) == 50 + 20  # "not seen, nor claimed for, since a second from now"
    assert await kinds() == 0


async def test_a_tenants_claims_record_at_most_its_bound_of_kinds_and_claim_on_past_it(  # type: ignore[no-untyped-def]
    serve, tmp_path, caplog
) -> None:
    """Security review, finding 10: five Claims of 1,000 new names each wrote 5,000
    worker_claim rows, kept 7 days: the bound was per Claim, not per tenant. Past
    JOBWIRE_MAX_CLAIM_KINDS_PER_TENANT a tenant's new pairs are not recorded (logged once);
    its claims still lease, and another tenant records its own."""
    import logging

    from auth_files import Token, write_auth_file
    from service_support import db_query

    from jobwire.db.tables import worker_claim

    a, b = Token("kinds-a", tenant="a", role="worker"), Token("kinds-b", tenant="b", role="worker")
    client = Token("kinds-a-client", tenant="a")
    auth = write_auth_file(tmp_path / "auth.toml", [a, b, client])
    served = await serve(auth_file=auth, max_claim_kinds_per_tenant=1500)

    async def kinds(tenant: str) -> int:
        return len(await db_query(served, sa.select(worker_claim.c.queue).where(worker_claim.c.tenant == tenant)))

    def wide(n: int, job_types: list[str] | None = None) -> worker_pb2.ClaimRequest:
        names = job_types or [f"t-{n}-{i}" for i in range(100)]
        queues = [f"q-{n}-{i}" for i in range(10)]  # 1,000 new pairs a claim, the most one may name
        return worker_pb2.ClaimRequest(worker_id=f"w-{n}", job_types=[spec(t) for t in names], queues=queues)

    with caplog.at_level(logging.WARNING, logger="jobwire.worker.server.leasing"):
        for n in range(5):
            await served.workers.Claim(wide(n), metadata=a.metadata)
    assert await kinds("a") == 1500  # not 5,000
    assert caplog.text.count("JOBWIRE_MAX_CLAIM_KINDS_PER_TENANT") == 1
    # Past the bound a claim of pairs never recorded still leases.
    job = await served.jobs.Submit(job_pb2.SubmitRequest(job_type="late", queue="q-9-0"), metadata=client.metadata)
    (lease,) = (await served.workers.Claim(wide(9, ["late"]), metadata=a.metadata)).leases
    assert lease.job_no == job.job.job_no and await kinds("a") == 1500
    await served.workers.Claim(wide(5), metadata=b.metadata)
    assert await kinds("b") == 1000  # another tenant's bound is its own


def test_the_seen_map_of_a_server_is_bounded() -> None:
    from jobwire.worker.server import leasing

    keeper = leasing.Leasing.__new__(leasing.Leasing)
    keeper._seen = leasing.OrderedDict()
    for n in range(leasing.MAX_SEEN + 50):
        assert keeper._note_seen("t", f"w{n}")
    assert len(keeper._seen) == leasing.MAX_SEEN
    assert ("t", "w0") not in keeper._seen and ("t", f"w{leasing.MAX_SEEN + 49}") in keeper._seen


async def test_a_worker_is_gone_once_unseen_for_a_lease_and_the_stall_grace(serve) -> None:  # type: ignore[no-untyped-def]
    served = await serve(lease_seconds=10, stall_grace_seconds=5)  # gone after 15 s unseen
    await claim(served, "frames", worker_id="fresh")
    await claim(served, "frames", worker_id="quiet")
    await claim(served, "frames", worker_id="edge")

    now = served.runtime.store.now()  # the clock that decides, as leases use it
    for worker_id, unseen in (("quiet", 16), ("edge", 10)):
        edit = sa.update(worker).where(worker.c.worker_id == worker_id)
        await db_execute(served, edit.values(last_seen_at=now - timedelta(seconds=unseen)))
    listed = await workers(served)
    assert {k: w.live for k, w in listed.items()} == {"fresh": True, "quiet": False, "edge": True}
