"""A fuzzer over every request message of every RPC, against a running server.

For each RPC of every service the server answers (test_every_rpc_the_server_answers_is_fuzzed
asks its reflection), hypothesis builds requests from the message's descriptor (tests/fuzz/
strategies.py) and sends them over real gRPC: unary calls, server streams (the first
message), client streams (UploadResult: one to three messages). Whatever arrives:

* the answer is never UNKNOWN or INTERNAL, and never shows a Python class or a trace;
* a refused call writes no row anywhere (no housekeeping runs, so every row is a call's);
* the server keeps serving: a Get of a job no request aims at answers after every example.

First, without chance, a valid request of the RPC (tests/fuzz/seeds.py) with each number,
Duration and Timestamp in it, one at a time, at each limit of its type. Then hypothesis:
half its examples are random messages, mostly refused early (live job numbers and lease
tokens are mixed into the text fields); the other half are the valid request with one field,
anywhere in it, at any value of its type, which reach the deeper checks. The number of
hypothesis examples per RPC is JOBWIRE_FUZZ_EXAMPLES (default 20; `make fuzz` runs 300).
"""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import replace

import grpc
import pytest
from google.protobuf.descriptor_pool import DescriptorPool
from google.protobuf.message_factory import GetMessageClass
from google.rpc import status_pb2
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from live_server import LiveServer
from seeds import Targets, seed
from strategies import MODULES, at_limits, build, message_dict, mutated, request_class

from jobwire.v1 import job_pb2, schedule_pb2, worker_pb2

EXAMPLES = int(os.environ.get("JOBWIRE_FUZZ_EXAMPLES", "20"))
CALL_TIMEOUT_S = 3.0
# WaitOperation waits until its deadline for a job that does not end: a short one keeps the run short
WAIT_TIMEOUT_S = 1.0
REFUSED = {
    grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND, grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.ALREADY_EXISTS, grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED,
    grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.OUT_OF_RANGE,
}  # fmt: skip
LEAKS = re.compile(r"Traceback|<class |\.py\b|Error:|Exception|/(?:usr|tmp|home|root|work)/")
METHODS = [
    (service, method)
    for module in MODULES
    for service in module.DESCRIPTOR.services_by_name.values()
    for method in service.methods
]
SEEN: Counter[str] = Counter()
# big messages and a server round trip per example are the point here, not a health problem
SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example]


NOT_OURS = {"grpc.reflection.v1alpha.ServerReflection"}  # grpc's own two-way stream: no handler of ours


def _submit(live: LiveServer, job_type: str) -> str:
    return live.jobs.Submit(job_pb2.SubmitRequest(job_type=job_type)).job.job_no


def _lease(live: LiveServer, job_type: str) -> worker_pb2.Lease:
    _submit(live, job_type)
    spec = worker_pb2.JobTypeSpec(name=job_type)
    (lease,) = live.workers.Claim(worker_pb2.ClaimRequest(worker_id="fuzz", job_types=[spec])).leases
    return lease


def _failed(live: LiveServer, job_type: str) -> str:
    lease = _lease(live, job_type)
    live.workers.Fail(worker_pb2.FailRequest(job_no=lease.job_no, worker_token=lease.worker_token, message="x"))
    return lease.job_no


@pytest.fixture(scope="module")
def known(live: LiveServer) -> list[str]:
    """Job numbers and tokens of jobs in every state, for requests to aim at."""
    running = _lease(live, "frames")
    return [_submit(live, "frames"), running.job_no, running.worker_token, _failed(live, "frames")]


@pytest.fixture(scope="module")
def witness(live: LiveServer) -> str:
    """A job no request names: its Get answering shows the server still serves."""
    return _submit(live, "witness")


@pytest.fixture(scope="module")
def targets(live: LiveServer) -> Targets:
    batch = live.jobs.SubmitBatch(job_pb2.SubmitBatchRequest(jobs=[job_pb2.SubmitRequest(job_type="fuzz-batch")]))
    kept = schedule_pb2.CreateScheduleRequest(
        schedule_id="fuzz-kept", cron="0 3 * * *", template=job_pb2.SubmitRequest(job_type="fuzz")
    )
    live.schedules.CreateSchedule(kept)
    return Targets(
        queued=_submit(live, "fuzz-queued"), failed=_failed(live, "fuzz-failed"), doomed=_failed(live, "fuzz-doomed"),
        batch_id=batch.batch_id, schedule_id=kept.schedule_id,
    )  # fmt: skip


@pytest.fixture(scope="module", autouse=True)
def report_counts() -> object:
    yield
    total = sum(SEEN.values())
    print(
        f"\nfuzzer: {total} requests over {len(SEEN)} RPCs: " + ", ".join(f"{k} {v}" for k, v in sorted(SEEN.items()))
    )


