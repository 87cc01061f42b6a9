"""A stateful model test: random sequences of worker and user calls, checked against a model.

Hypothesis drives Submit, Claim, Heartbeat, ReportStage, Complete, Fail, Cancel,
ConfirmCancel and Release, calls made with stale and forged tokens, and a lease left to
expire, against a running server. After every step each job the model knows must read
back (Get) exactly as the model says: its status, stage and progress; its version never
goes back; a percent only with a known total; and Inspect's two invariants stay empty.

Each example uses a job type of its own, so it claims only its own jobs.
"""

from __future__ import annotations

import functools
import os
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from live_server import LiveServer

from jobwire.v1 import admin_pb2, job_pb2, worker_pb2

pytestmark = pytest.mark.timeout(600)
STAGES = ("PREPARING", "PROCESSING", "VERIFYING", "DELIVERING")  # the default plan
CANCELLABLE = {1, 2, 3}
SHA = "ab" * 32
LOST = (grpc.StatusCode.FAILED_PRECONDITION, "WORKER_LEASE_LOST")
EXAMPLES = int(os.environ.get("JOBWIRE_MODEL_EXAMPLES", "25"))  # `make fuzz`: 200
MAX_JOBS = 6  # few jobs, many calls on each: the rules meet in every state
SEEN: Counter[str] = Counter()  # what the examples reached, printed at the end
F = TypeVar("F", bound=Callable[..., Any])


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    path: Path = tmp_path_factory.mktemp("model") / "jobwire.db"
    server = LiveServer(f"sqlite:///{path}", reaper_interval_seconds=0.1, stall_grace_seconds=0.1)
    try:
        yield server
    finally:
        server.close()


@dataclass
class Job:
    order: int
    status: str = "QUEUED"
    token: str | None = None
    ended: tuple[str, str] | None = None  # (token, kind) of the last ending call
    stage: int = 0
    processed: int = 0
    total: int | None = None
    version: int = 0
    old_tokens: list[str] = field(default_factory=list)


def counted(fn: F) -> F:
    """Counts each run of a rule in SEEN."""

    @functools.wraps(fn)
    def run(*args: object, **kwargs: object) -> object:
        SEEN[fn.__name__] += 1
        return fn(*args, **kwargs)

    return run  # type: ignore[return-value]


def _reason(error: grpc.RpcError) -> tuple[grpc.StatusCode, str | None]:
    from jobwire.client.status import error_reason

    return error.code(), error_reason(error)


