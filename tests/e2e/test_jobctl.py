"""jobctl and AdminClient against a real server process.

One `python -m jobwire serve --processes 1` on a fresh SQLite file, with an auth file that
holds client, worker and admin tokens for the tenant "default" and for a second tenant.
jobctl runs as its console script runs it with output piped (`run` with JOBWIRE_TOKEN in its
environment and --target), in this process; what only a process of its own shows (`jobctl
watch` followed line by line, Ctrl-C, exit codes of `main`, a closed pipe, the locale of the
environment) runs the installed console script. A worker is plain gRPC calls with the worker
token, so each test moves its jobs exactly where it needs them. AdminClient runs in this
process against the same server.

Every test uses job types of its own, so claims and listings never see another test's jobs.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import itertools
import json
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pytest
from auth_files import Token, write_auth_file
from google.protobuf.duration_pb2 import Duration
from processes import ServerProcess, start_server_process
from rich.console import Console

from jobwire.client import (
    AdminClient,
    Backoff,
    ChannelConfig,
    FailedPreconditionError,
    Finding,
    InvalidArgumentError,
    JobClient,
    NotFoundError,
    PermissionDeniedError,
    RetrySettings,
    UnauthenticatedError,
    UnavailableError,
)
from jobwire.client import Job as JobView
from jobwire.client.cli import PIPED_WIDTH
from jobwire.client.cli import run as run_jobctl
from jobwire.client.status import error_info, error_reason
from jobwire.v1 import admin_pb2, job_pb2, worker_pb2, worker_pb2_grpc

pytestmark = pytest.mark.timeout(120)

JOBCTL = Path(sys.executable).parent / "jobctl"
VERSION = (Path(__file__).resolve().parents[2] / "VERSION").read_text().strip()
Job = job_pb2.Job
T = TypeVar("T")

CLIENT = Token("jobctl-e2e-client")
WORKER = Token("jobctl-e2e-worker", role="worker")
ADMIN = Token("jobctl-e2e-admin", role="admin")
OTHER_CLIENT = Token("jobctl-e2e-other-client", tenant="other")
OTHER_WORKER = Token("jobctl-e2e-other-worker", tenant="other", role="worker")
OTHER_ADMIN = Token("jobctl-e2e-other-admin", tenant="other", role="admin")
NARROW_CLIENT = Token("jobctl-e2e-narrow-client", queues=("narrow",))
WRONG = Token("jobctl-e2e-nobody-issued-this")

JOB_NO = re.compile(r"PT-\d{8}-\d{3,}")
GLOBAL_OPTIONS = {"--target", "--token", "--locale", "--json", "--timeout", "--tls", "--tls-ca"}
OPTIONS = {  # every command and its own options, each exercised below against the server
    # on submit --timeout is the attempt's time limit; the per-call one goes before the command
    "submit": {"--payload", "--payload-file", "--queue", "--priority", "--idempotency-key", "--owner", "--label",
               "--max-attempts", "--on-lease-lost", "--timeout", "--job-timeout", "--stage-timeout",
               "--on-no-progress", "--run-after", "--watch", "--depends-on", "--title"},
    "get": set(),
    "cancel": set(),
    "retry": {"--failed", "--type", "--owner", "--queue", "--category", "--limit", "--dry-run", "--force"},
    "resolve": {"--note"},
    "watch": {"--after-version"},
    "result": {"--output"},  # against a server in tests/e2e/test_results_processes.py
    "list": {"--owner", "--status", "--type", "--queue", "--limit", "--assignee"},
    # a group: each of its commands has the global options and its own
    "batch submit": {"--idempotency-key", "--watch"},
    "batch get": set(),
    "batch watch": set(),
    "batch cancel": set(),
    # schedule create takes submit's job options (not the key, run-after, depends-on or watch)
    "schedule create": {"--payload", "--payload-file", "--queue", "--priority", "--owner", "--label", "--max-attempts",
                        "--title", "--on-lease-lost", "--timeout", "--job-timeout", "--stage-timeout",
                        "--on-no-progress", "--cron", "--every", "--tz", "--overlap", "--catch-up"},
    "schedule get": set(),
    "schedule list": {"--limit"},
    "schedule pause": set(),
    "schedule resume": set(),
    "schedule delete": set(),
    "inspect": {"--queue", "--kind", "--stalled-after"},
    "events": {"--limit", "--all"},
    "checkpoint": {"--output"},
    "requeue": {"--reason"},
    "workers": {"--queue"},
    "health": {"--service"},
    "queue limits": {"--max-running", "--rate", "--burst"},
    "queue pause": set(),
    "queue resume": set(),
}  # fmt: skip
EXIT_CODES = {0, 1, 2, 3, 4, 5, 130, 141}
SHA = hashlib.sha256(b"result").hexdigest()
WAIT_S = 30.0
LONG_LEASE_S = 3600  # a lease that cannot expire during the run, so only the stall tests see STALLED

_numbers = itertools.count(1)


def fresh_type(tag: str) -> str:
    """A job type no other test uses."""
    return f"{tag}-{next(_numbers)}"


def each(*calls: Callable[[], T]) -> list[T]:
    """Each call's result, in order (jobctl runs in this process: one at a time, as it captures
    the process's stdout and stderr)."""
    return [call() for call in calls]


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = WAIT_S) -> T:
    """Poll `probe` until it returns something other than None (or False), within `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


# ---- running jobctl -----------------------------------------------------------------


@dataclass(repr=False)
class Run:
    """One finished jobctl."""

    args: tuple[str, ...]
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)

    def __repr__(self) -> str:  # what a failing assertion shows
        return f"jobctl {' '.join(self.args)} -> {self.code}\n--- stdout\n{self.out}\n--- stderr\n{self.err}"


def jobctl_env(token: Token | None) -> dict[str, str]:
    """This environment without any JOBWIRE_* setting, COLUMNS or JOBCTL_DEBUG, plus the token."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBWIRE_") and k not in ("COLUMNS", "JOBCTL_DEBUG")}
    if token is not None:
        env["JOBWIRE_TOKEN"] = token.secret
    return env


@contextlib.contextmanager
def _stdin(stream: io.TextIOWrapper) -> Iterator[None]:
    kept, sys.stdin = sys.stdin, stream
    try:
        yield
    finally:
        sys.stdin = kept


# A process started from a shell without job control inherits SIGINT ignored, and Python then
# never raises KeyboardInterrupt, so jobctl's Ctrl-C handling could not be tested. This launcher
# restores it and execs jobctl. (Not Popen's preexec_fn: it makes Popen fork() a process that
# holds gRPC channels, and gRPC's fork handlers then sometimes abort the child before exec.)
WITH_SIGINT = [
    sys.executable, "-c",
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])",
]  # fmt: skip


def details(text: str) -> dict[str, str]:
    """`jobctl get`'s key/value grid as a dict (keys and values are separated by 2+ spaces)."""
    rows = {}
    for line in text.splitlines():
        parts = re.split(r"\s{2,}", line.strip(), maxsplit=1)
        if len(parts) == 2:
            rows.setdefault(parts[0], parts[1])
    return rows


def table(text: str) -> list[dict[str, str]]:
    """A jobctl table (header line, then rows) as dicts by column name.

    A long last column (DETAIL) folds onto indented lines of its own; they join its row.
    """
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    header = re.split(r"\s{2,}", lines[0].strip())
    rows: list[dict[str, str]] = []
    for line in lines[1:]:
        if line.startswith(" ") and rows:
            rows[-1][header[-1]] += " " + line.strip()
        else:
            rows.append(dict(zip(header, re.split(r"\s{2,}", line.strip()), strict=True)))
    return rows


def assert_clean_error(run: Run, code: int, *words: str) -> None:
    """Exit `code`, nothing on stdout, an `error:` line on stderr naming `words`, and no trace."""
    assert run.code == code, run
    assert run.out == "", run
    assert "Traceback" not in run.err and 'File "' not in run.err, run
    assert any(line.startswith("error: ") for line in run.err.splitlines()), run
    for word in words:
        assert word in run.err, run


def assert_usage_error(run: Run, *words: str) -> None:
    """Exit 2: argparse's usage line (or jobctl's own `error:` line), no trace, nothing sent."""
    assert run.code == 2, run
    assert run.out == "", run
    assert "Traceback" not in run.err and 'File "' not in run.err, run
    assert "error:" in run.err, run
    assert "INTERNAL" not in run.err, run
    for word in words:
        assert word in run.err, run