class FrameRefusal(grpc.RpcError):
    """A call refused inside a Session's frame, read as the RpcError its unary call raises."""

    def __init__(self, status: status_pb2.Status) -> None:
        self.status = status

    def code(self) -> grpc.StatusCode:
        return next(c for c in grpc.StatusCode if c.value[0] == self.status.code)

    def details(self) -> str:
        return self.status.message


def _send(live: LiveServer, service: object, method: object, raws: list[bytes]) -> grpc.RpcError | None:
    """Call `method` with the serialized request (a client stream: every one of `raws`); its error, if any."""
    path = f"/{service.full_name}/{method.name}"  # type: ignore[attr-defined]
    timeout = WAIT_TIMEOUT_S if method.name == "WaitOperation" else CALL_TIMEOUT_S  # type: ignore[attr-defined]
    try:
        if method.client_streaming and method.server_streaming:  # type: ignore[attr-defined]
            # A Session: the stream ends OK, each call's refusal comes in its own frame.
            reply = GetMessageClass(method.output_type)  # type: ignore[attr-defined]
            frames = live.channel.stream_stream(path, response_deserializer=reply.FromString)(
                iter(raws), timeout=timeout
            )
            refused = [frame.error for frame in frames if frame.HasField("error")]
            return FrameRefusal(refused[0]) if refused else None
        if method.client_streaming:  # type: ignore[attr-defined]
            live.channel.stream_unary(path)(iter(raws), timeout=timeout)
        elif method.server_streaming:  # type: ignore[attr-defined]
            call = live.channel.unary_stream(path)(raws[0], timeout=timeout)
            next(iter(call), None)
            call.cancel()
        else:
            live.channel.unary_unary(path)(raws[0], timeout=timeout)
    except grpc.RpcError as error:
        if error.code() == grpc.StatusCode.CANCELLED:  # our own cancel after the first message
            return None
        return error
    return None


def requests(cls: type, start: dict[str, object], known: list[str], streamed: bool) -> st.SearchStrategy[list[dict]]:
    """One request's field values (a client stream: one to three), half of them a mutated seed."""
    first = st.one_of(message_dict(cls.DESCRIPTOR, known), mutated(cls.DESCRIPTOR, start, known))  # type: ignore[attr-defined]
    rest = st.lists(message_dict(cls.DESCRIPTOR, known), max_size=2 if streamed else 0)  # type: ignore[attr-defined]
    return st.tuples(first, rest).map(lambda fr: [fr[0], *fr[1]])


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("service", "method"), METHODS, ids=[f"{s.name}.{m.name}" for s, m in METHODS])
def test_any_request_gets_a_canonical_answer_and_a_refusal_writes_nothing(
    live: LiveServer, known: list[str], witness: str, targets: Targets, service: object, method: object
) -> None:
    cls = request_class(method)
    name = f"{service.name}.{method.name}"  # type: ignore[attr-defined]
    if service.name == "WorkerService":  # type: ignore[attr-defined]
        lease = _lease(live, f"fuzz-{method.name}")  # type: ignore[attr-defined]
        targets = replace(targets, job_no=lease.job_no, worker_token=lease.worker_token)

    start = seed(name, targets)

    def check(values: list[dict[str, object]]) -> None:
        try:
            sent = [build(cls, v) for v in values]
            raws = [request.SerializeToString() for request in sent]
        except (ValueError, TypeError):
            return  # protobuf itself will not encode it: no such request can be sent
        SEEN[name] += 1
        before = live.rows()
        error = _send(live, service, method, raws)
        if error is not None:
            code, details = error.code(), error.details() or ""
            assert code not in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL), (code, details, sent)
            assert not LEAKS.search(details), (code, details)
            if code in REFUSED:
                assert live.rows() == before, (code, details, sent)
        assert live.jobs.Get(job_pb2.GetRequest(job_no=witness), timeout=5).job_no == witness

    for values in at_limits(cls.DESCRIPTOR, start):
        check([values])

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None, suppress_health_check=SLOW_OK)
    @given(values=requests(cls, start, known, streamed=method.client_streaming))  # type: ignore[attr-defined]
    def one(values: list[dict[str, object]]) -> None:
        check(values)

    one()


def test_every_rpc_the_server_answers_is_fuzzed(live: LiveServer) -> None:
    """The server's reflection lists its services; each of their RPCs must be one the fuzzer sends."""
    reflected = ProtoReflectionDescriptorDatabase(live.channel)
    pool = DescriptorPool(reflected)
    served = {
        f"{name}/{method.name}"
        for name in reflected.get_services()
        if name not in NOT_OURS
        for method in pool.FindServiceByName(name).methods
    }
    fuzzed = {f"{service.full_name}/{method.name}" for service, method in METHODS}
    assert len(served) > 40, served  # the reflection answered: every service is there
    missing = sorted(served - fuzzed)
    assert not missing, f"served but not fuzzed (add their module to strategies.MODULES): {missing}"