class Lifecycle(RuleBasedStateMachine):
    live: LiveServer

    def __init__(self) -> None:
        super().__init__()
        self.job_type = f"m{uuid.uuid4().hex[:10]}"
        self.jobs: dict[str, Job] = {}
        self.expired = False

    # -- helpers ---------------------------------------------------------------------------
    def _held(self) -> list[str]:
        return sorted(no for no, j in self.jobs.items() if j.token is not None)

    def _call(self, fn: object, request: object) -> tuple[object | None, tuple[grpc.StatusCode, str | None] | None]:
        try:
            return fn(request, timeout=10), None  # type: ignore[operator]
        except grpc.RpcError as error:
            return None, _reason(error)

    def _end(self, job: Job, kind: str, status: str) -> None:
        assert job.token is not None
        job.ended, job.status = (job.token, kind), status
        job.old_tokens.append(job.token)
        job.token, job.stage, job.processed, job.total = None, 0, 0, None

    # -- rules -----------------------------------------------------------------------------
    @initialize()
    def two_jobs_running(self) -> None:
        """Every example starts with jobs held, so the calls on a lease have something to act on."""
        for _ in range(3):
            self.submit()
        self._claim(30)
        self._claim(30)

    @precondition(lambda self: len(self.jobs) < MAX_JOBS)
    @rule()
    @counted
    def submit(self) -> None:
        policy = job_pb2.RetryPolicy(max_attempts=100, backoff_multiplier=1.0, on_lease_lost=job_pb2.RetryPolicy.RETRY)
        policy.initial_backoff.FromSeconds(0)
        policy.max_backoff.FromSeconds(0)
        reply = self.live.jobs.Submit(job_pb2.SubmitRequest(job_type=self.job_type, retry_policy=policy))
        self.jobs[reply.job.job_no] = Job(order=len(self.jobs))

    def _claim(self, lease_s: float) -> tuple[str | None, worker_pb2.Lease | None]:
        queued = sorted((j.order, no) for no, j in self.jobs.items() if j.status == "QUEUED")
        request = worker_pb2.ClaimRequest(
            worker_id="model", job_types=[worker_pb2.JobTypeSpec(name=self.job_type)], max_jobs=1,
            lease_duration=Duration(seconds=int(lease_s)),
        )  # fmt: skip
        leases = list(self.live.workers.Claim(request, timeout=10).leases)
        expected = queued[0][1] if queued else None
        assert [lease.job_no for lease in leases] == ([expected] if expected else []), (leases, queued)
        if not leases:
            return None, None
        job = self.jobs[leases[0].job_no]
        job.status, job.token, job.stage, job.processed, job.total = "RUNNING", leases[0].worker_token, 1, 0, None
        return leases[0].job_no, leases[0]

    @rule()
    @counted
    def claim(self) -> None:
        self._claim(30)

    @rule(data=st.data())
    @counted
    def heartbeat(self, data: st.DataObject) -> None:
        if not self.jobs:
            return
        no = data.draw(st.sampled_from(sorted(self.jobs)))
        job = self.jobs[no]
        token = job.token or data.draw(st.sampled_from([*job.old_tokens, "1.forged"]))
        reply = self.live.workers.Heartbeat(
            worker_pb2.HeartbeatRequest(worker_id="model", leases=[worker_pb2.LeaseRef(job_no=no, worker_token=token)])
        )
        state = worker_pb2.LeaseState.State.Name(reply.leases[0].state)
        expected = "LOST" if token != job.token else ("CANCEL_REQUESTED" if job.status == "CANCEL_REQUESTED" else "OK")
        assert state == expected

    @precondition(lambda self: bool(self._held()))
    @rule(data=st.data(), step=st.sampled_from([0, 0, 1, 1, 3, -1]), more=st.integers(-2, 8), spare=st.integers(-1, 8))
    @counted
    def report(self, data: st.DataObject, step: int, more: int, spare: int) -> None:
        """Mostly forward, sometimes back: the stage moves by `step`, units by `more`."""
        no = data.draw(st.sampled_from(self._held()))
        self._report(data, no, step, more, spare)

    @precondition(lambda self: bool(self._held()))
    @rule(data=st.data())
    @counted
    def reports_in_a_row(self, data: st.DataObject) -> None:
        """A worker's run: several reports on one job, so later stages are reached."""
        no = data.draw(st.sampled_from(self._held()))
        for _ in range(data.draw(st.integers(2, 6))):
            step = data.draw(st.sampled_from([0, 1, 1, -1]))
            self._report(data, no, step, data.draw(st.integers(-1, 8)), data.draw(st.integers(-1, 8)))

    def _report(self, data: st.DataObject, no: str, step: int, more: int, spare: int) -> None:
        job = self.jobs[no]
        stage = min(4, max(1, job.stage + step))
        processed = max(0, job.processed + more)
        total = data.draw(st.sampled_from([None, job.total, processed + spare]))
        total = None if total is None or total < 0 else total
        request = worker_pb2.ReportStageRequest(
            job_no=no, worker_token=job.token, stage=STAGES[stage - 1], processed_units=processed, total_units=total
        )
        reply, error = self._call(self.live.workers.ReportStage, request)
        expected: tuple[grpc.StatusCode, str | None] | None = None
        effective = total
        if stage < job.stage:
            expected = (grpc.StatusCode.FAILED_PRECONDITION, "PROGRESS_REGRESSION")
        elif stage == job.stage:
            if processed < job.processed:
                expected = (grpc.StatusCode.FAILED_PRECONDITION, "PROGRESS_REGRESSION")
            elif job.total is not None and total is not None and total != job.total:
                expected = (grpc.StatusCode.FAILED_PRECONDITION, "TOTAL_CHANGED")
            else:
                effective = job.total if total is None else total
        if expected is None and effective is not None and processed > effective:
            expected = (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT")
        assert error == expected, (error, expected, stage, processed, total, job)
        SEEN[f"report: {expected[1] if expected else 'accepted'}"] += 1
        if expected is None:
            assert reply.cancel_requested == (job.status == "CANCEL_REQUESTED")  # type: ignore[attr-defined]
            job.stage, job.processed, job.total = stage, processed, effective

    @precondition(lambda self: bool(self._held()))
    @rule(data=st.data())
    @counted
    def complete(self, data: st.DataObject) -> None:
        no = data.draw(st.sampled_from(self._held()))
        result = job_pb2.Artifact(uri="s3://model/out", size_bytes=1, sha256=SHA)
        done = self.live.workers.Complete(
            worker_pb2.CompleteRequest(job_no=no, worker_token=self.jobs[no].token, result=result)
        )
        assert done.status == job_pb2.Job.READY
        self._end(self.jobs[no], "COMPLETE", "READY")

    @precondition(lambda self: bool(self._held()))
    @rule(data=st.data(), retryable=st.booleans())
    @counted
    def fail(self, data: st.DataObject, retryable: bool) -> None:
        no = data.draw(st.sampled_from(self._held()))
        job = self.jobs[no]
        request = worker_pb2.FailRequest(job_no=no, worker_token=job.token, message="no", retryable=retryable)
        done = self.live.workers.Fail(request)
        status = "CANCELLED" if job.status == "CANCEL_REQUESTED" else "QUEUED" if retryable else "FAILED"
        assert job_pb2.Job.Status.Name(done.status) == status
        self._end(job, "FAIL", status)

    @precondition(lambda self: bool(self._held()))
    @rule(data=st.data())
    @counted
    def release(self, data: st.DataObject) -> None:
        no = data.draw(st.sampled_from(self._held()))
        job = self.jobs[no]
        done = self.live.workers.Release(worker_pb2.ReleaseRequest(job_no=no, worker_token=job.token))
        status = "CANCELLED" if job.status == "CANCEL_REQUESTED" else "QUEUED"
        assert job_pb2.Job.Status.Name(done.status) == status
        self._end(job, "RELEASE", status)

    @precondition(lambda self: bool(self._held()))
    @rule(data=st.data())
    @counted
    def confirm_cancel(self, data: st.DataObject) -> None:
        no = data.draw(st.sampled_from(self._held()))
        job = self.jobs[no]
        request = worker_pb2.ConfirmCancelRequest(job_no=no, worker_token=job.token)
        done, error = self._call(self.live.workers.ConfirmCancel, request)
        if job.status == "CANCEL_REQUESTED":
            assert error is None and done.status == job_pb2.Job.CANCELLED  # type: ignore[attr-defined]
            self._end(job, "CONFIRM_CANCEL", "CANCELLED")
        else:
            assert error == (grpc.StatusCode.FAILED_PRECONDITION, "CANCEL_NOT_REQUESTED")

    @precondition(lambda self: bool(self.jobs))
    @rule(data=st.data())
    @counted
    def cancel(self, data: st.DataObject) -> None:
        self._cancel(data.draw(st.sampled_from(sorted(self.jobs))))

    @precondition(lambda self: bool(self._held()))
    @rule(data=st.data())
    @counted
    def cancel_a_running_job(self, data: st.DataObject) -> None:
        self._cancel(data.draw(st.sampled_from(self._held())))

    def _cancel(self, no: str) -> None:
        job = self.jobs[no]
        SEEN[f"cancel {job.status} in stage {job.stage}"] += 1
        done, error = self._call(self.live.jobs.Cancel, job_pb2.CancelRequest(job_no=no))
        if job.status == "QUEUED":
            job.status = "CANCELLED"
        elif job.status == "RUNNING" and job.stage in CANCELLABLE:
            job.status = "CANCEL_REQUESTED"
        elif job.status in ("RUNNING", "READY", "FAILED"):
            assert error == (grpc.StatusCode.FAILED_PRECONDITION, "JOB_NOT_CANCELLABLE"), (error, job)
            return
        assert error is None, (error, job)
        assert job_pb2.Job.Status.Name(done.status) == job.status  # type: ignore[attr-defined]

    @precondition(lambda self: any(j.old_tokens for j in self.jobs.values()))
    @rule(data=st.data(), kind=st.sampled_from(["COMPLETE", "FAIL", "RELEASE", "REPORT"]))
    @counted
    def stale_token(self, data: st.DataObject, kind: str) -> None:
        no = data.draw(st.sampled_from(sorted(no for no, j in self.jobs.items() if j.old_tokens)))
        job = self.jobs[no]
        token = data.draw(st.sampled_from(job.old_tokens))
        w = self.live.workers
        call, request = {
            "COMPLETE": (w.Complete, worker_pb2.CompleteRequest(
                job_no=no, worker_token=token, result=job_pb2.Artifact(uri="s3://x", size_bytes=1, sha256=SHA))),
            "FAIL": (w.Fail, worker_pb2.FailRequest(job_no=no, worker_token=token, message="late")),
            "RELEASE": (w.Release, worker_pb2.ReleaseRequest(job_no=no, worker_token=token)),
            "REPORT": (w.ReportStage, worker_pb2.ReportStageRequest(job_no=no, worker_token=token, stage="PREPARING")),
        }[kind]  # fmt: skip
        done, error = self._call(call, request)
        if job.ended == (token, kind):  # the same ending again: a replay answers the job as it is
            assert error is None and job_pb2.Job.Status.Name(done.status) == job.status  # type: ignore[attr-defined]
        else:
            assert error == LOST, (error, kind, job)

    @precondition(lambda self: not self.expired and any(j.status == "QUEUED" for j in self.jobs.values()))
    @rule()
    @counted
    def let_a_lease_expire(self) -> None:
        """The one slow step: a 1 s lease nobody renews; the reaper requeues its job (RETRY policy)."""
        self.expired = True
        no, _ = self._claim(1)
        assert no is not None
        deadline = time.monotonic() + 15
        while self.live.jobs.Get(job_pb2.GetRequest(job_no=no)).status != job_pb2.Job.QUEUED:
            assert time.monotonic() < deadline, "the reaper did not requeue the expired lease"
            time.sleep(0.05)
        job = self.jobs[no]
        assert job.token is not None
        job.old_tokens.append(job.token)
        job.status, job.token, job.stage, job.processed, job.total = "QUEUED", None, 0, 0, None

    # -- what must hold after every step ---------------------------------------------------
    @invariant()
    def the_server_says_what_the_model_says(self) -> None:
        for no, job in self.jobs.items():
            got = self.live.jobs.Get(job_pb2.GetRequest(job_no=no))
            assert job_pb2.Job.Status.Name(got.status) == job.status, (no, got.status, job)
            assert got.version >= job.version, (no, got.version, job.version)
            job.version = got.version
            assert not got.stalled
            progress = got.progress
            assert progress.HasField("percent") == (progress.HasField("total_units") and progress.total_units > 0)
            if job.token is not None:
                assert (got.stage, progress.processed_units) == (STAGES[job.stage - 1], job.processed)
                assert (progress.total_units if progress.HasField("total_units") else None) == job.total

    @invariant()
    def no_broken_invariants(self) -> None:
        kinds = [admin_pb2.Finding.RUNNING_WITHOUT_LEASE, admin_pb2.Finding.TERMINAL_WITH_TOKEN]
        assert list(self.live.admin.Inspect(admin_pb2.InspectRequest(kinds=kinds)).findings) == []


def test_the_server_follows_the_model(live: LiveServer) -> None:
    Lifecycle.live = live
    run_state_machine_as_test(
        Lifecycle,
        settings=settings(
            max_examples=EXAMPLES,
            stateful_step_count=40,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
    print("\nmodel test reached: " + ", ".join(f"{k} {v}" for k, v in sorted(SEEN.items())))
