"""JobClient, AdminClient and jobctl against scripted servicers on a real gRPC server.

The servicers below script what jobapi answers in cases the real server cannot be made to
produce on demand (streams dropped after N updates, a server stopped and started again on
its port, errors with google.rpc.ErrorInfo and BadRequest), so the client's retry, resume
and decoding behaviour is tested over real HTTP/2 on loopback.

A service test, not a unit test: every test here does network I/O through a grpc server
on 127.0.0.1 (and restarts it), though no database. tests/unit/client/ tests the same
client parts with no network at all.
"""

from __future__ import annotations

import io
import threading
from collections import Counter, defaultdict
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status
from rich.console import Console

from jobwire.client import (
    AdminClient,
    Backoff,
    ChannelConfig,
    FailedPreconditionError,
    InvalidArgumentError,
    JobClient,
    NotFoundError,
    RetrySettings,
    UnavailableError,
    aio_channel,
)
from jobwire.client.cli import run
from jobwire.client.status import error_reason
from jobwire.v1 import admin_pb2, admin_pb2_grpc, job_pb2, job_pb2_grpc

pytestmark = pytest.mark.timeout(30)
Job = job_pb2.Job
FAST = RetrySettings(
    unary_backoff=Backoff(initial=0.01, maximum=0.05),
    watch_backoff=Backoff(initial=0.02, maximum=0.2),
)
JOB_NO = "PT-20261008-001"


def abort(context: grpc.ServicerContext, code: grpc.StatusCode, reason: str, msg: str) -> None:
    """Fail the call as jobwire does: canonical code + ErrorInfo(domain jobwire)."""
    status = status_pb2.Status(code=getattr(code_pb2, code.name), message=msg)
    detail = any_pb2.Any()
    detail.Pack(error_details_pb2.ErrorInfo(reason=reason, domain="jobwire"))
    status.details.append(detail)
    if reason == "INVALID_ARGUMENT":
        bad = error_details_pb2.BadRequest()
        bad.field_violations.add(field="job_type", description="must match [A-Za-z0-9]...")
        status.details.add().Pack(bad)
    context.abort_with_status(rpc_status.to_status(status))


def history(job_no: str = JOB_NO, *, total: int | None = None, end: int = Job.READY) -> list[Job]:
    """Versions 1..6 of a job: queued, four stages of progress, then `end`."""

    def running(version: int, index: int, stage: str, done: int) -> Job:
        progress = job_pb2.Progress(stage_index=index, stage_count=4, processed_units=done)
        if total is not None and stage == "PROCESSING":
            progress.total_units, progress.percent = total, done * 100 // total
        display = job_pb2.Display(status_label="Processing", stage_label=stage.title())
        return Job(
            job_no=job_no,
            version=version,
            status=Job.RUNNING,
            stage=stage,
            progress=progress,
            display=display,
            attempt=1,
            max_attempts=3,
        )

    last = Job(job_no=job_no, version=6, status=end)  # type: ignore[arg-type]
    if end == Job.READY:
        last.result.CopyFrom(job_pb2.Artifact(uri="s3://out/v.mp4", size_bytes=2048, sha256="c" * 64))
    if end == Job.FAILED:
        last.error.CopyFrom(
            job_pb2.JobError(
                category=job_pb2.JobError.TIMEOUT, stage="PROCESSING", message="took too long", retryable=True
            )
        )
    queued = Job(job_no=job_no, version=1, status=Job.QUEUED, queue_position=0)
    return [
        queued,
        running(2, 1, "PREPARING", 0),
        running(3, 2, "PROCESSING", 10),
        running(4, 2, "PROCESSING", 20),
        running(5, 3, "VERIFYING", 0),
        last,
    ]


