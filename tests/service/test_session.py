"""WorkerService.Session: each frame's call answered exactly as its unary RPC, matched by call_id.

The table runs every call a frame may carry twice, once as its unary RPC and once through a
Session, on jobs prepared alike, and compares what came back: the reply (job numbers, tokens
and times aside) or the whole google.rpc.Status of a refusal. Around it: replies that come
back out of order, a session's caller, frames refused while the session goes on, and a
cancelled session whose Claim must not keep the lease it took.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from auth_files import Token, write_auth_file
from google.protobuf import json_format
from google.protobuf.message import Message
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status
from served import Served, eventually, start_server
from service_support import (
    FORGED_TOKEN,
    LONG_WAIT_S,
    artifact,
    events,
    rpc_failure,
    stop_server,
    submit,
    when,
    woken,
)
from session_support import SESSION, Session, claim_request, claims_waiting, hold_writes, ref

from jobwire.client.status import error_reason
from jobwire.db.store import Claim
from jobwire.v1 import job_pb2, worker_pb2
from jobwire.worker.server import session as session_module
from jobwire.worker.server.leasing import Leasing

INVALID = code_pb2.INVALID_ARGUMENT


# -- the table: every call kind, unary and through a session --------------------------------------


async def leased(served: Served, job_type: str) -> worker_pb2.Lease:
    """A job of `job_type` submitted and claimed: its lease."""
    await submit(served, job_type)
    (lease,) = (await served.workers.Claim(claim_request(job_type))).leases
    return lease


async def queued(served: Served, job_type: str) -> worker_pb2.Lease:
    """A job of `job_type` submitted, not claimed: a Lease naming only its type and number."""
    job = await submit(served, job_type)
    return worker_pb2.Lease(job_type=job_type, job_no=job.job_no)


async def cancel_requested(served: Served, job_type: str) -> worker_pb2.Lease:
    lease = await leased(served, job_type)
    await served.jobs.Cancel(job_pb2.CancelRequest(job_no=lease.job_no))
    return lease


def broken_heartbeat(monkeypatch: pytest.MonkeyPatch) -> None:
    async def fails(*args: object) -> None:
        raise RuntimeError("/srv/jobwire/secret/store.py: the disk is on fire")

    monkeypatch.setattr(Leasing, "heartbeat", fails)


@dataclass(frozen=True)
class Case:
    name: str  # also the job type of its jobs, so no case claims another's
    kind: str  # the WorkerFrame call, and (UpperCamel) its unary method
    request: Callable[[worker_pb2.Lease], Message]  # from the lease of a job prepared for it
    prepare: Callable[[Served, str], Awaitable[worker_pb2.Lease]] = leased
    code: int = code_pb2.OK  # a refusal: both ways ask about the same job (a refusal changes nothing)
    reason: str = ""
    breaks: Callable[[pytest.MonkeyPatch], None] | None = None  # a server bug, for the duration of the case

    @property
    def method(self) -> str:
        return "".join(part.title() for part in self.kind.split("_"))


def _report(
    lease: worker_pb2.Lease, token: str | None = None, stage: str = "PROCESSING", **fields: Any
) -> worker_pb2.ReportStageRequest:
    return worker_pb2.ReportStageRequest(**ref(lease, token), stage=stage, processed_units=5, **fields)


def _evidence(lease: worker_pb2.Lease, entries: int = 1) -> worker_pb2.RecordEvidenceRequest:
    return worker_pb2.RecordEvidenceRequest(
        **ref(lease), entries=[worker_pb2.EvidenceEntry(key=f"k{i}", value="v") for i in range(entries)]
    )


LOST = code_pb2.FAILED_PRECONDITION
CASES = [
    Case("claim", "claim", lambda lease: claim_request(lease.job_type), prepare=queued),
    Case(
        "claim-none",
        "claim",
        lambda lease: worker_pb2.ClaimRequest(worker_id="w1"),
        code=INVALID,
        reason="INVALID_ARGUMENT",
    ),
    Case(
        "heartbeat",
        "heartbeat",
        lambda lease: worker_pb2.HeartbeatRequest(
            worker_id="w1", leases=[worker_pb2.LeaseRef(**ref(lease)), worker_pb2.LeaseRef(**ref(lease, FORGED_TOKEN))]
        ),
    ),
    Case(
        "heartbeat-bug",
        "heartbeat",
        lambda lease: worker_pb2.HeartbeatRequest(worker_id="w1"),
        code=code_pb2.INTERNAL,
        breaks=broken_heartbeat,
    ),
    Case("report", "report_stage", lambda lease: _report(lease, total_units=10, note="half")),
    Case(
        "report-forged",
        "report_stage",
        lambda lease: _report(lease, FORGED_TOKEN),
        code=LOST,
        reason="WORKER_LEASE_LOST",
    ),
    Case(
        "report-big-checkpoint",
        "report_stage",
        lambda lease: _report(lease, checkpoint=b"x" * (1 << 20)),
        code=INVALID,
        reason="INVALID_ARGUMENT",
    ),
    Case(
        "batch",
        "batch_report_stage",
        lambda lease: worker_pb2.BatchReportStageRequest(
            reports=[_report(lease), _report(lease, FORGED_TOKEN), _report(lease, stage="NOT A STAGE")]
        ),
    ),
    Case("complete", "complete", lambda lease: worker_pb2.CompleteRequest(**ref(lease), result=artifact())),
    Case("complete-inline", "complete", lambda lease: worker_pb2.CompleteRequest(**ref(lease), inline_result=b"ok")),
    Case(
        "complete-both",
        "complete",
        lambda lease: worker_pb2.CompleteRequest(**ref(lease), inline_result=b"ok", upload_id="u1"),
        code=INVALID,
        reason="INVALID_ARGUMENT",
    ),
    Case(
        "fail",
        "fail",
        lambda lease: worker_pb2.FailRequest(
            **ref(lease), category=job_pb2.JobError.PROCESSING_ERROR, message="boom", retryable=True
        ),
    ),
    Case(
        "fail-bad-job",
        "fail",
        lambda lease: worker_pb2.FailRequest(job_no="garbage", worker_token="1.x"),
        code=INVALID,
        reason="INVALID_ARGUMENT",
    ),
    Case(
        "confirm-cancel",
        "confirm_cancel",
        lambda lease: worker_pb2.ConfirmCancelRequest(**ref(lease), note="ok"),
        prepare=cancel_requested,
    ),
    Case(
        "confirm-not-asked",
        "confirm_cancel",
        lambda lease: worker_pb2.ConfirmCancelRequest(**ref(lease)),
        code=LOST,
        reason="CANCEL_NOT_REQUESTED",
    ),
    Case("release", "release", lambda lease: worker_pb2.ReleaseRequest(**ref(lease), checkpoint=b"at-5")),
    Case(
        "await-review",
        "await_review",
        lambda lease: worker_pb2.AwaitReviewRequest(**ref(lease), assignee="ann", items=["look at page 3"]),
    ),
    Case("evidence", "record_evidence", lambda lease: _evidence(lease)),
    Case(
        "evidence-too-many",
        "record_evidence",
        lambda lease: _evidence(lease, 51),
        code=INVALID,
        reason="INVALID_ARGUMENT",
    ),
]
_TIME = re.compile(r'"\d{4}-\d\d-\d\dT[\d:.]+Z"')


def _normal(reply: Message, lease: worker_pb2.Lease) -> str:
    """`reply` as JSON with its job's number, its tokens and every time replaced by names."""
    text = json.dumps(json_format.MessageToDict(reply, preserving_proto_field_name=True), sort_keys=True)
    text = re.sub(r'"worker_token": "[^"]+"', '"worker_token": "<token>"', text)
    return _TIME.sub('"<time>"', text.replace(lease.job_no, "<job_no>"))


