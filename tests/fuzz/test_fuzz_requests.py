"""A fuzzer over every request message of every RPC, against a running server.

For each RPC, hypothesis builds requests from the message's descriptor (tests/fuzz/
strategies.py) and sends them over real gRPC. Whatever arrives:

* the answer is never UNKNOWN or INTERNAL, and never shows a Python class or a trace;
* a refused call writes no row anywhere (no housekeeping runs, so every row is a call's);
* the server keeps serving: a Get of a known job answers after every example.

Many examples are refused early; live job numbers and lease tokens are mixed into the
text fields so that others reach the deeper checks. The number of examples per RPC is
JOBWIRE_FUZZ_EXAMPLES (default 40; the issue's note quotes a run at 300).
"""

from __future__ import annotations

import os
import re
from collections import Counter

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from live_server import LiveServer
from strategies import MODULES, build, message_dict, request_class

from jobwire.v1 import job_pb2, worker_pb2

EXAMPLES = int(os.environ.get("JOBWIRE_FUZZ_EXAMPLES", "40"))
CALL_TIMEOUT_S = 3.0
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


@pytest.fixture(scope="module")
def known(live: LiveServer) -> list[str]:
    """Job numbers and tokens of jobs in every state, for requests to aim at."""
    out = []
    spec = worker_pb2.JobTypeSpec(name="frames")
    for _ in range(3):
        out.append(live.jobs.Submit(job_pb2.SubmitRequest(job_type="frames")).job.job_no)
    leases = live.workers.Claim(worker_pb2.ClaimRequest(worker_id="fuzz", job_types=[spec], max_jobs=2)).leases
    out += [lease.worker_token for lease in leases]
    live.workers.Fail(worker_pb2.FailRequest(job_no=leases[1].job_no, worker_token=leases[1].worker_token, message="x"))
    return out


@pytest.fixture(scope="module", autouse=True)
def report_counts() -> object:
    yield
    total = sum(SEEN.values())
    print(
        f"\nfuzzer: {total} requests over {len(SEEN)} RPCs: " + ", ".join(f"{k} {v}" for k, v in sorted(SEEN.items()))
    )


def _send(live: LiveServer, service: object, method: object, request: object) -> grpc.RpcError | None:
    path = f"/{service.full_name}/{method.name}"  # type: ignore[attr-defined]
    raw = request.SerializeToString()  # type: ignore[attr-defined]
    try:
        if method.server_streaming:  # type: ignore[attr-defined]
            call = live.channel.unary_stream(path)(raw, timeout=CALL_TIMEOUT_S)
            next(iter(call), None)
            call.cancel()
        else:
            live.channel.unary_unary(path)(raw, timeout=CALL_TIMEOUT_S)
    except grpc.RpcError as error:
        if error.code() == grpc.StatusCode.CANCELLED:  # our own cancel after the first message
            return None
        return error
    return None


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("service", "method"), METHODS, ids=[f"{s.name}.{m.name}" for s, m in METHODS])
def test_any_request_gets_a_canonical_answer_and_a_refusal_writes_nothing(
    live: LiveServer, known: list[str], service: object, method: object
) -> None:
    cls = request_class(method)

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None, suppress_health_check=SLOW_OK)
    @given(values=message_dict(cls.DESCRIPTOR, known))
    def one(values: dict[str, object]) -> None:
        try:
            request = build(cls, values)
            request.SerializeToString()
        except (ValueError, TypeError):
            return  # protobuf itself will not encode it: no such request can be sent
        SEEN[f"{service.name}.{method.name}"] += 1  # type: ignore[attr-defined]
        before = live.rows()
        error = _send(live, service, method, request)
        if error is not None:
            code, details = error.code(), error.details() or ""
            assert code not in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL), (code, details, request)
            assert not LEAKS.search(details), (code, details)
            if code in REFUSED:
                assert live.rows() == before, (code, details, request)
        assert live.jobs.Get(job_pb2.GetRequest(job_no=known[0]), timeout=5).job_no == known[0]

    one()