class Watching:
    """A jobctl that keeps running (watch, submit --watch): its stdout read line by line as it comes."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.args = args
        self.proc = subprocess.Popen(
            [*WITH_SIGINT, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.lines: list[str] = []
        self._new: queue.Queue[str] = queue.Queue()
        self._err: list[str] = []
        self._pumps = [
            threading.Thread(target=self._pump, daemon=True),
            threading.Thread(target=self._pump_err, daemon=True),
        ]
        for pump in self._pumps:
            pump.start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            self._new.put(line)

    def _pump_err(self) -> None:
        assert self.proc.stderr is not None
        self._err.extend(self.proc.stderr)

    def wait_line(self, pattern: str, timeout: float = WAIT_S) -> str:
        """The first line (seen so far or yet to come) that matches `pattern`."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        seen = 0
        while True:
            ended = not self._pumps[0].is_alive()  # stdout at EOF: every line is in self.lines
            for line in self.lines[seen:]:
                if regex.search(line):
                    return line
            seen = len(self.lines)
            if ended:
                self._pumps[1].join(10)
                raise AssertionError(
                    f"jobctl ended ({self.proc.poll()}) without a line matching {pattern!r}:\n{self.text}\n{self.err}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(f"no line matching {pattern!r} within {timeout}s:\n{self.text}")
            with contextlib.suppress(queue.Empty):
                self._new.get(timeout=0.1)

    def finish(self, timeout: float = WAIT_S) -> int:
        """Its exit code, once it has ended and all its output is read."""
        code = self.proc.wait(timeout)
        for pump in self._pumps:  # both pipes are at EOF once it has exited
            pump.join(10)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    @property
    def err(self) -> str:
        return "".join(self._err)


# ---- a worker made of plain gRPC calls ----------------------------------------------


class Worker:
    """The worker side as any language would speak it: WorkerService calls with a bearer token."""

    def __init__(self, target: str, token: Token, worker_id: str = "jobctl-e2e-worker-1") -> None:
        self.channel = grpc.insecure_channel(target)
        self.stub = worker_pb2_grpc.WorkerServiceStub(self.channel)
        self.metadata = token.metadata
        self.worker_id = worker_id

    def claim_all(
        self, job_type: str | list[str], *, wait: float = 0, lease_s: int = LONG_LEASE_S, queues: tuple[str, ...] = (),
        worker_id: str | None = None, max_jobs: int = 1,
    ) -> list[worker_pb2.Lease]:  # fmt: skip
        request = worker_pb2.ClaimRequest(
            worker_id=worker_id or self.worker_id,
            queues=list(queues),
            job_types=[
                worker_pb2.JobTypeSpec(name=name) for name in ([job_type] if isinstance(job_type, str) else job_type)
            ],
            max_jobs=max_jobs,
            wait=Duration(seconds=int(wait)),
        )
        request.lease_duration.FromSeconds(lease_s)
        return list(self.stub.Claim(request, metadata=self.metadata, timeout=30).leases)

    def claim(self, job_type: str, **options: Any) -> worker_pb2.Lease:
        leases = self.claim_all(job_type, wait=10, **options)
        assert len(leases) == 1, leases
        return leases[0]

    def report(self, lease: worker_pb2.Lease, stage: str, done: int, total: int | None = None) -> bool:
        request = worker_pb2.ReportStageRequest(
            job_no=lease.job_no, worker_token=lease.worker_token, stage=stage, processed_units=done
        )
        if total is not None:
            request.total_units = total
        reply = self.stub.ReportStage(request, metadata=self.metadata, timeout=30)
        return bool(reply.cancel_requested)

    def complete(self, lease: worker_pb2.Lease, size: int = 2048) -> Job:
        result = job_pb2.Artifact(
            uri=f"file:///results/{lease.job_no}.bin", size_bytes=size, sha256=SHA, content_type="application/zip",
            summary="3 files",
        )  # fmt: skip
        request = worker_pb2.CompleteRequest(job_no=lease.job_no, worker_token=lease.worker_token, result=result)
        return self.stub.Complete(request, metadata=self.metadata, timeout=30)

    def fail(
        self,
        lease: worker_pb2.Lease,
        *,
        retryable: bool,
        message: str,
        detail: str = "",
        category: int = job_pb2.JobError.INPUT_INVALID,
    ) -> Job:
        request = worker_pb2.FailRequest(
            job_no=lease.job_no, worker_token=lease.worker_token, category=category,
            message=message, retryable=retryable, detail=detail,
        )  # fmt: skip
        return self.stub.Fail(request, metadata=self.metadata, timeout=30)

    def await_review(self, lease: worker_pb2.Lease, assignee: str, items: list[str]) -> Job:
        request = worker_pb2.AwaitReviewRequest(
            job_no=lease.job_no, worker_token=lease.worker_token, assignee=assignee, items=items
        )
        return self.stub.AwaitReview(request, metadata=self.metadata, timeout=30)

    def confirm_cancel(self, lease: worker_pb2.Lease) -> Job:
        request = worker_pb2.ConfirmCancelRequest(job_no=lease.job_no, worker_token=lease.worker_token)
        return self.stub.ConfirmCancel(request, metadata=self.metadata, timeout=30)

    def close(self) -> None:
        self.channel.close()


# ---- the module's server ------------------------------------------------------------


@dataclass
class Stack:
    server: ServerProcess
    root: Path
    worker: Worker
    jobs: JobClient  # for polling and setting up, with the client token
    admin: AdminClient  # the admin token of the tenant "default"
    watchers: list[Watching] = field(default_factory=list)

    @property
    def target(self) -> str:
        return self.server.target

    def jobctl(self, *args: str, token: Token | None = CLIENT, stdin: bytes = b"") -> Run:
        """jobctl's `run` in this process, as its console script calls it with output piped.

        A process per command cost ~0.3 s of CPU 150 times over; what only the console script
        shows (exit codes of main, Ctrl-C, a closed pipe, the locale of the environment)
        runs it in its own process below (JOBCTL)."""
        out, err, printed, said = io.StringIO(), io.StringIO(), io.StringIO(), io.StringIO()
        stdin_stream = io.TextIOWrapper(io.BytesIO(stdin))
        argv = ["--target", self.target, *args]
        # argparse writes --help and its usage errors to sys.stdout and sys.stderr itself
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(said), _stdin(stdin_stream):
            code = run_jobctl(
                argv,
                out=Console(file=out, width=PIPED_WIDTH, highlight=False),
                err=Console(file=err, highlight=False),
                env=jobctl_env(token),
            )
        return Run(tuple(args), code, printed.getvalue() + out.getvalue(), said.getvalue() + err.getvalue())

    def watch(self, *args: str, token: Token | None = CLIENT) -> Watching:
        watching = Watching([str(JOBCTL), "--target", self.target, *args], jobctl_env(token))
        self.watchers.append(watching)
        return watching

    def submit(self, job_type: str, **options: Any) -> str:
        """A job submitted in this process (setting up is not what the test is about); its number."""
        return str(self.jobs.submit(job_type, **options).job.job_no)

    def submit_with_jobctl(self, job_type: str, *args: str, token: Token = CLIENT) -> str:
        """A job submitted through jobctl --json; its number."""
        run = self.jobctl("--json", "submit", job_type, *args, token=token)
        assert run.code == 0, run
        job_no = run.json()["job"]["job_no"]
        assert isinstance(job_no, str)
        return job_no

    def get(self, job_no: str) -> JobView:
        return self.jobs.get(job_no)

    def wait_status(self, job_no: str, status: int) -> JobView:
        return wait_for(f"{job_no} to be {Job.Status.Name(status)}", lambda: _if(self.get(job_no), status))


def _if(job: JobView, status: int) -> JobView | None:
    return job if job.status == status else None


def _finding(findings: list[admin_pb2.Finding], job_no: str) -> admin_pb2.Finding | None:
    return next((f for f in findings if f.job_no == job_no), None)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("jobctl")
    tokens = [CLIENT, WORKER, ADMIN, OTHER_CLIENT, OTHER_WORKER, OTHER_ADMIN, NARROW_CLIENT]
    auth = write_auth_file(root / "auth.toml", tokens)
    env = {
        "JOBWIRE_DATABASE_URL": f"sqlite:///{root / 'jobwire.db'}",
        "JOBWIRE_LISTEN": "127.0.0.1:0",
        "JOBWIRE_AUTH_FILE": str(auth),
        # an expired lease with on_lease_lost RETRY comes back within about a second
        "JOBWIRE_REAPER_INTERVAL_SECONDS": "0.5",
        "JOBWIRE_STALL_GRACE_SECONDS": "1",
        # every attempt has a time limit unless its submit says otherwise (the timeout sweeps
        # run with the reaper); far longer than this module runs
        "JOBWIRE_DEFAULT_ATTEMPT_TIMEOUT": "3600",
    }
    server = start_server_process(["jobwire", "serve", "--processes", "1"], env)
    worker = Worker(server.target, WORKER)
    jobs = JobClient.connect(server.target, CLIENT.secret)
    admin = AdminClient.connect(server.target, ADMIN.secret)
    s = Stack(server, root, worker, jobs, admin)
    try:
        yield s
    finally:
        for watching in s.watchers:
            watching.kill()
        worker.close()
        jobs.close()
        admin.close()
        server.kill()
        print(f"----- server output\n{server.tail()}")


@dataclass(frozen=True)
class Stalled:
    job_type: str  # its own: nothing else is of this type
    job_no: str
    lease: worker_pb2.Lease


@pytest.fixture(scope="module")
def stalled_pool(stack: Stack) -> list[Stalled]:
    """RUNNING jobs whose 1-second leases have expired (policy INSPECT), made together to wait once."""
    types = [fresh_type("stalled") for _ in range(4)]
    by_no = {stack.submit(job_type): job_type for job_type in types}
    leases: list[worker_pb2.Lease] = []

    def all_claimed() -> bool:
        leases.extend(stack.worker.claim_all(types, wait=1, lease_s=1, max_jobs=len(types)))
        return len(leases) == len(types)

    wait_for("the pool's jobs claimed", all_claimed)
    assert sorted(lease.job_no for lease in leases) == sorted(by_no)

    def all_stalled() -> bool:
        listed = {f.job_no for f in stack.admin.inspect(kinds=["STALLED"])}
        return set(by_no) <= listed and all(stack.get(job_no).stalled for job_no in by_no)

    wait_for("the leases listed STALLED and marked stalled by the reaper", all_stalled)
    return [Stalled(by_no[lease.job_no], lease.job_no, lease) for lease in leases]


@pytest.fixture
def stalled(stalled_pool: list[Stalled]) -> Stalled:
    """One job of the pool, for this test alone."""
    assert stalled_pool, "more tests use `stalled` than the pool holds: make the pool larger"
    return stalled_pool.pop()


# ---- help: what the tests below must cover ------------------------------------------


def test_help_lists_every_command_and_every_exit_code(stack: Stack) -> None:
    top = stack.jobctl("--help")
    assert top.code == 0 and top.err == "", top
    listed = set(re.findall(r"^ {4}([a-z]+) {2,}\S", top.out, flags=re.MULTILINE))
    # A command added to jobctl without tests here fails this line: cover it below first.
    assert listed == {command.split()[0] for command in OPTIONS}, top
    promised = {int(n) for n in re.findall(r"^ {4}(\d+) +\S", top.out.split("Exit codes:", 1)[1], re.MULTILINE)}
    assert promised == EXIT_CODES, top
    assert set(re.findall(r"--[a-z-]+", top.out.split("Exit codes:", 1)[0])) == {"--help", "--version", *GLOBAL_OPTIONS}
    version = stack.jobctl("--version")
    assert version.code == 0 and version.out == f"jobwire {VERSION}\n", version
    assert 'eval "$(register-python-argcomplete jobctl)"' in top.out
    # the console script and `python -m jobwire.client.cli` are the same program
    module = subprocess.run(
        [sys.executable, "-m", "jobwire.client.cli", "--help"], env=jobctl_env(None), capture_output=True, text=True
    )
    assert module.returncode == 0 and module.stdout == top.out


@pytest.mark.parametrize("command", sorted(OPTIONS))
def test_each_commands_help_offers_the_options_tested_here(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    # In this process: help never reaches a server, and ten more interpreters would cost seconds.
    console = Console(file=io.StringIO())
    assert run_jobctl([*command.split(), "--help"], out=console, err=console, env={}) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"usage: jobctl {command} ")
    # An option added to a command without a test here fails this line: cover it first.
    assert set(re.findall(r"--[a-z-]+", text)) == {"--help", *GLOBAL_OPTIONS, *OPTIONS[command]}


# ---- submit -------------------------------------------------------------------------


def test_submit_shows_the_job_number_and_sends_the_json_payload_as_typed(stack: Stack) -> None:
    job_type = fresh_type("submit-json")
    payload = '{"frames": 900,  "name": "清明上河图"}'  # odd spacing and non-ASCII: sent as typed
    run = stack.jobctl(
        "submit", job_type, "--payload", payload, "--label", "team=core", "--label", "env=ci",
        "--priority", "7", "--owner", "alice", "--max-attempts", "5",
    )  # fmt: skip
    assert run.code == 0 and run.err == "", run
    first, *_ = run.out.splitlines()
    job_no, verb = first.split(" ", 1)
    assert JOB_NO.fullmatch(job_no) and verb == "submitted", run
    shown = details(run.out)
    assert shown["job"] == job_no and shown["type"] == job_type and shown["queue"] == "default"
    assert shown["status"] == "Queued"
    assert (shown["owner"], shown["labels"], shown["attempt"]) == ("alice", "env=ci, team=core", "0/5")
    assert shown["version"] == "1"

    got = stack.jobctl("--json", "get", job_no).json()
    assert (got["job_no"], got["status"], got["job_type"], got["priority"]) == (job_no, "QUEUED", job_type, 7)
    assert (got["labels"], got["owner"], got["max_attempts"]) == ({"team": "core", "env": "ci"}, "alice", 5)
    assert got["display"]["status_label"] == "Queued" and "queue_position" in got
    assert "percent" not in got["progress"]

    lease = stack.worker.claim(job_type)
    assert lease.job_no == job_no and lease.payload == payload.encode()


def test_submit_sends_a_payload_file_and_stdin_byte_for_byte(stack: Stack) -> None:
    job_type = fresh_type("submit-bytes")
    raw = bytes(range(256)) + b"\x00 not json \xff"
    path = stack.root / "payload.bin"
    path.write_bytes(raw)
    from_file = stack.jobctl("--json", "submit", job_type, "--payload-file", str(path))
    assert from_file.code == 0 and from_file.json()["created"] is True, from_file
    from_stdin = stack.jobctl("--json", "submit", job_type, "--payload-file", "-", stdin=raw[::-1])
    assert from_stdin.code == 0, from_stdin
    leases = {lease.job_no: lease.payload for lease in stack.worker.claim_all(job_type, wait=10, max_jobs=2)}
    assert leases == {from_file.json()["job"]["job_no"]: raw, from_stdin.json()["job"]["job_no"]: raw[::-1]}


def test_submit_with_an_idempotency_key_returns_the_first_job(stack: Stack) -> None:
    job_type = fresh_type("submit-key")
    args = ("submit", job_type, "--payload", '{"order": 1234}', "--idempotency-key", f"order-{job_type}")
    first = stack.jobctl(*args)
    again = stack.jobctl(*args)
    as_json = stack.jobctl("--json", *args)
    assert first.code == again.code == as_json.code == 0, (first, again, as_json)
    job_no = first.out.split()[0]
    assert JOB_NO.fullmatch(job_no) and first.out.splitlines()[0] == f"{job_no} submitted"
    assert again.out.splitlines()[0] == f"{job_no} already submitted (same idempotency key)"
    assert as_json.json()["created"] is False and as_json.json()["job"]["job_no"] == job_no
    listed = stack.jobctl("--json", "list", "--type", job_type).json()
    assert [j["job_no"] for j in listed] == [job_no]

    other_payload = stack.jobctl(
        "submit", job_type, "--payload", '{"order": 9}', "--idempotency-key", f"order-{job_type}"
    )
    assert_clean_error(other_payload, 4, "ALREADY_EXISTS", "IDEMPOTENCY_KEY_REUSED")


def test_submit_priority_decides_which_job_a_worker_gets_first(stack: Stack) -> None:
    job_type = fresh_type("submit-priority")
    low = stack.submit_with_jobctl(job_type, "--priority", "0")
    high = stack.submit_with_jobctl(job_type, "--priority", "9")
    assert stack.worker.claim(job_type).job_no == high
    assert stack.worker.claim(job_type).job_no == low


def test_submit_run_after_keeps_the_job_from_workers_until_then(stack: Stack) -> None:
    job_type = fresh_type("submit-later")
    run = stack.jobctl("--json", "submit", job_type, "--run-after", "1h")
    assert run.code == 0, run
    job = run.json()["job"]
    created = datetime.fromisoformat(job["created_at"].replace("Z", "+00:00"))
    run_after = datetime.fromisoformat(job["run_after"].replace("Z", "+00:00"))
    assert timedelta(minutes=59) < run_after - created < timedelta(minutes=61)
    assert stack.worker.claim_all(job_type) == []
    iso = (datetime.now(UTC) + timedelta(days=1)).replace(tzinfo=None).isoformat(timespec="seconds")
    naive = stack.jobctl("--json", "submit", job_type, "--run-after", iso)  # naive ISO is UTC
    assert naive.code == 0, naive
    assert naive.json()["job"]["run_after"] == iso + "Z"


def test_submit_on_lease_lost_retry_requeues_after_a_lost_worker(stack: Stack) -> None:
    job_type = fresh_type("submit-lease-lost")
    job_no = stack.submit_with_jobctl(job_type, "--on-lease-lost", "retry", "--max-attempts", "3")
    lease = stack.worker.claim(job_type, lease_s=1)
    assert lease.job_no == job_no
    back = stack.wait_status(job_no, Job.QUEUED)  # the reaper, not anybody here, put it back
    assert back.attempt == 1
    kinds = [e.kind for e in stack.admin.list_events(job_no)]
    assert "LEASE_REVOKED_REQUEUED" in kinds, kinds
    assert stack.worker.claim(job_type).attempt == 2


def test_submit_to_a_queue_the_token_may_not_use_is_refused(stack: Stack) -> None:
    job_type = fresh_type("submit-queue")
    run = stack.jobctl("submit", job_type, "--queue", "default", token=NARROW_CLIENT)
    assert_clean_error(run, 4, "PERMISSION_DENIED", "queue")
    allowed = stack.jobctl("--json", "submit", job_type, "--queue", "narrow", token=NARROW_CLIENT)
    assert allowed.code == 0 and allowed.json()["job"]["queue"] == "narrow", allowed
    assert stack.jobctl("--json", "list", "--type", job_type, token=NARROW_CLIENT).json()[0]["queue"] == "narrow"


# ---- get, list ----------------------------------------------------------------------


def test_get_shows_a_percent_only_once_the_total_is_known(stack: Stack) -> None:
    job_type = fresh_type("get-progress")
    job_no = stack.submit(job_type)
    lease = stack.worker.claim(job_type)
    stack.worker.report(lease, "PROCESSING", 7)
    open_ended, as_json, listed = each(
        lambda: stack.jobctl("get", job_no),
        lambda: stack.jobctl("--json", "get", job_no),
        lambda: stack.jobctl("list", "--type", job_type),
    )
    assert open_ended.code == 0, open_ended
    shown = details(open_ended.out)
    assert (shown["status"], shown["attempt"]) == ("Processing", "1/3")
    assert shown["progress"] == "Processing · stage 2/4 · 7 units", open_ended
    assert as_json.json()["progress"] == {"stage_index": 2, "stage_count": 4, "processed_units": "7"}
    assert [row["PROGRESS"] for row in table(listed.out)] == ["Processing · stage 2/4 · 7 units"], listed

    stack.worker.report(lease, "PROCESSING", 9, 12)
    known, as_json, listed = each(
        lambda: stack.jobctl("get", job_no),
        lambda: stack.jobctl("--json", "get", job_no),
        lambda: stack.jobctl("list", "--type", job_type),
    )
    assert details(known.out)["progress"] == "Processing · stage 2/4 · 9/12 units · 75%", known
    progress = as_json.json()["progress"]
    assert (progress["total_units"], progress["percent"]) == ("12", 75)
    assert [row["PROGRESS"] for row in table(listed.out)] == ["Processing · stage 2/4 · 9/12 units · 75%"], listed


def test_get_in_chinese(stack: Stack) -> None:
    job_type = fresh_type("get-zh")
    job_no = stack.submit(job_type)
    lease = stack.worker.claim(job_type)
    stack.worker.report(lease, "VERIFYING", 1, 4)
    run = stack.jobctl("--locale", "zh-CN", "get", job_no)
    assert run.code == 0, run
    shown = details(run.out)
    assert shown["status"] == "正在处理" and shown["progress"] == "正在验证结果 · 第 3/4 步 · 1/4 units · 25%"
    env_locale = subprocess.run(
        [str(JOBCTL), "--target", stack.target, "--json", "get", job_no],
        env={**jobctl_env(CLIENT), "JOBWIRE_LOCALE": "zh-CN"}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert env_locale.returncode == 0, env_locale.stderr
    assert json.loads(env_locale.stdout)["display"]["status_label"] == "正在处理"


def test_get_never_shows_a_user_the_workers_internal_detail(stack: Stack) -> None:
    job_type = fresh_type("get-failed")
    job_no = stack.submit(job_type, max_attempts=1)
    lease = stack.worker.claim(job_type)
    stack.worker.report(lease, "PROCESSING", 3)
    secret = "Traceback: /srv/worker-17.internal/tmp/x.py line 9"
    stack.worker.fail(lease, retryable=False, message="The input file is not a CSV file.", detail=secret)
    run = stack.jobctl("get", job_no)
    assert run.code == 0, run  # get shows a FAILED job; only watch turns it into exit 1
    shown = details(run.out)
    assert shown["status"] == "Not completed"
    assert (shown["error"], shown["message"]) == (
        "INPUT_INVALID in stage PROCESSING",
        "The input file is not a CSV file.",
    )
    assert shown["retry"] == "not retryable"
    as_json = stack.jobctl("--json", "get", job_no)
    for shown_to_user in (run.out, as_json.out):
        assert "worker-17" not in shown_to_user and "/srv/" not in shown_to_user
    # the operator does see it, in the evidence trail
    events = stack.jobctl("--json", "events", job_no, token=ADMIN).json()
    assert any(secret in e.get("detail", "") for e in events), events


def test_list_filters_by_type_owner_status_and_limit(stack: Stack) -> None:
    job_type = fresh_type("list")
    alice = [stack.submit(job_type, owner="alice") for _ in range(2)]
    bob = stack.submit(job_type, owner="bob", queue="bulk")
    cancelled = stack.jobctl("cancel", alice[0])
    assert cancelled.code == 0, cancelled
    every = stack.jobctl("--json", "list", "--type", job_type)
    assert every.code == 0, every
    assert sorted(j["job_no"] for j in every.json()) == sorted([*alice, bob])

    def listed(*args: str, token: Token = CLIENT) -> Callable[[], list[str]]:
        def run_it() -> list[str]:
            run = stack.jobctl("--json", "list", "--type", job_type, *args, token=token)
            assert run.code == 0, run
            return sorted(j["job_no"] for j in run.json())

        return run_it

    by_owner, by_queue, by_status, lower_case, by_word, two_statuses, none_match, limited, other_tenant = each(
        listed("--owner", "alice"),
        listed("--queue", "bulk"),
        listed("--status", "CANCELLED"),
        listed("--status", "queued"),
        listed("--status", "排队中", "--status", "not COMPLETED"),  # the words shown: QUEUED, FAILED
        listed("--status", "QUEUED", "--status", "CANCELLED"),
        listed("--owner", "bob", "--status", "CANCELLED"),
        listed("--limit", "2"),
        listed(token=OTHER_CLIENT),
    )
    assert by_owner == sorted(alice)
    assert by_queue == [bob]
    assert by_status == [alice[0]]
    assert lower_case == sorted([alice[1], bob])
    assert by_word == sorted([alice[1], bob])
    assert two_statuses == sorted([*alice, bob])
    assert none_match == []
    assert len(limited) == 2
    assert other_tenant == []  # the other tenant sees none of them

    text = stack.jobctl("list", "--type", job_type)
    rows = {row["JOB"]: row for row in table(text.out)}
    assert set(rows) == {*alice, bob}, text
    assert rows[alice[0]]["STATUS"] == "Cancelled" and rows[bob]["STATUS"] == "Queued"
    assert {row["TYPE"] for row in rows.values()} == {job_type}


def test_shell_completion_offers_commands_and_status_words(tmp_path: Path) -> None:
    def complete(line: str) -> list[str]:
        out = tmp_path / "candidates"
        env = {
            **os.environ, "_ARGCOMPLETE": "1", "_ARGCOMPLETE_IFS": "\n", "COMP_LINE": line,
            "COMP_POINT": str(len(line)), "_ARGCOMPLETE_STDOUT_FILENAME": str(out),
        }  # fmt: skip
        done = subprocess.run([str(JOBCTL)], env=env, capture_output=True, text=True, timeout=30, check=False)
        assert done.returncode == 0, done.stderr
        return sorted(word.strip() for word in out.read_text().split("\n") if word.strip())

    assert complete("jobctl wa") == ["watch"]
    assert complete("jobctl list --status Pro") == ["Processing"]
    assert complete("jobctl list --status RE") == ["READY"]
    assert "--after-version" in complete("jobctl watch PT-1 --af")


def test_list_with_a_negative_limit_is_a_usage_error(stack: Stack) -> None:
    # A bad argument is exit 2 (it once reached itertools.islice and came out as exit 4, INTERNAL).
    assert_usage_error(stack.jobctl("list", "--limit", "-1"), "--limit")


# ---- watch --------------------------------------------------------------------------


def test_a_title_is_shown_first_by_get_list_and_watch(stack: Stack) -> None:
    job_type = fresh_type("titled")
    title = "Import customers-2026-11.csv"
    job_no = stack.submit_with_jobctl(job_type, "--title", title)
    untitled = stack.submit(job_type)
    shown = stack.jobctl("get", job_no)
    assert shown.code == 0, shown
    assert shown.out.splitlines()[0].strip().split(None, 1) == ["title", title]  # the first row of the grid
    assert details(shown.out)["job"] == job_no
    assert "title" not in details(stack.jobctl("get", untitled).out)  # none given: none shown
    listed = stack.jobctl("list", "--type", job_type)
    assert listed.out.splitlines()[0].split()[0] == "TITLE", listed
    rows = {row["JOB"]: row for row in table(listed.out)}
    assert (rows[job_no]["TITLE"], rows[untitled]["TITLE"]) == (title, "-")
    watching = stack.watch("watch", job_no)
    assert watching.wait_line(rf"^{re.escape(title)}  {job_no} Queued")
    stack.jobctl("cancel", job_no)
    assert watching.finish() == 3, watching.text + watching.err


def test_watch_follows_a_job_to_ready_and_shows_its_result(stack: Stack) -> None:
    job_type = fresh_type("watch-ready")
    job_no = stack.submit(job_type)
    watching = stack.watch("watch", job_no)
    watching.wait_line(rf"^{job_no} Queued")
    lease = stack.worker.claim(job_type)
    stack.worker.report(lease, "PREPARING", 5)
    line = watching.wait_line(rf"^{job_no} Processing · Preparing input .*\b5 units")
    assert line == f"{job_no} Processing · Preparing input · stage 1/4 · 5 units"  # no total: no percent
    stack.worker.report(lease, "PROCESSING", 450, 900)
    line = watching.wait_line(rf"^{job_no} Processing · Processing .*450")
    assert line == f"{job_no} Processing · Processing · stage 2/4 · 450/900 units · 50%"
    stack.worker.report(lease, "DELIVERING", 0)
    watching.wait_line("Delivering result · stage 4/4")
    stack.worker.complete(lease)
    assert watching.finish() == 0, watching.text + watching.err
    assert watching.err == ""
    assert f"{job_no} Done" in watching.lines
    outcome = details(watching.text)
    assert outcome["result"] == f"file:///results/{job_no}.bin"
    assert (outcome["size"], outcome["sha256"]) == ("2.0 KiB (2,048 bytes)", SHA)
    assert re.fullmatch(r"\d+:\d{2}", outcome["elapsed"]), outcome  # submit to READY, as a stopwatch
    assert "%" not in "\n".join(line for line in watching.lines if "Preparing input" in line)


def test_watch_json_is_one_object_per_update_and_exits_1_when_the_job_fails(stack: Stack) -> None:
    job_type = fresh_type("watch-failed")
    job_no = stack.submit(job_type, max_attempts=1)
    watching = stack.watch("watch", job_no, "--json")
    watching.wait_line(r'"status": "QUEUED"')
    lease = stack.worker.claim(job_type)
    stack.worker.report(lease, "PROCESSING", 3)
    watching.wait_line(r'"processed_units": "3"')
    stack.worker.fail(lease, retryable=False, message="The input has no rows.")
    assert watching.finish() == 1, watching.text + watching.err
    assert watching.err == ""
    updates = [json.loads(line) for line in watching.lines]
    versions = [int(u["version"]) for u in updates]
    assert versions == sorted(set(versions)) and versions[0] == 1
    assert {u["job_no"] for u in updates} == {job_no}
    last = updates[-1]
    assert last["status"] == "FAILED" and last["error"]["category"] == "INPUT_INVALID"
    assert last["error"]["message"] == "The input has no rows."
    assert all("percent" not in u.get("progress", {}) for u in updates)  # no total was ever known


def test_submit_watch_exits_3_when_the_job_is_cancelled_while_queued(stack: Stack) -> None:
    job_type = fresh_type("submit-watch")
    watching = stack.watch("submit", job_type, "--watch")
    job_no = watching.wait_line(r"^PT-\S+ submitted$").split()[0]
    watching.wait_line(rf"^{job_no} Queued")
    cancel = stack.jobctl("cancel", job_no)
    assert cancel.code == 0 and details(cancel.out)["status"] == "Cancelled", cancel
    assert watching.finish() == 3, watching.text + watching.err
    assert f"{job_no} Cancelled" in watching.lines and watching.err == ""


def test_cancel_of_a_running_job_waits_for_the_worker_and_watch_exits_3(stack: Stack) -> None:
    job_type = fresh_type("cancel-running")
    job_no = stack.submit(job_type)
    lease = stack.worker.claim(job_type)
    stack.worker.report(lease, "PROCESSING", 10, 100)
    watching = stack.watch("watch", job_no)
    watching.wait_line(rf"^{job_no} Processing .* 10%$")
    cancel = stack.jobctl("--json", "cancel", job_no)
    assert cancel.code == 0 and cancel.json()["status"] == "CANCEL_REQUESTED", cancel
    watching.wait_line(rf"^{job_no} Stopping")
    again = stack.jobctl("cancel", job_no)  # cancel is idempotent
    assert again.code == 0 and details(again.out)["status"] == "Stopping", again
    assert stack.worker.report(lease, "PROCESSING", 20, 100) is True  # the worker is told at its next report
    stack.worker.confirm_cancel(lease)
    assert watching.finish() == 3, watching.text + watching.err
    assert watching.lines[-2] == f"{job_no} Cancelled · 20/100 units"  # no percent once it has ended
    assert re.fullmatch(r"elapsed  \d+:\d{2}", watching.lines[-1]), watching.lines


def test_watch_after_the_last_version_still_exits_by_how_the_job_ended(stack: Stack) -> None:
    job_type = fresh_type("watch-resume")
    ready, failed, cancelled = (stack.submit(job_type, max_attempts=1) for _ in range(3))
    lease = stack.worker.claim(job_type)
    assert lease.job_no == ready
    stack.worker.complete(lease)
    lease = stack.worker.claim(job_type)
    assert lease.job_no == failed
    stack.worker.fail(lease, retryable=True, message="The mail server did not answer.")
    assert stack.jobctl("cancel", cancelled).code == 0
    ends = ((ready, 0, "Done", "result"), (failed, 1, "Not completed", "error"), (cancelled, 3, "Cancelled", None))
    *runs, ahead = each(
        *(lambda no=no: stack.jobctl("watch", no, "--after-version", str(stack.get(no).version)) for no, *_ in ends),
        lambda: stack.jobctl("watch", ready, "--after-version", "999"),
    )
    for (job_no, code, label, outcome), run in zip(ends, runs, strict=True):
        assert run.code == code and run.err == "", run
        assert run.out.splitlines()[0] == f"{job_no} {label}", run
        assert outcome is None or outcome in details(run.out), run
    assert_clean_error(ahead, 4, "OUT_OF_RANGE", "after_version")


def test_ctrl_c_stops_watching_with_130_and_the_job_keeps_running(stack: Stack) -> None:
    job_type = fresh_type("watch-interrupt")
    job_no = stack.submit(job_type)
    watching = stack.watch("watch", job_no)
    watching.wait_line(rf"^{job_no} Queued")
    watching.proc.send_signal(signal.SIGINT)
    assert watching.finish() == 130, watching.text + watching.err
    assert watching.err.strip() == f"stopped watching; {job_no} keeps running"
    assert stack.get(job_no).status == Job.QUEUED


# ---- time limits ----------------------------------------------------------------------


def test_submit_timeout_is_the_attempt_deadline_a_worker_is_given(stack: Stack) -> None:
    unset, none, ninety = (fresh_type("attempt-limit") for _ in range(3))
    submitted = each(
        lambda: stack.submit_with_jobctl(unset),  # the server's default: JOBWIRE_DEFAULT_ATTEMPT_TIMEOUT=3600
        lambda: stack.submit_with_jobctl(none, "--timeout", "0"),  # none, not even the server's default
        lambda: stack.submit_with_jobctl(ninety, "--timeout", "90s"),
    )
    leases = {lease.job_no: lease for lease in stack.worker.claim_all([unset, none, ninety], wait=10, max_jobs=3)}
    assert set(leases) == set(submitted)

    def limit(job_no: str) -> timedelta | None:
        lease = leases[job_no]
        if not lease.HasField("attempt_deadline"):
            return None
        started = stack.get(job_no).started_at
        assert started is not None
        return lease.attempt_deadline.ToDatetime(tzinfo=UTC) - started

    default_limit, no_limit, ninety_limit = (limit(job_no) for job_no in submitted)
    assert no_limit is None
    assert default_limit is not None and abs(default_limit - timedelta(hours=1)) < timedelta(seconds=2)
    assert ninety_limit is not None and abs(ninety_limit - timedelta(seconds=90)) < timedelta(seconds=2)


def test_submit_watch_exits_1_when_the_attempt_runs_out_of_time(stack: Stack) -> None:
    job_type = fresh_type("attempt-timeout")
    watching = stack.watch("submit", job_type, "--timeout", "1s", "--max-attempts", "1", "--watch")
    job_no = watching.wait_line(r"^PT-\S+ submitted$").split()[0]
    lease = stack.worker.claim(job_type)
    assert lease.job_no == job_no
    assert watching.finish() == 1, watching.text + watching.err  # the sweep ended it; nobody here did
    assert watching.err == ""
    outcome = details(watching.text)
    assert (outcome["error"], outcome["message"]) == (
        "TIMEOUT in stage PREPARING",
        "An attempt took longer than its time limit.",
    )
    assert "ATTEMPT_TIMED_OUT" in [e.kind for e in stack.admin.list_events(job_no)]
    with pytest.raises(grpc.RpcError) as late:  # its worker hears why its lease is gone
        stack.worker.report(lease, "PROCESSING", 1)
    assert error_reason(late.value) == "WORKER_LEASE_LOST"
    info = error_info(late.value)
    assert info is not None and info.metadata["lease_state"] == "TIMED_OUT"


@dataclass(frozen=True)
class Limited:
    job_timeout: str  # QUEUED with --job-timeout 1s: ends FAILED unclaimed
    no_progress: str  # RUNNING with --stage-timeout 1s: a NO_PROGRESS finding, runs on
    no_progress_fail: str  # RUNNING with --stage-timeout 1s --on-no-progress FAIL: ends FAILED
    no_progress_type: str  # the job type of `no_progress`, its alone


@pytest.fixture(scope="module")
def limited(stack: Stack) -> Limited:
    """Jobs past their time limits, set up together so their limits run out together."""
    idle, watched, failing = (fresh_type("limited") for _ in range(3))
    jobs = Limited(*each(
        lambda: stack.submit_with_jobctl(idle, "--job-timeout", "1s"),
        lambda: stack.submit_with_jobctl(watched, "--stage-timeout", "1s"),
        lambda: stack.submit_with_jobctl(failing, "--stage-timeout", "1s", "--on-no-progress", "fail",
                                         "--max-attempts", "1"),
    ), watched)  # fmt: skip
    leases = stack.worker.claim_all([watched, failing], wait=10, max_jobs=2)
    assert sorted(lease.job_no for lease in leases) == sorted([jobs.no_progress, jobs.no_progress_fail])
    stack.wait_status(jobs.job_timeout, Job.FAILED)
    stack.wait_status(jobs.no_progress_fail, Job.FAILED)
    wait_for("a NO_PROGRESS finding", lambda: _finding(stack.admin.inspect(kinds=["NO_PROGRESS"]), jobs.no_progress))
    return jobs


def test_a_job_past_its_job_timeout_fails_and_watch_exits_1(stack: Stack, limited: Limited) -> None:
    run = stack.jobctl("watch", limited.job_timeout)
    assert run.code == 1 and run.err == "", run
    assert run.out.splitlines()[0] == f"{limited.job_timeout} Not completed"
    outcome = details(run.out)
    assert (outcome["error"], outcome["retry"]) == ("TIMEOUT", "not retryable")
    assert outcome["message"] == "The job did not finish within its time limit."
    assert [e.kind for e in stack.admin.list_events(limited.job_timeout)] == ["SUBMITTED", "JOB_TIMED_OUT"]


def test_no_progress_is_an_inspect_finding_or_with_fail_a_timeout(stack: Stack, limited: Limited) -> None:
    as_json, text, failed = each(
        lambda: stack.jobctl("--json", "inspect", "--kind", "NO_PROGRESS", token=ADMIN),
        lambda: stack.jobctl("inspect", "--kind", "NO_PROGRESS", token=ADMIN),
        lambda: stack.jobctl("get", limited.no_progress_fail),
    )
    found = [f for f in as_json.json() if f["job_no"] == limited.no_progress]
    assert len(found) == 1 and found[0]["kind"] == "NO_PROGRESS" and found[0]["status"] == "RUNNING", as_json
    assert found[0]["detail"].startswith("no progress for ") and "stage timeout 1s" in found[0]["detail"]
    assert "progress_at" in found[0]
    rows = [row for row in table(text.out) if row["JOB"] == limited.no_progress]
    assert len(rows) == 1 and rows[0]["KIND"] == "NO_PROGRESS", text
    assert limited.no_progress_fail not in as_json.out  # it ended instead
    shown = details(failed.out)
    assert (shown["status"], shown["error"]) == ("Not completed", "TIMEOUT in stage PREPARING"), failed
    assert shown["message"] == "The job made no progress for longer than its time limit."
    assert stack.get(limited.no_progress).status == Job.RUNNING  # INSPECT: it runs on


def test_get_and_list_tell_a_person_that_a_job_makes_no_progress(stack: Stack, limited: Limited) -> None:
    # jobctl builds its own progress line (get, list, watch): Job.no_progress_for puts the
    # server's "no progress for 3 s" in it, as display.detail says.
    as_json, text, listed = each(
        lambda: stack.jobctl("--json", "get", limited.no_progress),
        lambda: stack.jobctl("get", limited.no_progress),
        lambda: stack.jobctl("list", "--type", limited.no_progress_type),
    )
    assert "no progress for" in as_json.json()["display"]["detail"]  # what the server says
    assert "no progress for" in details(text.out)["progress"], text
    assert [row["JOB"] for row in table(listed.out)] == [limited.no_progress], listed
    assert "no progress for" in table(listed.out)[0]["PROGRESS"], listed


# ---- retry, cancel refusals ---------------------------------------------------------


def test_retry_queues_a_retryable_failure_again_and_refuses_the_rest(stack: Stack) -> None:
    job_type = fresh_type("retry")
    retryable = stack.submit(job_type, max_attempts=1)
    lease = stack.worker.claim(job_type)
    stack.worker.fail(lease, retryable=True, message="The mail server did not answer.")
    shown = details(stack.jobctl("get", retryable).out)
    assert shown["retry"] == f"retryable: jobctl retry {retryable}"
    run = stack.jobctl("retry", retryable)
    assert run.code == 0, run
    assert details(run.out)["status"] == "Queued"
    again = stack.worker.claim(job_type)
    assert (again.job_no, again.attempt) == (retryable, 2)
    running_again = stack.jobctl("retry", retryable)  # now RUNNING: nothing to retry
    assert_clean_error(running_again, 4, "FAILED_PRECONDITION", "NOT_RETRYABLE")

    final = stack.submit(job_type, max_attempts=1)
    lease = stack.worker.claim(job_type)
    stack.worker.fail(lease, retryable=False, message="The input file is empty.")
    refused = stack.jobctl("retry", final)
    assert_clean_error(
        refused, 4, "FAILED_PRECONDITION", "NOT_RETRYABLE", "an admin may force a retry (jobctl retry --force)"
    )
    assert_clean_error(stack.jobctl("retry", final, "--force"), 4, "PERMISSION_DENIED", "the admin role")
    assert stack.get(final).status == Job.FAILED
    usage = stack.jobctl("retry", "--failed", "--force")
    assert usage.code == 2 and "--force goes with one JOB_NO" in usage.err, usage

    forced = stack.jobctl("retry", final, "--force", token=ADMIN)  # the operator fixed the input
    assert forced.code == 0, forced
    assert details(forced.out)["status"] == "Queued"
    head = hashlib.sha256(ADMIN.secret.encode()).hexdigest()[:8]  # the auth file gives ADMIN no name
    trail = stack.jobctl("events", final, token=ADMIN)
    assert f"forced by admin {head}: error was" in " ".join(trail.out.split()), trail
    assert (stack.worker.claim(job_type).job_no, stack.get(final).attempt) == (final, 2)


def test_retry_failed_queues_every_matching_retryable_failure_again(stack: Stack) -> None:
    """After an outage: every FAILED job the outage failed, and only those, queued again."""
    job_type, other_type = fresh_type("outage"), fresh_type("outage-other")
    down = job_pb2.JobError.DEPENDENCY_FAILED

    def failed(kind: str, *, retryable: bool = True, category: int = down, queue: str = "default") -> str:
        job_no = stack.submit(kind, max_attempts=1, queue=queue)
        lease = stack.worker.claim(kind, queues=(queue,))
        stack.worker.fail(lease, retryable=retryable, message="The payment service did not answer.", category=category)
        return job_no

    hit = [failed(job_type), failed(job_type)]
    spared = [
        failed(job_type, retryable=False),  # the worker said a retry would fail again
        failed(job_type, category=job_pb2.JobError.INPUT_INVALID),  # failed another way
        failed(job_type, queue="narrow"),  # another queue
        failed(other_type),  # another job type
    ]
    scope = ["--failed", "--type", job_type, "--queue", "default", "--category", "dependency_failed"]
    dry = stack.jobctl("--json", "retry", *scope, "--dry-run")
    assert dry.code == 0, dry
    assert sorted(dry.json()["retried"]) == sorted(hit) and dry.json()["dry_run"] is True
    assert {stack.get(job_no).status for job_no in hit} == {Job.FAILED}  # a dry run changes nothing

    run = stack.jobctl("retry", *scope)
    assert run.code == 0, run
    assert run.out.rstrip().endswith("retried 2 FAILED, retryable job(s)")
    assert all(job_no in run.out for job_no in hit)
    assert {stack.get(job_no).status for job_no in hit} == {Job.QUEUED}
    assert {stack.get(job_no).status for job_no in spared} == {Job.FAILED}
    again = stack.jobctl("--json", "retry", *scope)  # nothing FAILED is left to match
    assert again.json() == {"retried": [], "skipped": [], "dry_run": False}
    usage = stack.jobctl("retry", hit[0], "--type", job_type)
    assert usage.code == 2 and "--type go with --failed" in usage.err


def test_cancel_is_refused_once_a_job_is_done_or_delivering(stack: Stack) -> None:
    job_type = fresh_type("cancel-refused")
    done = stack.submit(job_type)
    lease = stack.worker.claim(job_type)
    stack.worker.complete(lease)
    assert_clean_error(stack.jobctl("cancel", done), 4, "FAILED_PRECONDITION", "JOB_NOT_CANCELLABLE")
    delivering = stack.submit(job_type)
    lease = stack.worker.claim(job_type)
    stack.worker.report(lease, "DELIVERING", 0)
    assert_clean_error(stack.jobctl("cancel", delivering), 4, "FAILED_PRECONDITION", "JOB_NOT_CANCELLABLE")
    assert stack.get(delivering).status == Job.RUNNING


# ---- operator commands --------------------------------------------------------------


def test_events_and_checkpoint_show_what_the_handler_left(stack: Stack, tmp_path: Path) -> None:
    job_type = fresh_type("evidence")
    job_no = stack.submit(job_type)
    lease = stack.worker.claim(job_type)
    entry = worker_pb2.EvidenceEntry(key="payment_request_id", value="pi_3NxQ2f")
    stack.worker.stub.RecordEvidence(
        worker_pb2.RecordEvidenceRequest(job_no=job_no, worker_token=lease.worker_token, entries=[entry]),
        metadata=stack.worker.metadata, timeout=30,
    )  # fmt: skip
    saved = b"row 2500 of 9000"
    stack.worker.stub.ReportStage(
        worker_pb2.ReportStageRequest(job_no=job_no, worker_token=lease.worker_token, stage="PROCESSING",
                                      checkpoint=saved),
        metadata=stack.worker.metadata, timeout=30,
    )  # fmt: skip
    rows = {row["KIND"]: row for row in table(stack.jobctl("events", job_no, token=ADMIN).out)}
    assert rows["HANDLER_EVIDENCE"]["DETAIL"] == "payment_request_id = pi_3NxQ2f"
    digest = hashlib.sha256(saved).hexdigest()
    assert rows["CHECKPOINT_SAVED"]["DETAIL"] == f"16 bytes · sha256 {digest}"
    shown = stack.jobctl("checkpoint", job_no, token=ADMIN)
    assert shown.code == 0 and shown.out.splitlines() == [f"{job_no}: 16 bytes · sha256 {digest}", saved.decode()]
    written = tmp_path / "checkpoint.bin"
    assert stack.jobctl("checkpoint", job_no, "-o", str(written), token=ADMIN).code == 0
    assert written.read_bytes() == saved
    assert_clean_error(stack.jobctl("checkpoint", job_no), 4, "PERMISSION_DENIED")  # a client token


def test_events_shows_the_evidence_trail(stack: Stack) -> None:
    job_type = fresh_type("events")
    job_no = stack.submit(job_type, title="Import <customers> 客户")
    lease = stack.worker.claim(job_type)
    for done in range(1, 6):
        stack.worker.report(lease, "PROCESSING", done, 5)
    stack.worker.complete(lease)
    as_json = stack.jobctl("--json", "events", job_no, token=ADMIN)
    assert as_json.code == 0, as_json
    events = as_json.json()
    assert [int(e["version"]) for e in events] == list(range(1, len(events) + 1))
    kinds = [e["kind"] for e in events]
    assert kinds[0] == "SUBMITTED" and kinds[1] == "CLAIMED" and kinds[-1] == "COMPLETED", kinds
    assert events[1]["worker_id"] == stack.worker.worker_id
    assert (events[-1]["from_status"], events[-1]["to_status"]) == ("RUNNING", "READY")
    text = stack.jobctl("events", job_no, token=ADMIN)
    heading, trail = text.out.split("\n", 1)
    assert heading == "Import <customers> 客户", text  # the job's title, above its trail
    rows = table(trail)
    progress = [i for i, kind in enumerate(kinds) if kind == "PROGRESS"]
    assert len(progress) >= 3 and progress == list(range(progress[0], progress[-1] + 1)), kinds  # one run
    # the table keeps the run's first and last, and says how many it leaves out; --all shows them all
    folded = [*kinds[: progress[0] + 1], "PROGRESS", *kinds[progress[-1] :]]
    assert [row["KIND"] for row in rows] == folded, text
    assert f"{len(progress) - 2} more progress reports" in text.out
    assert [
        row["KIND"] for row in table(stack.jobctl("events", job_no, "--all", token=ADMIN).out.split("\n", 1)[1])
    ] == kinds
    assert rows[-1]["TRANSITION"] == "RUNNING → READY" and rows[0]["TRANSITION"] == "QUEUED"
    limited = stack.jobctl("--json", "events", job_no, "--limit", "2", token=ADMIN).json()
    assert [e["kind"] for e in limited] == kinds[:2]


def test_events_refusals(stack: Stack) -> None:
    job_no = stack.submit(fresh_type("events-refused"))
    assert_clean_error(stack.jobctl("events", job_no, token=CLIENT), 4, "PERMISSION_DENIED")
    assert_clean_error(stack.jobctl("events", job_no, token=OTHER_ADMIN), 4, "NOT_FOUND", "JOB_NOT_FOUND")
    assert_clean_error(stack.jobctl("events", "PT-20000101-999", token=ADMIN), 4, "NOT_FOUND")


def test_events_with_a_negative_limit_is_a_usage_error(stack: Stack) -> None:
    # As with list, a negative --limit is a usage error.
    job_no = stack.submit(fresh_type("events-limit"))
    assert_usage_error(stack.jobctl("events", job_no, "--limit", "-1", token=ADMIN), "--limit")


def test_inspect_lists_a_stalled_lease_and_requeue_hands_the_job_back(stack: Stack, stalled: Stalled) -> None:
    job_type, job_no, lease = stalled.job_type, stalled.job_no, stalled.lease
    shown = details(stack.jobctl("get", job_no).out)
    assert shown["status"] == "Processing" and "stalled: no news from the worker" in shown["progress"]

    text = stack.jobctl("inspect", token=ADMIN)
    assert text.code == 0, text
    rows = [row for row in table(text.out) if row["JOB"] == job_no]
    assert len(rows) == 1, text
    assert (rows[0]["KIND"], rows[0]["STATUS"], rows[0]["WORKER"]) == (
        "STALLED",
        "RUNNING PREPARING",
        stack.worker.worker_id,
    )
    as_json = stack.jobctl("--json", "inspect", "--kind", "STALLED", "--queue", "default", token=ADMIN)
    found = [f for f in as_json.json() if f["job_no"] == job_no]
    assert len(found) == 1 and found[0]["kind"] == "STALLED" and found[0]["status"] == "RUNNING", as_json
    narrower = (["--stalled-after", "86400"], ["--queue", "elsewhere"], ["--kind", "TERMINAL_WITH_TOKEN"])
    broken = ("--kind", "RUNNING_WITHOUT_LEASE", "--kind", "TERMINAL_WITH_TOKEN")
    *narrowed, invariants = each(
        *(lambda args=args: stack.jobctl("--json", "inspect", *args, token=ADMIN) for args in narrower),
        lambda: stack.jobctl("inspect", *broken, token=ADMIN),
    )
    for run in narrowed:
        assert run.code == 0 and job_no not in run.out and isinstance(run.json(), list), run
    assert invariants.code == 0 and invariants.out.startswith("no findings: no stalled leases"), invariants

    requeued = stack.jobctl("requeue", job_no, "--reason", "worker host died", token=ADMIN)
    assert requeued.code == 0, requeued
    assert details(requeued.out)["status"] == "Queued"
    events = stack.jobctl("--json", "events", job_no, token=ADMIN).json()
    assert events[-1]["kind"] == "REQUEUED"
    assert re.fullmatch(r"requeued by admin \w+: worker host died", events[-1]["detail"]), events[-1]  # who, then why
    with pytest.raises(grpc.RpcError) as late:  # the old lease can never write again
        stack.worker.complete(lease)
    assert late.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert error_reason(late.value) == "WORKER_LEASE_LOST"
    assert stack.worker.claim(job_type).job_no == job_no


def test_requeue_refusals(stack: Stack) -> None:
    job_type = fresh_type("requeue-refused")
    queued = stack.submit(job_type)
    run = stack.jobctl("requeue", queued, "--reason", "x", token=ADMIN)
    assert_clean_error(run, 4, "FAILED_PRECONDITION", "QUEUED job cannot be requeued")
    assert stack.worker.claim(job_type).job_no == queued
    alive = queued  # now RUNNING on a lease that is far from expiring
    run = stack.jobctl("requeue", alive, "--reason", "x", token=ADMIN)
    assert_clean_error(run, 4, "FAILED_PRECONDITION", "LEASE_ACTIVE")
    assert_clean_error(stack.jobctl("requeue", alive, "--reason", "x", token=CLIENT), 4, "PERMISSION_DENIED")
    assert stack.get(alive).status == Job.RUNNING


def test_requeue_prints_labels_in_the_asked_locale(stack: Stack, stalled: Stalled) -> None:
    # --locale reaches the server through RequeueRequest.locale.
    job_no = stalled.job_no
    run = stack.jobctl("--locale", "zh-CN", "requeue", job_no, "--reason", "x", token=ADMIN)
    assert run.code == 0, run
    assert details(run.out)["status"] == "排队中", run


def test_health_answers_a_probe_without_a_token(stack: Stack) -> None:
    serving = stack.jobctl("health", token=None)
    assert serving.code == 0 and serving.out.strip().endswith(": SERVING"), serving
    one = stack.jobctl("--json", "health", "--service", "jobwire.v1.JobService", token=None)
    assert one.code == 0 and one.json() == {"status": "SERVING"}, one
    assert_clean_error(stack.jobctl("health", "--service", "no.such.Service", token=None), 4, "NOT_FOUND")


def test_workers_lists_the_tenants_workers(stack: Stack) -> None:
    job_type = fresh_type("workers")
    special = f"{job_type}-queue"
    holder = Worker(stack.target, WORKER, worker_id=f"{job_type}-holder")
    other_worker = Worker(stack.target, OTHER_WORKER, worker_id=f"{job_type}-other-tenant")
    try:
        stack.submit(job_type, queue=special)
        holder.claim(job_type, queues=(special,))
        idle = stack.worker.claim_all(job_type, worker_id=f"{job_type}-idle")  # default queue, nothing to do
        assert idle == []
        assert other_worker.claim_all(job_type, queues=(special,)) == []  # not its tenant's job
    finally:
        holder.close()
        other_worker.close()
    run = stack.jobctl("--json", "workers", token=ADMIN)
    assert run.code == 0, run
    by_id = {w["worker_id"]: w for w in run.json()}
    assert by_id[f"{job_type}-holder"]["queues"] == [special]
    assert by_id[f"{job_type}-holder"]["job_types"] == [job_type]
    assert by_id[f"{job_type}-holder"]["leases_held"] == 1
    assert by_id[f"{job_type}-idle"].get("leases_held", 0) == 0
    only = stack.jobctl("--json", "workers", "--queue", special, token=ADMIN).json()
    assert [w["worker_id"] for w in only] == [f"{job_type}-holder"]
    rows = {row["WORKER"]: row for row in table(stack.jobctl("workers", "--queue", special, token=ADMIN).out)}
    assert set(rows) == {f"{job_type}-holder"}
    assert (rows[f"{job_type}-holder"]["QUEUES"], rows[f"{job_type}-holder"]["LEASES"]) == (special, "1")
    assert rows[f"{job_type}-holder"]["STATE"] == "live" and by_id[f"{job_type}-holder"]["live"] is True
    other = stack.jobctl("--json", "workers", token=OTHER_ADMIN)
    assert other.code == 0, other
    assert [w["worker_id"] for w in other.json() if w["worker_id"].startswith(job_type)] == [f"{job_type}-other-tenant"]
    assert f"{job_type}-other-tenant" not in by_id  # nor the other tenant's to the default tenant
    assert_clean_error(stack.jobctl("workers", token=CLIENT), 4, "PERMISSION_DENIED")


# ---- exit codes for what goes wrong -------------------------------------------------


def test_exit_4_for_every_refusal_with_a_plain_message(stack: Stack) -> None:
    job_no = stack.submit(fresh_type("refusals"))
    cases: list[tuple[tuple[str, ...], Token | None, tuple[str, ...]]] = [
        (("get", job_no), None, ("UNAUTHENTICATED",)),
        (("get", job_no), WRONG, ("UNAUTHENTICATED",)),
        (("get", job_no), WORKER, ("PERMISSION_DENIED",)),
        (("inspect",), CLIENT, ("PERMISSION_DENIED",)),
        (("get", job_no), OTHER_CLIENT, ("NOT_FOUND", "JOB_NOT_FOUND")),
        (("watch", "PT-20000101-999"), CLIENT, ("NOT_FOUND",)),
        (("cancel", "PT-20000101-999"), CLIENT, ("NOT_FOUND",)),
        (("get", "not-a-job-number"), CLIENT, ("INVALID_ARGUMENT", "job_no")),
        (("submit", "no spaces allowed"), CLIENT, ("INVALID_ARGUMENT", "job_type")),
        (("inspect", "--stalled-after", "-5"), ADMIN, ("INVALID_ARGUMENT", "stalled_after")),
        (("submit", "t", "--on-no-progress", "FAIL"), CLIENT, ("INVALID_ARGUMENT", "FAIL needs a stage_timeout")),
        (("submit", "t", "--job-timeout", "31d"), CLIENT, ("INVALID_ARGUMENT", "at most 30 days")),
    ]
    runs = each(*(lambda args=args, token=token: stack.jobctl(*args, token=token) for args, token, _ in cases))
    for (_, _, words), run in zip(cases, runs, strict=True):
        assert_clean_error(run, 4, *words)
    # a token on the command line wins over JOBWIRE_TOKEN
    assert stack.jobctl("get", job_no, "--token", CLIENT.secret, token=WRONG).code == 0


def test_exit_2_for_bad_arguments_before_anything_is_sent(stack: Stack) -> None:
    job_type = fresh_type("usage")
    cases: list[tuple[tuple[str, ...], str]] = [
        (("submit", job_type, "--payload", "{not json"), "not valid JSON"),
        (("submit", job_type, "--payload-file", str(stack.root / "absent")), "cannot read"),
        (("submit", job_type, "--label", "no-equals-sign"), "KEY=VALUE"),
        (("submit", job_type, "--run-after", "tomorrow"), "--run-after"),
        (("submit", job_type, "--on-lease-lost", "never"), "--on-lease-lost"),
        (("submit", job_type, "--timeout", "5x"), "not a duration"),
        (("submit", job_type, "--job-timeout", "soon"), "--job-timeout"),
        (("submit", job_type, "--stage-timeout", "-1m"), "--stage-timeout"),
        (("submit", job_type, "--on-no-progress", "panic"), "--on-no-progress"),
        (("submit", job_type, "--payload", "{}", "--payload-file", "-"), "not allowed"),
        (("list", "--status", "FINISHED"), "unknown status"),  # DONE is READY's word in en
        (("inspect", "--kind", "LOST"), "unknown finding kind"),
        (("requeue", "PT-20000101-001"), "--reason"),
        (("frobnicate",), "invalid choice"),
        ((), "COMMAND"),
    ]
    # with a client token: a bad submit that slipped through would create a job, caught below
    runs = each(*(lambda args=args: stack.jobctl(*args, token=CLIENT) for args, _ in cases))
    for (_, words), run in zip(cases, runs, strict=True):
        assert_usage_error(run, words)
    assert list(stack.jobs.list_jobs(job_type=job_type)) == []  # none of them submitted anything


def test_exit_5_when_jobwire_is_unreachable_or_too_slow(stack: Stack) -> None:
    unreachable = subprocess.run(
        [str(JOBCTL), "--target", "127.0.0.1:1", "get", "PT-20000101-001"],
        env=jobctl_env(CLIENT), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    run = Run(("--target", "127.0.0.1:1", "get"), unreachable.returncode, unreachable.stdout, unreachable.stderr)
    assert_clean_error(run, 5, "UNAVAILABLE", "is jobwire running at 127.0.0.1:1?")
    job_no = stack.submit(fresh_type("slow"))
    # Too slow: a server that took the connection and never answers (as a hung one would). A
    # real one given a microsecond sometimes answered within it: gRPC keeps deadlines to the
    # millisecond, and a quick Submit on loopback takes less.
    with silent_server() as silent:
        too_slow, submit_too_slow, tls_to_plain_text = each(
            lambda: stack.jobctl("--target", silent, "get", job_no, "--timeout", "0.5"),  # the later --target wins
            lambda: stack.jobctl("--target", silent, "--timeout", "0.5", "submit", "slow"),  # the call's, there
            lambda: stack.jobctl("--tls", "get", job_no, "--timeout", "10"),  # this server speaks plain text
        )
    assert_clean_error(too_slow, 5, "DEADLINE_EXCEEDED")
    assert_clean_error(submit_too_slow, 5, "DEADLINE_EXCEEDED")
    assert_clean_error(tls_to_plain_text, 5, "UNAVAILABLE", f"is jobwire running at {stack.target}?")


@contextlib.contextmanager
def silent_server() -> Iterator[str]:
    """HOST:PORT of a listener that accepts connections and never says a word."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                held.append(listener.accept()[0])

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    try:
        yield f"127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        acceptor.join(5)
        for conn in held:
            conn.close()
        listener.close()


def test_an_unreadable_ca_file_is_a_usage_error(stack: Stack) -> None:
    # No request is sent: a CA bundle that cannot be read is a usage error (2), not INTERNAL (4).
    run = stack.jobctl("--tls-ca", str(stack.root / "absent-ca.pem"), "get", "PT-20000101-001")
    assert_usage_error(run, "absent-ca.pem")


def test_exit_141_when_the_output_pipe_closes_early(stack: Stack) -> None:
    # rich's Console answers a broken pipe with SystemExit(1), the code of a FAILED job;
    # jobctl's console hands it to main(), which says 141.
    stack.submit(fresh_type("pipe"))
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader has already gone
    try:
        proc = subprocess.run(
            [str(JOBCTL), "--target", stack.target, "list"], env=jobctl_env(CLIENT), stdout=write_end,
            stderr=subprocess.PIPE, text=True, timeout=60,
        )  # fmt: skip
    finally:
        os.close(write_end)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 141, (proc.returncode, proc.stderr)


# ---- AdminClient in this process ----------------------------------------------------


def test_admin_client_inspect_finds_jobs_without_progress(stack: Stack, limited: Limited) -> None:
    found = _finding(stack.admin.inspect(kinds=["NO_PROGRESS"]), limited.no_progress)
    assert found is not None and found.kind == admin_pb2.Finding.NO_PROGRESS and found.status == Job.RUNNING
    assert found.HasField("progress_at") and found.stage == "PREPARING"
    assert _finding(stack.admin.inspect(kinds=["STALLED"]), limited.no_progress) is None  # its lease is alive


def test_admin_client_inspect_filters(stack: Stack, stalled: Stalled) -> None:
    job_no = stalled.job_no
    everything = stack.admin.inspect()
    assert all(isinstance(f, Finding) and isinstance(f.raw, admin_pb2.Finding) for f in everything)
    found = _finding(everything, job_no)
    assert found is not None and found.kind == admin_pb2.Finding.STALLED and found.status == Job.RUNNING
    assert found.worker_id == stack.worker.worker_id and found.queue == "default" and found.attempt == 1
    assert found.HasField("lease_expires_at")
    assert _finding(stack.admin.inspect(kinds=["stalled"]), job_no) is not None  # names, any case
    assert _finding(stack.admin.inspect(kinds=[admin_pb2.Finding.STALLED]), job_no) is not None  # numbers
    assert _finding(stack.admin.inspect(kinds=["TERMINAL_WITH_TOKEN", "RUNNING_WITHOUT_LEASE"]), job_no) is None
    assert _finding(stack.admin.inspect(stalled_after=timedelta(days=1)), job_no) is None
    assert _finding(stack.admin.inspect(stalled_after=0), job_no) is not None
    assert _finding(stack.admin.inspect(queue="default"), job_no) is not None
    assert _finding(stack.admin.inspect(queue="elsewhere"), job_no) is None
    with pytest.raises(InvalidArgumentError) as bad:
        stack.admin.inspect(stalled_after=-1)
    assert bad.value.reason == "INVALID_ARGUMENT" and any(f == "stalled_after" for f, _ in bad.value.violations)
    with AdminClient.connect(stack.target, OTHER_ADMIN.secret) as other:
        assert _finding(other.inspect(), job_no) is None


def test_admin_client_list_events_pages_through_the_trail(stack: Stack) -> None:
    job_type = fresh_type("admin-events")
    job_no = stack.submit(job_type)
    lease = stack.worker.claim(job_type)
    for done in range(1, 8):
        stack.worker.report(lease, "PROCESSING", done, 10)
    stack.worker.complete(lease)
    whole = list(stack.admin.list_events(job_no))
    versions = [e.version for e in whole]
    assert versions == list(range(1, len(whole) + 1)) and len(whole) >= 10, versions
    paged = list(stack.admin.list_events(job_no, page_size=3))  # at least four pages
    assert paged == whole
    assert [e.version for e in stack.admin.list_events(job_no, page_size=3, limit=5)] == [1, 2, 3, 4, 5]
    assert [e.kind for e in whole][:2] == ["SUBMITTED", "CLAIMED"] and whole[-1].kind == "COMPLETED"
    progress = [e for e in whole if e.kind in ("PROGRESS", "STAGE_CHANGED")]
    assert [e.processed_units for e in progress] == list(range(1, 8))
    assert all(e.total_units == 10 for e in progress)
    with pytest.raises(NotFoundError) as missing:
        list(stack.admin.list_events("PT-20000101-999"))
    assert missing.value.reason == "JOB_NOT_FOUND"
    with AdminClient.connect(stack.target, OTHER_ADMIN.secret) as other, pytest.raises(NotFoundError):
        list(other.list_events(job_no))


def test_admin_client_list_workers_pages_and_filters(stack: Stack) -> None:
    job_type = fresh_type("admin-workers")
    paging_queue = f"{job_type}-q"
    ids = [f"{job_type}-{i:03d}" for i in range(105)]  # the server's default page is 100
    assert stack.worker.claim_all(job_type) == []  # the module's worker is known too
    for worker_id in ids:
        assert stack.worker.claim_all(job_type, worker_id=worker_id, queues=(paging_queue,)) == []
    listed = list(stack.admin.list_workers(queue=paging_queue))
    assert [w.worker_id for w in listed] == ids  # each once, in order, across two pages
    assert all(list(w.queues) == [paging_queue] and list(w.job_types) == [job_type] for w in listed)
    assert all(w.leases_held == 0 and w.HasField("last_seen_at") for w in listed)
    assert [w.worker_id for w in stack.admin.list_workers(queue=paging_queue, limit=7)] == ids[:7]
    everyone = {w.worker_id for w in stack.admin.list_workers()}
    assert set(ids) <= everyone and stack.worker.worker_id in everyone
    with AdminClient.connect(stack.target, OTHER_ADMIN.secret) as other:
        assert list(other.list_workers(queue=paging_queue)) == []


def test_admin_client_requeue(stack: Stack, stalled: Stalled) -> None:
    job_type, job_no = stalled.job_type, stalled.job_no
    job = stack.admin.requeue(job_no, reason="the host was replaced")
    assert isinstance(job, JobView) and job.job_no == job_no and job.status == Job.QUEUED
    assert list(stack.admin.list_events(job_no))[-1].detail.endswith(": the host was replaced")  # after who did it
    with pytest.raises(FailedPreconditionError) as queued:
        stack.admin.requeue(job_no, reason="again")
    assert queued.value.code == grpc.StatusCode.FAILED_PRECONDITION
    lease = stack.worker.claim(job_type)
    assert lease.job_no == job_no
    with pytest.raises(FailedPreconditionError) as alive:
        stack.admin.requeue(job_no, reason="too soon")
    assert alive.value.reason == "LEASE_ACTIVE"
    with pytest.raises(NotFoundError):
        stack.admin.requeue("PT-20000101-999", reason="x")
    with pytest.raises(InvalidArgumentError) as bad:
        stack.admin.requeue("nope", reason="x")
    assert any(f == "job_no" for f, _ in bad.value.violations)


def test_admin_client_refuses_a_client_token_and_no_token(stack: Stack) -> None:
    job_no = stack.submit(fresh_type("admin-denied"))
    calls: dict[str, Callable[[AdminClient], object]] = {
        "inspect": lambda a: a.inspect(),
        "list_events": lambda a: list(a.list_events(job_no)),
        "requeue": lambda a: a.requeue(job_no, reason="x"),
        "list_workers": lambda a: list(a.list_workers()),
    }
    for token, error in (
        (CLIENT, PermissionDeniedError),
        (WORKER, PermissionDeniedError),
        (WRONG, UnauthenticatedError),
    ):
        with AdminClient.connect(stack.target, token.secret) as admin:
            for name, call in calls.items():
                with pytest.raises(error) as refused:
                    call(admin)
                expected = "PERMISSION_DENIED" if error is PermissionDeniedError else "UNAUTHENTICATED"
                assert refused.value.code_name == expected, name
                assert refused.value.message and "Traceback" not in refused.value.message
    with AdminClient(ChannelConfig(target=stack.target)) as anonymous, pytest.raises(UnauthenticatedError):
        anonymous.inspect()
    assert stack.get(job_no).status == Job.QUEUED  # the refused requeue changed nothing


def test_admin_client_says_unavailable_when_jobwire_is_unreachable() -> None:
    fast = RetrySettings(unary_backoff=Backoff(initial=0.01, maximum=0.05))
    with AdminClient.connect("127.0.0.1:1", ADMIN.secret, retry=fast) as admin:
        with pytest.raises(UnavailableError) as down:
            admin.inspect()
        assert down.value.code == grpc.StatusCode.UNAVAILABLE and down.value.reason is None
        with pytest.raises(UnavailableError):
            list(admin.list_workers())


def test_admin_client_on_a_shared_channel_leaves_it_open(stack: Stack) -> None:
    with AdminClient.connect(stack.target, ADMIN.secret) as owner:
        borrower = AdminClient(channel=owner.channel)
        borrower.close()  # not its channel: closing the borrower must not close it
        assert isinstance(owner.inspect(), list)
        assert isinstance(borrower.inspect(), list)


# ---- waiting for a person, dependencies, batches --------------------------------------


def test_resolve_decides_on_a_waiting_job_that_list_finds_by_assignee(stack: Stack) -> None:
    job_type = fresh_type("review")
    approved, rejected = stack.submit(job_type), stack.submit(job_type)
    for _ in (approved, rejected):
        lease = stack.worker.claim(job_type)
        assert stack.worker.await_review(lease, "alice", ["Totals", "Payee"]).status == Job.WAITING
    listed = stack.jobctl("list", "--status", "WAITING", "--assignee", "alice", "--type", job_type)
    assert sorted(row["JOB"] for row in table(listed.out)) == sorted([approved, rejected]), listed
    assert details(stack.jobctl("get", approved).out)["progress"] == "waiting for review by alice · Totals · Payee"
    assert stack.jobctl("list", "--assignee", "bob", "--type", job_type).out.count(job_type) == 0
    ok = stack.jobctl("resolve", approved, "approve", "--note", "Checked the totals")
    assert ok.code == 0 and stack.get(approved).status == Job.QUEUED, ok
    no = stack.jobctl("resolve", rejected, "reject", "--note", "The payee is wrong")
    assert no.code == 0, no
    failed = stack.get(rejected)
    assert (failed.status, failed.error.category, failed.error.message) == (
        Job.FAILED, job_pb2.JobError.REJECTED, "The payee is wrong",
    )  # fmt: skip
    assert_clean_error(stack.jobctl("resolve", approved, "approve"), 4, "FAILED_PRECONDITION", "JOB_NOT_WAITING")
    assert_clean_error(stack.jobctl("resolve", approved, "approve", token=WORKER), 4, "PERMISSION_DENIED")
    assert_usage_error(stack.jobctl("resolve", approved, "maybe"), "MAYBE")


def test_list_status_words_select_queued_and_waiting_for_review_apart(stack: Stack) -> None:
    """QUEUED reads "Queued" and WAITING "Waiting for review": a word selects one status."""
    job_type = fresh_type("words")
    waiting, queued = stack.submit(job_type), stack.submit(job_type)
    lease = stack.worker.claim(job_type)  # the first in line goes to a reviewer; the other stays queued
    assert lease.job_no == waiting
    assert stack.worker.await_review(lease, "alice", ["Totals"]).status == Job.WAITING

    def listed(*words: str) -> list[str]:
        run = stack.jobctl("--json", "list", "--type", job_type, *(a for w in words for a in ("--status", w)))
        assert run.code == 0, run
        return [j["job_no"] for j in run.json()]

    for word in ("Queued", "queued", "QUEUED", "排队中"):
        assert listed(word) == [queued], word
    for word in ("waiting for review", "Waiting for review", "waiting", "WAITING", "等待审核"):
        assert listed(word) == [waiting], word
    assert sorted(listed("Queued", "waiting for review")) == sorted([queued, waiting])
    rows = {row["JOB"]: row["STATUS"] for row in table(stack.jobctl("list", "--type", job_type).out)}
    assert rows == {queued: "Queued", waiting: "Waiting for review"}
    assert_usage_error(stack.jobctl("list", "--status", "Waiting for"), "Waiting for")


def test_submit_depends_on_waits_for_its_dependency(stack: Stack) -> None:
    first_type, then_type = fresh_type("dep-first"), fresh_type("dep-then")
    first = stack.submit(first_type)
    then = stack.submit_with_jobctl(then_type, "--depends-on", first)
    assert details(stack.jobctl("get", then).out)["progress"] == f"Waiting for {first}"  # the server's own line
    assert stack.worker.claim_all(then_type) == []  # not before its dependency is READY
    stack.worker.complete(stack.worker.claim(first_type))
    assert stack.worker.claim(then_type).job_no == then
    unknown = stack.jobctl("submit", then_type, "--depends-on", "PT-20000101-001")
    assert_clean_error(unknown, 4, "INVALID_ARGUMENT", "depends_on")


def test_batch_submit_get_watch_and_cancel(stack: Stack) -> None:
    job_type = fresh_type("batch")
    jobs = stack.root / f"{job_type}.jsonl"
    lines = ({"job_type": job_type, "payload": {"page": n}, "title": f"Page {n} · 第{n}页"} for n in range(3))
    jobs.write_text("".join(json.dumps(line) + "\n" for line in lines))
    made = stack.jobctl("--json", "batch", "submit", str(jobs), "--idempotency-key", f"{job_type}-key")
    assert made.code == 0, made
    batch_id, numbers = made.json()["batch_id"], [j["job_no"] for j in made.json()["jobs"]]
    again = stack.jobctl("--json", "batch", "submit", str(jobs), "--idempotency-key", f"{job_type}-key")
    assert again.json()["batch_id"] == batch_id  # the key replays the batch
    got = stack.jobctl("batch", "get", batch_id)
    assert got.code == 0 and "0/3 finished (0%)" in got.out and "queued 3" in got.out, got
    stack.worker.complete(stack.worker.claim(job_type))
    watching = stack.watch("batch", "watch", batch_id)
    cancelled = stack.jobctl("batch", "cancel", batch_id)
    assert cancelled.code == 0 and "3/3 finished (100%)" in cancelled.out and "cancelled 2" in cancelled.out
    assert watching.finish() == 0
    assert "3/3 finished" in watching.text, watching.text
    shown = watching.text.splitlines()
    for n in (1, 2):  # a line as `jobctl watch` prints it: the title first
        assert any(line.startswith(f"Page {n} · 第{n}页  {numbers[n]} Cancelled") for line in shown), watching.text
    assert {stack.get(n).status for n in numbers} == {Job.READY, Job.CANCELLED}
    assert_clean_error(stack.jobctl("batch", "get", batch_id, token=OTHER_CLIENT), 4, "NOT_FOUND")
    assert_usage_error(stack.jobctl("batch", "submit", str(stack.root / "absent.jsonl")), "absent.jsonl")


# ---- queue limits ---------------------------------------------------------------------


def test_queue_limits_shows_sets_and_replaces_a_queues_limits(stack: Stack) -> None:
    queue = fresh_type("limited")
    assert stack.jobctl("queue", "limits", queue, token=ADMIN).out.strip() == f"{queue}: no limits"
    set_both = stack.jobctl("queue", "limits", queue, "--max-running", "2", "--rate", "5", token=ADMIN)
    assert set_both.code == 0 and set_both.out.strip() == f"{queue}: at most 2 running · 5/s, burst 1", set_both
    # The limits given replace the queue's: --max-running alone leaves no rate.
    shown = stack.jobctl("--json", "queue", "limits", queue, "--max-running", "3", token=ADMIN).json()
    assert shown == {"queue": queue, "limits": {"max_running": 3}}
    assert stack.jobctl("--json", "queue", "limits", queue, token=ADMIN).json() == shown


def test_queue_pause_holds_a_queues_jobs_and_resume_lets_them_run(stack: Stack) -> None:
    queue, job_type = fresh_type("paused"), fresh_type("paused-job")
    paused = stack.jobctl("queue", "pause", queue, token=ADMIN)
    assert paused.code == 0 and paused.out.strip() == f"{queue}: paused", paused
    job_no = stack.submit(job_type, queue=queue)
    assert stack.worker.claim_all(job_type, queues=(queue,)) == []
    assert stack.get(job_no).display.detail == "Queued: the queue is paused"
    resumed = stack.jobctl("--json", "queue", "resume", queue, token=ADMIN)
    assert resumed.code == 0 and resumed.json() == {"queue": queue, "limits": {}}, resumed
    assert stack.worker.claim(job_type, queues=(queue,)).job_no == job_no


def test_queue_commands_refusals(stack: Stack) -> None:
    queue = fresh_type("refused")
    assert_clean_error(stack.jobctl("queue", "pause", queue, token=CLIENT), 4, "PERMISSION_DENIED")
    assert_clean_error(stack.jobctl("queue", "limits", "no spaces", token=ADMIN), 4, "INVALID_ARGUMENT", "queue")
    negative_rate = stack.jobctl("queue", "limits", queue, "--rate", "-1", token=ADMIN)
    assert_clean_error(negative_rate, 4, "INVALID_ARGUMENT", "rate_per_second")
    assert_usage_error(stack.jobctl("queue", "limits", queue, "--max-running", "-1", token=ADMIN), "--max-running")
    assert stack.jobctl("queue", "limits", queue, token=ADMIN).out.strip() == f"{queue}: no limits"


# ---- schedules ------------------------------------------------------------------------


def test_schedule_create_get_list_pause_resume_and_delete(stack: Stack) -> None:
    job_type = fresh_type("scheduled")
    made = stack.jobctl(
        "--json", "schedule", "create", f"{job_type}-every", job_type, "--every", "2s", "--overlap", "allow",
        "--payload", '{"report": "daily"}', "--queue", "reports", "--priority", "3", "--owner", "ops",
        "--label", "team=data", "--max-attempts", "2", "--on-lease-lost", "retry", "--timeout", "90s",
        "--job-timeout", "1h", "--stage-timeout", "5m", "--on-no-progress", "fail", "--title", "Daily report",
    )  # fmt: skip
    assert made.code == 0, made
    template = made.json()["template"]
    assert template["title"] == "Daily report"
    assert (template["job_type"], template["queue"], template["priority"], template["owner"]) == (
        job_type, "reports", 3, "ops",
    )  # fmt: skip
    assert template["labels"] == {"team": "data"} and template["retry_policy"]["max_attempts"] == 2
    assert template["timeouts"]["on_no_progress"] == "FAIL" and made.json()["overlap"] == "ALLOW"
    cron = stack.jobctl(
        "schedule", "create", f"{job_type}-cron", job_type, "--cron", "0 2 * * *", "--tz", "Asia/Shanghai",
        "--catch-up", "one",
    )  # fmt: skip
    assert cron.code == 0 and "cron 0 2 * * * Asia/Shanghai" in cron.out and "catch-up ONE" in cron.out, cron

    def fired() -> str | None:
        return stack.jobctl("--json", "schedule", "get", f"{job_type}-every").json().get("last_job_no")

    job_no = wait_for("a firing", fired)
    assert (stack.jobs.get(job_no).job_type, stack.jobs.get(job_no).title) == (job_type, "Daily report")
    listed = stack.jobctl("schedule", "list")
    assert listed.code == 0, listed
    titles = {row["schedule"]: row["title"] for row in table(textwrap.dedent(listed.out))}  # each row one edge space in
    assert (titles[f"{job_type}-every"], titles[f"{job_type}-cron"]) == ("Daily report", "-"), listed
    got = stack.jobctl("schedule", "get", f"{job_type}-every")
    assert got.out.splitlines()[:2] == ["Daily report", f"{job_type}-every: every 2s, active"], got
    assert len(stack.jobctl("--json", "schedule", "list", "--limit", "1").out.splitlines()) == 1
    paused = stack.jobctl("--json", "schedule", "pause", f"{job_type}-every")
    assert paused.json()["paused"] is True and "next_fire_time" not in paused.json(), paused
    resumed = stack.jobctl("schedule", "resume", f"{job_type}-every")
    assert resumed.code == 0 and "active" in resumed.out, resumed
    assert_clean_error(stack.jobctl("schedule", "get", f"{job_type}-every", token=OTHER_CLIENT), 4, "NOT_FOUND")
    for schedule_id in (f"{job_type}-every", f"{job_type}-cron"):
        assert stack.jobctl("schedule", "delete", schedule_id).code == 0
    assert_clean_error(stack.jobctl("schedule", "get", f"{job_type}-cron"), 4, "NOT_FOUND")


def test_schedule_create_refuses_bad_input_cleanly(stack: Stack) -> None:
    job_type = fresh_type("badschedule")
    bad_cron = stack.jobctl("schedule", "create", job_type, job_type, "--cron", "0 2 * *")
    assert_clean_error(bad_cron, 4, "INVALID_ARGUMENT", "cron")
    bad_zone = stack.jobctl("schedule", "create", job_type, job_type, "--cron", "0 2 * * *", "--tz", "Mars/Base")
    assert_clean_error(bad_zone, 4, "INVALID_ARGUMENT", "time_zone")
    assert_clean_error(stack.jobctl("schedule", "create", job_type, job_type, "--every", "0s"), 4, "every")
    assert_usage_error(stack.jobctl("schedule", "create", job_type, job_type))  # neither --cron nor --every
    assert_usage_error(stack.jobctl("schedule", "create", job_type, job_type, "--cron", "* * * * *", "--every", "5s"))