async def _unary(served: Served, case: Case, request: Message) -> Message | status_pb2.Status:
    try:
        reply: Message = await getattr(served.workers, case.method)(request)
        return reply
    except grpc.aio.AioRpcError as exc:
        status: status_pb2.Status | None = rpc_status.from_call(exc)
        return status or status_pb2.Status(code=exc.code().value[0], message=exc.details() or "")


async def _framed(session: Session, call_id: int, case: Case, request: Message) -> Message | status_pb2.Status:
    reply = await session.ask(call_id, **{case.kind: request})
    which = reply.WhichOneof("reply")
    assert which is not None
    return getattr(reply, which)  # type: ignore[no-any-return]


def _reason(status: status_pb2.Status) -> str:
    """The ErrorInfo reason of `status`; empty when it has none (an INTERNAL error)."""
    for packed in status.details:
        info = error_details_pb2.ErrorInfo()
        if packed.Unpack(info):
            return info.reason
    return ""


def _code(outcome: Message | status_pb2.Status) -> int:
    return outcome.code if isinstance(outcome, status_pb2.Status) else code_pb2.OK


@pytest.mark.both_databases  # the same answers whatever the store: each call's refusals come from it
async def test_every_call_answers_through_a_session_as_its_unary_rpc(served, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    unary = {f.name for f in worker_pb2.WorkerFrame.DESCRIPTOR.oneofs_by_name["call"].fields} - {"standing_claim"}
    assert {c.kind for c in CASES} == unary  # a standing claim has no unary call: test_session_push.py
    metrics, session, problems = served.runtime.host.metrics, Session(served), []
    for call_id, case in enumerate(CASES, start=1):
        with monkeypatch.context() as patched:
            if case.breaks is not None:
                case.breaks(patched)
            method, code_name = f"jobwire.v1.WorkerService/{case.method}", code_pb2.Code.Name(case.code)
            counted = metrics.count(method, code_name)
            one = await case.prepare(served, case.name)
            # A refusal asks twice about one job; a reply needs a job of its own each way.
            other = one if case.code else await case.prepare(served, case.name)
            unary = await _unary(served, case, case.request(one))
            framed = await _framed(session, call_id, case, case.request(other))
        if (_code(unary), _code(framed)) != (case.code, case.code):
            problems.append(f"{case.name}: unary {_code(unary)}, session {_code(framed)}, expected {case.code}")
        elif isinstance(unary, status_pb2.Status):
            if unary != framed:
                problems.append(f"{case.name}: unary refused with {unary}, the session with {framed}")
            elif _reason(unary) != case.reason or "/srv" in unary.message:
                problems.append(f"{case.name}: {_reason(unary)} {unary.message!r}, expected {case.reason}")
        elif _normal(unary, one) != _normal(framed, other):
            problems.append(f"{case.name}: unary {_normal(unary, one)}\n  session {_normal(framed, other)}")
        if metrics.count(method, code_name) != counted + 2:
            problems.append(f"{case.name}: {method} {code_name} counted {metrics.count(method, code_name) - counted}")
    assert not problems, "\n".join(problems)
    assert await session.close() == grpc.StatusCode.OK


# -- around the table ---------------------------------------------------------------------------


async def test_replies_come_as_calls_finish_matched_by_call_id(served) -> None:  # type: ignore[no-untyped-def]
    """A Claim waiting for work holds up nothing behind it; a half-close lets it finish."""
    lease = await leased(served, "busy")
    session = Session(served)
    await session.send(1, claim=claim_request("late", wait=LONG_WAIT_S))
    await claims_waiting(served)
    beat = worker_pb2.HeartbeatRequest(worker_id="w1", leases=[worker_pb2.LeaseRef(**ref(lease))])
    await session.send(2, heartbeat=beat)
    second = await session.reply()
    assert second.call_id == 2 and second.heartbeat.leases[0].state == worker_pb2.LeaseState.OK
    await session.call.done_writing()  # the Claim is still in flight: it is answered all the same
    job = await submit(served, "late")
    first = await woken(asyncio.ensure_future(session.reply()))
    assert first.call_id == 1 and [lease.job_no for lease in first.claim.leases] == [job.job_no]
    assert await session.call.read() is grpc.aio.EOF
    assert await session.call.code() == grpc.StatusCode.OK


async def test_a_full_session_reads_no_frame_until_an_answer_is_written(served) -> None:  # type: ignore[no-untyped-def]
    """Flow control: with MAX_IN_FLIGHT Claims waiting, a Heartbeat sent after them is read,
    so answered, only once one of them has been answered."""
    session = Session(served)
    for call_id in range(1, session_module.MAX_IN_FLIGHT + 1):
        await session.send(call_id, claim=claim_request("full", wait=LONG_WAIT_S))
    await claims_waiting(served, session_module.MAX_IN_FLIGHT)
    await session.send(1000, heartbeat=worker_pb2.HeartbeatRequest(worker_id="w1"))
    job = await submit(served, "full")
    first = await woken(asyncio.ensure_future(session.reply()))
    assert [lease.job_no for lease in first.claim.leases] == [job.job_no]
    assert (await session.reply()).call_id == 1000
    session.call.cancel()


async def test_a_bad_frame_is_refused_alone_and_the_session_goes_on(served) -> None:  # type: ignore[no-untyped-def]
    session = Session(served)
    empty = await session.ask(5)  # a frame carrying no call
    assert (empty.error.code, _reason(empty.error), _fields(empty.error)) == (INVALID, "INVALID_ARGUMENT", ["call"])
    await session.send(7, claim=claim_request("slow", wait=LONG_WAIT_S))
    await claims_waiting(served)
    again = await session.ask(7, heartbeat=worker_pb2.HeartbeatRequest(worker_id="w1"))  # 7 is in flight
    assert (again.error.code, _fields(again.error)) == (INVALID, ["call_id"])
    beat = await session.ask(8, heartbeat=worker_pb2.HeartbeatRequest(worker_id="w1"))
    assert beat.WhichOneof("reply") == "heartbeat"
    job = await submit(served, "slow")
    claimed = await woken(asyncio.ensure_future(session.reply()))
    assert claimed.call_id == 7 and [lease.job_no for lease in claimed.claim.leases] == [job.job_no]
    assert await session.close() == grpc.StatusCode.OK


def _fields(status: status_pb2.Status) -> list[str]:
    """The fields a BadRequest of `status` names."""
    for packed in status.details:
        bad = error_details_pb2.BadRequest()
        if packed.Unpack(bad):
            return [v.field for v in bad.field_violations]
    return []


TOKENS = [
    Token("s-acme-worker", "acme", "worker"),
    Token("s-acme-client", "acme", "client"),
    Token("s-globex-worker", "globex", "worker"),
]


async def test_a_session_is_authenticated_once_as_a_worker_of_its_tenant(database_url: str, tmp_path: Path) -> None:
    served = await start_server(database_url, auth_file=write_auth_file(tmp_path / "auth.toml", TOKENS))
    try:
        for metadata, code in [
            ((), grpc.StatusCode.UNAUTHENTICATED),
            ((("authorization", "Bearer not-a-token"),), grpc.StatusCode.UNAUTHENTICATED),
            (TOKENS[1].metadata, grpc.StatusCode.PERMISSION_DENIED),  # a client's token
        ]:
            exc = await rpc_failure(Session(served, metadata).call.read())
            assert (exc.code(), error_reason(exc)) == (code, code.name), metadata
        job = (await served.jobs.Submit(job_pb2.SubmitRequest(job_type="mine"), metadata=TOKENS[1].metadata)).job
        theirs = await Session(served, TOKENS[2].metadata).ask(1, claim=claim_request("mine"))
        assert list(theirs.claim.leases) == []  # another tenant's worker sees no acme job
        ours = Session(served, TOKENS[0].metadata)
        (lease,) = (await ours.ask(1, claim=claim_request("mine"))).claim.leases
        assert (lease.job_no, lease.tenant) == (job.job_no, "acme")
        assert await ours.close() == grpc.StatusCode.OK
    finally:
        await stop_server(served)


async def test_a_frame_that_does_not_parse_ends_the_session_after_its_calls(served) -> None:  # type: ignore[no-untyped-def]
    """No call_id to answer it by: the stream ends INVALID_ARGUMENT once the calls before it are answered."""
    raw = served.channel.stream_stream(f"/{SESSION}", response_deserializer=worker_pb2.ServerFrame.FromString)
    heartbeat = worker_pb2.WorkerFrame(call_id=1, heartbeat=worker_pb2.HeartbeatRequest(worker_id="w1"))
    unparsed = bytes([(3 << 3) | 2, 4, (1 << 3) | 2, 2, 0xFF, 0xFE])  # a heartbeat whose worker_id is not UTF-8
    call = raw(iter([heartbeat.SerializeToString(), unparsed]))
    answered = await call.read()
    assert answered.call_id == 1 and answered.WhichOneof("reply") == "heartbeat"
    exc = await rpc_failure(call.read())
    assert (exc.code(), error_reason(exc)) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT")


def hold_claims_in_their_transaction(served: Served, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    """A Claim's transaction waits at a gate (the commits' run) until the test opens it."""
    held, gate, run = asyncio.Event(), asyncio.Event(), served.runtime.commits._run

    async def gated(work: Any) -> Any:
        if any(isinstance(item, Claim) for item in work):
            held.set()
            await gate.wait()
        return await run(work)

    monkeypatch.setattr(served.runtime.commits, "_run", gated)
    return held, gate


def hold_claim_replies(served: Served, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    """A Claim's reply holding a lease is never written: it waits at a gate the test never opens."""
    return hold_writes(monkeypatch, lambda frame: bool(frame.claim.leases))


@pytest.mark.parametrize(
    ("hold", "note"),
    [
        (hold_claims_in_their_transaction, "claim not delivered: the caller left"),
        (hold_claim_replies, "claim not delivered: the reply was not delivered"),
    ],
    ids=["in-its-transaction", "reply-unwritten"],
)
async def test_a_cancelled_session_hands_back_the_lease_its_claim_took(served, monkeypatch, hold, note) -> None:  # type: ignore[no-untyped-def]
    job = await submit(served, "handed")
    held, gate = hold(served, monkeypatch)
    session = Session(served)
    await session.send(1, claim=claim_request("handed"))
    await asyncio.wait_for(held.wait(), 10)
    session.call.cancel()

    async def ended() -> bool:
        return served.runtime.host.metrics.count(SESSION, "CANCELLED") == 1

    await eventually(ended, what="the server saw the session end")
    gate.set()  # the Claim's transaction commits now, for a worker long gone
    back = await eventually(when(served, job.job_no, lambda j: j.status == job_pb2.Job.QUEUED and j.attempt == 1))
    assert back.status == job_pb2.Job.QUEUED
    trail = [(e.kind, e.detail) for e in await events(served, job.job_no)]
    assert trail[-2:] == [("CLAIMED", ""), ("RELEASED", note)], trail