class FakeJobs(job_pb2_grpc.JobServiceServicer):
    """A scripted JobService: fixed job histories, injected failures, recorded calls."""

    def __init__(self) -> None:
        self.jobs: dict[str, list[Job]] = {JOB_NO: history()}
        self.fail: defaultdict[str, list[grpc.StatusCode]] = defaultdict(list)
        self.calls: Counter[str] = Counter()
        self.watch_after: list[int] = []
        self.drops: list[int] = []  # per watch connection: updates sent before UNAVAILABLE
        self.hold = threading.Event()  # set: watches stop after `hold_at` and wait
        self.released = threading.Event()
        self.hold_at = 0
        self.keys: dict[str, str] = {}

    def _enter(self, method: str, context: grpc.ServicerContext) -> None:
        self.calls[method] += 1
        if self.fail[method]:
            context.abort(self.fail[method].pop(0), "database unavailable")

    def _current(self, job_no: str, context: grpc.ServicerContext) -> Job:
        if job_no not in self.jobs:
            abort(context, grpc.StatusCode.NOT_FOUND, "JOB_NOT_FOUND", "No such job.")
        return self.jobs[job_no][-1]

    def Submit(self, request: job_pb2.SubmitRequest, context: Any) -> job_pb2.SubmitResponse:
        self._enter("Submit", context)
        if request.job_type == "bad type":
            abort(context, grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT", "job_type: bad")
        if request.idempotency_key in self.keys:
            return job_pb2.SubmitResponse(job=self.jobs[self.keys[request.idempotency_key]][-1])
        job_no = f"PT-20261008-{len(self.jobs) + 1:03d}"
        job = Job(
            job_no=job_no,
            job_type=request.job_type,
            queue=request.queue or "default",
            owner=request.owner,
            labels=request.labels,
            status=Job.QUEUED,
            version=1,
        )
        self.jobs[job_no] = [job]
        if request.idempotency_key:
            self.keys[request.idempotency_key] = job_no
        return job_pb2.SubmitResponse(job=job, created=True)

    def Get(self, request: job_pb2.GetRequest, context: Any) -> Job:
        self._enter("Get", context)
        return self._current(request.job_no, context)

    def Cancel(self, request: job_pb2.CancelRequest, context: Any) -> Job:
        self._enter("Cancel", context)
        job = self._current(request.job_no, context)
        if job.status == Job.READY:
            abort(
                context, grpc.StatusCode.FAILED_PRECONDITION, "JOB_NOT_CANCELLABLE", "The job cannot be cancelled now."
            )
        return job

    def Retry(self, request: job_pb2.RetryRequest, context: Any) -> Job:
        self._enter("Retry", context)
        job = self._current(request.job_no, context)
        if job.status != Job.FAILED or not job.error.retryable:
            abort(context, grpc.StatusCode.FAILED_PRECONDITION, "NOT_RETRYABLE", "The job cannot be retried.")
        queued = Job(job_no=job.job_no, status=Job.QUEUED, version=job.version + 1)
        self.jobs[job.job_no].append(queued)
        return queued

    def WatchJobs(self, request: job_pb2.WatchJobsRequest, context: Any) -> Iterator[job_pb2.JobUpdate]:
        context.abort(grpc.StatusCode.UNIMPLEMENTED, "not in this fake")
        yield job_pb2.JobUpdate()

    def ListJobs(self, request: job_pb2.ListJobsRequest, context: Any) -> job_pb2.ListJobsResponse:
        self._enter("ListJobs", context)
        jobs = [versions[-1] for _, versions in sorted(self.jobs.items())]
        start, size = int(request.page_token or 0), request.page_size or 2
        token = str(start + size) if start + size < len(jobs) else ""
        return job_pb2.ListJobsResponse(jobs=jobs[start : start + size], next_page_token=token)

    def WatchStatus(self, request: job_pb2.WatchStatusRequest, context: Any) -> Iterator[job_pb2.JobUpdate]:
        self._enter("WatchStatus", context)
        versions = self.jobs.get(request.job_no) or [self._current(request.job_no, context)]
        connection = len(self.watch_after)
        self.watch_after.append(request.after_version)
        budget = self.drops[connection] if connection < len(self.drops) else None
        # Decided when the stream opens: read at each version instead, a loaded machine could
        # let the test clear `hold` before this thread reached the next version, and the
        # stream meant to stop at `hold_at` would send one more.
        holds = self.hold.is_set()
        for sent, job in enumerate(v for v in versions if v.version > request.after_version):
            if budget is not None and sent == budget:
                context.abort(grpc.StatusCode.UNAVAILABLE, "server shutting down")
            if holds and job.version > self.hold_at:
                self.released.wait(10)  # the test stops this server meanwhile
                return
            yield job_pb2.JobUpdate(job=job)


class FakeAdmin(admin_pb2_grpc.AdminServiceServicer):
    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.fail_requeue: list[grpc.StatusCode] = []

    def Inspect(self, request: admin_pb2.InspectRequest, context: Any) -> admin_pb2.InspectResponse:
        finding = admin_pb2.Finding(
            kind=admin_pb2.Finding.STALLED,
            job_no=JOB_NO,
            queue="video",
            status=Job.RUNNING,
            stage="PROCESSING",
            worker_id="w-7",
            processed_units=10,
            checkpoint_present=True,
        )
        return admin_pb2.InspectResponse(findings=[finding])

    def ListEvents(self, request: admin_pb2.ListEventsRequest, context: Any) -> admin_pb2.ListEventsResponse:
        events = [
            admin_pb2.JobEvent(version=1, kind="SUBMITTED", to_status=Job.QUEUED),
            admin_pb2.JobEvent(
                version=2, kind="CLAIMED", from_status=Job.QUEUED, to_status=Job.RUNNING, worker_id="w-7", attempt=1
            ),
        ]
        title = "Import customers-2026-11.csv"  # the job's, on every page
        if not request.page_token:
            return admin_pb2.ListEventsResponse(events=events[:1], next_page_token="1", title=title)
        return admin_pb2.ListEventsResponse(events=events[1:], title=title)

    def Requeue(self, request: admin_pb2.RequeueRequest, context: Any) -> Job:
        self.calls["Requeue"] += 1
        if self.fail_requeue:
            context.abort(self.fail_requeue.pop(0), "database unavailable")
        return Job(job_no=request.job_no, status=Job.QUEUED, version=9)

    def ListWorkers(self, request: admin_pb2.ListWorkersRequest, context: Any) -> admin_pb2.ListWorkersResponse:
        worker = admin_pb2.WorkerInfo(worker_id="w-7", queues=["video"], job_types=["transcode"], leases_held=1)
        return admin_pb2.ListWorkersResponse(workers=[worker])


class RecordMetadata(grpc.ServerInterceptor):  # type: ignore[misc]
    def __init__(self) -> None:
        self.seen: list[dict[str, str]] = []

    def intercept_service(self, continuation: Any, details: Any) -> Any:
        self.seen.append(dict(details.invocation_metadata))
        return continuation(details)


class Fake:
    """One server process worth of fakes, restartable on the same port."""

    def __init__(self) -> None:
        self.jobs, self.admin, self.recorder = FakeJobs(), FakeAdmin(), RecordMetadata()
        self.port = 0
        self.server = self.start()

    def start(self) -> grpc.Server:
        server = grpc.server(futures.ThreadPoolExecutor(16), interceptors=[self.recorder])
        job_pb2_grpc.add_JobServiceServicer_to_server(self.jobs, server)
        admin_pb2_grpc.add_AdminServiceServicer_to_server(self.admin, server)
        self.port = server.add_insecure_port(f"127.0.0.1:{self.port}")
        server.start()
        return server

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"


@pytest.fixture
def fake() -> Iterator[Fake]:
    f = Fake()
    yield f
    f.server.stop(0)


@pytest.fixture
def client(fake: Fake) -> Iterator[JobClient]:
    with JobClient.connect(fake.target, retry=FAST) as c:
        yield c


# ---- watch -----------------------------------------------------------------------------


def test_watch_resumes_after_dropped_streams_without_gaps_or_duplicates(fake: Fake, client: JobClient) -> None:
    fake.jobs.drops = [2, 1]  # the first stream breaks after 2 updates, the second after 1
    versions = [job.version for job in client.watch(JOB_NO)]
    assert versions == [1, 2, 3, 4, 5, 6]
    assert fake.jobs.watch_after == [0, 2, 3]


def test_watch_survives_a_server_restart(fake: Fake, client: JobClient) -> None:
    fake.jobs.hold_at, seen = 3, []
    fake.jobs.hold.set()
    for job in client.watch(JOB_NO):
        seen.append(job.version)
        if job.version == 3:  # kill the server mid-watch; bring a new one up a bit later
            # The old server sends nothing past version 3 until its stop has completed: the
            # hold stays on, and a handler held (or reached by a reconnect while the port
            # closes) returns at once. Only the new server, started after, goes on.
            stopped = fake.server.stop(0)
            fake.jobs.released.set()
            stopped.wait(5)
            fake.jobs.hold.clear()
            threading.Timer(0.3, lambda: setattr(fake, "server", fake.start())).start()
    assert seen == [1, 2, 3, 4, 5, 6]
    # Every reconnect resumes after the last version seen, never from the start.
    reconnects = fake.jobs.watch_after[1:]
    assert fake.jobs.watch_after[0] == 0 and reconnects and set(reconnects) == {3}


def test_watch_of_an_unknown_job_fails_at_once(fake: Fake, client: JobClient) -> None:
    with pytest.raises(NotFoundError) as caught:
        list(client.watch("PT-20261008-999"))
    assert caught.value.reason == "JOB_NOT_FOUND"
    assert fake.jobs.calls["WatchStatus"] == 1


def test_watch_resumed_at_the_terminal_version_ends_at_once(client: JobClient) -> None:
    assert list(client.watch(JOB_NO, after_version=6)) == []


# ---- unary calls and errors --------------------------------------------------------------


def test_unary_calls_retry_on_unavailable(fake: Fake, client: JobClient) -> None:
    fake.jobs.fail["Get"] = [grpc.StatusCode.UNAVAILABLE] * 2
    assert client.get(JOB_NO).version == 6
    assert fake.jobs.calls["Get"] == 3


def test_retries_stop_after_the_bound(fake: Fake, client: JobClient) -> None:
    fake.jobs.fail["Get"] = [grpc.StatusCode.UNAVAILABLE] * 10
    with pytest.raises(UnavailableError):
        client.get(JOB_NO)
    assert fake.jobs.calls["Get"] == FAST.unary_attempts


def test_submit_is_retried_only_with_an_idempotency_key(fake: Fake, client: JobClient) -> None:
    fake.jobs.fail["Submit"] = [grpc.StatusCode.UNAVAILABLE]
    with pytest.raises(UnavailableError):
        client.submit("transcode", {"video": "v.mp4"})
    assert fake.jobs.calls["Submit"] == 1
    fake.jobs.fail["Submit"] = [grpc.StatusCode.UNAVAILABLE]
    job, created = client.submit("transcode", {"video": "v.mp4"}, idempotency_key="k1")
    assert created and fake.jobs.calls["Submit"] == 3
    again, created_again = client.submit("transcode", {"video": "v.mp4"}, idempotency_key="k1")
    assert again.job_no == job.job_no and not created_again


def test_errors_carry_code_reason_and_message(client: JobClient) -> None:
    with pytest.raises(NotFoundError) as missing:
        client.get("PT-20261008-999")
    assert (missing.value.reason, missing.value.message) == ("JOB_NOT_FOUND", "No such job.")
    with pytest.raises(FailedPreconditionError) as refused:
        client.cancel(JOB_NO)
    assert refused.value.reason == "JOB_NOT_CANCELLABLE"
    with pytest.raises(InvalidArgumentError) as invalid:
        client.submit("bad type")
    assert invalid.value.violations == (("job_type", "must match [A-Za-z0-9]..."),)


def test_retry_queues_a_retryable_failed_job_once(fake: Fake, client: JobClient) -> None:
    fake.jobs.jobs[JOB_NO] = history(end=Job.FAILED)
    assert client.retry(JOB_NO).status == Job.QUEUED
    with pytest.raises(FailedPreconditionError) as again:
        client.retry(JOB_NO)
    assert again.value.reason == "NOT_RETRYABLE"


def test_list_jobs_follows_pages(fake: Fake, client: JobClient) -> None:
    for n in range(4):
        client.submit("transcode", idempotency_key=f"page-{n}")
    assert len(list(client.list_jobs(page_size=2))) == 5
    assert fake.jobs.calls["ListJobs"] == 3
    assert len(list(client.list_jobs(page_size=2, limit=3))) == 3


def test_token_travels_as_bearer_metadata_on_plain_text(fake: Fake) -> None:
    with JobClient.connect(fake.target, token="s3cret") as c:
        c.get(JOB_NO)
    assert fake.recorder.seen[-1]["authorization"] == "Bearer s3cret"


async def test_aio_channel_sends_the_token_too(fake: Fake) -> None:
    async with aio_channel(ChannelConfig(target=fake.target, token="w0rker")) as channel:
        await job_pb2_grpc.JobServiceStub(channel).Get(job_pb2.GetRequest(job_no=JOB_NO))
    assert fake.recorder.seen[-1]["authorization"] == "Bearer w0rker"


def test_admin_client(fake: Fake) -> None:
    with AdminClient.connect(fake.target, retry=FAST) as admin:
        assert admin.inspect(stalled_after=5)[0].kind == admin_pb2.Finding.STALLED
        assert [e.version for e in admin.list_events(JOB_NO)] == [1, 2]
        pages = [(p.title, [e.version for e in p.events]) for p in admin.list_event_pages(JOB_NO)]
        assert pages == [("Import customers-2026-11.csv", [1]), ("Import customers-2026-11.csv", [2])]
        assert [w.worker_id for w in admin.list_workers()] == ["w-7"]
        fake.admin.fail_requeue = [grpc.StatusCode.UNAVAILABLE]
        with pytest.raises(UnavailableError):  # an operator's decision is never repeated blindly
            admin.requeue(JOB_NO, reason="host died")
        assert fake.admin.calls["Requeue"] == 1
        assert admin.requeue(JOB_NO, reason="host died").status == Job.QUEUED


# ---- jobctl ------------------------------------------------------------------------------


def jobctl(fake: Fake, *argv: str, terminal: bool = False) -> tuple[int, str, str]:
    out = Console(file=io.StringIO(), record=True, width=120, force_terminal=terminal, color_system=None)
    err = Console(file=io.StringIO(), record=True, width=200, color_system=None)
    code = run(["--target", fake.target, *argv], out=out, err=err, env={})
    return code, out.export_text(), err.export_text()


@pytest.mark.parametrize("terminal", [False, True])
def test_jobctl_watch_shows_no_percent_for_unknown_totals(fake: Fake, terminal: bool) -> None:
    code, out, _ = jobctl(fake, "watch", JOB_NO, terminal=terminal)
    assert code == 0
    assert "stage 2/4" in out and "20 units" in out
    assert "%" not in out
    assert "s3://out/v.mp4" in out and "c" * 64 in out and "2.0 KiB" in out


@pytest.mark.parametrize("terminal", [False, True])
def test_jobctl_watch_shows_the_percent_for_known_totals(fake: Fake, terminal: bool) -> None:
    fake.jobs.jobs[JOB_NO] = history(total=40)
    code, out, _ = jobctl(fake, "watch", JOB_NO, terminal=terminal)
    assert code == 0 and "20/40 units" in out and "50%" in out


def test_jobctl_watch_exit_codes_and_error_category(fake: Fake) -> None:
    fake.jobs.jobs[JOB_NO] = history(end=Job.FAILED)
    code, out, _ = jobctl(fake, "watch", JOB_NO)
    assert code == 1 and "TIMEOUT in stage PROCESSING" in out and "took too long" in out
    fake.jobs.jobs[JOB_NO] = history(end=Job.CANCELLED)
    assert jobctl(fake, "watch", JOB_NO)[0] == 3


def test_jobctl_errors_are_one_line_on_stderr_then_what_to_do(fake: Fake) -> None:
    code, out, err = jobctl(fake, "get", "PT-20261008-999")
    assert (code, out) == (4, "")
    assert err.splitlines() == [
        "error: NOT_FOUND JOB_NOT_FOUND: No such job.",
        "  no job PT-20261008-999 that this token can see: numbers are per tenant, and a token sees its queues'",
    ]


def test_jobctl_submit_list_and_operator_tables(fake: Fake) -> None:
    code, out, _ = jobctl(fake, "submit", "transcode", "--payload", '{"v": 1}', "--label", "a=b")
    assert code == 0 and "PT-20261008-002 submitted" in out and "a=b" in out
    code, out, _ = jobctl(fake, "--json", "get", "PT-20261008-002")
    assert code == 0 and '"job_no": "PT-20261008-002"' in out
    assert "PT-20261008-002" in jobctl(fake, "list")[1]
    assert "STALLED" in jobctl(fake, "inspect")[1]
    assert "QUEUED → RUNNING" in jobctl(fake, "events", JOB_NO)[1]
    assert "w-7" in jobctl(fake, "workers")[1]
    assert jobctl(fake, "requeue", JOB_NO, "--reason", "host died")[0] == 0
    code, _, err = jobctl(fake, "retry", JOB_NO)
    assert code == 4 and err.startswith("error: FAILED_PRECONDITION NOT_RETRYABLE: ")


async def test_error_reason_reads_grpc_aio_errors_too(fake: Fake) -> None:
    # The worker runtime calls error_reason() on grpc.aio errors (WORKER_LEASE_LOST).
    async with aio_channel(ChannelConfig(target=fake.target)) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await job_pb2_grpc.JobServiceStub(channel).Get(job_pb2.GetRequest(job_no="PT-20261008-999"))
    assert error_reason(caught.value) == "JOB_NOT_FOUND"
