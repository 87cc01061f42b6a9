"""jobctl's argument parsing, argument types, exit codes and error lines."""

from __future__ import annotations

import argparse
import io
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2
from rich.console import Console

from jobwire.client import Job, admin_commands, commands
from jobwire.client.channel import ChannelConfig
from jobwire.client.cli import build_parser, report_error, run
from jobwire.client.errors import NotFoundError, PermissionDeniedError, UnauthenticatedError, UnavailableError
from jobwire.v1 import job_pb2

pytestmark = pytest.mark.timeout(10)


def parse(*argv: str, env: dict[str, str] | None = None) -> argparse.Namespace:
    return build_parser(env or {}).parse_args(argv)


def console() -> Console:
    return Console(file=io.StringIO(), width=200, record=True, color_system=None)


def test_defaults_come_from_the_environment() -> None:
    args = parse("get", "PT-1", env={"JOBWIRE_TARGET": "jobapi:7000", "JOBWIRE_TOKEN": "t"})
    assert (args.target, args.token, args.locale, args.json) == (
        "jobapi:7000",
        "t",
        "en",
        False,
    )
    args = parse("get", "PT-1")
    assert args.target == "127.0.0.1:50051" and args.token is None


def test_global_options_work_before_and_after_the_command() -> None:
    before = parse("--json", "--target", "a:1", "watch", "PT-1")
    after = parse("watch", "PT-1", "--json", "--target", "a:1")
    assert (before.json, before.target) == (after.json, after.target) == (True, "a:1")


def test_submit_arguments() -> None:
    args = parse(
        "submit",
        "transcode",
        "--payload",
        '{"a": 1}',
        "--queue",
        "video",
        "--priority",
        "5",
        "--idempotency-key",
        "k1",
        "--owner",
        "alice",
        "--label",
        "env=prod",
        "--label",
        "team=media",
        "--max-attempts",
        "3",
        "--on-lease-lost",
        "retry",
    )
    assert args.job_type == "transcode" and args.queue == "video" and args.priority == 5
    assert dict(args.label) == {"env": "prod", "team": "media"}
    assert args.on_lease_lost == "RETRY" and args.max_attempts == 3
    assert commands.read_payload(args) == b'{"a": 1}'


def test_submit_time_limits_and_the_per_call_timeout_before_the_command() -> None:
    args = parse(
        "--timeout", "12", "submit", "transcode", "--timeout", "5m", "--job-timeout", "1h",
        "--stage-timeout", "90", "--on-no-progress", "fail",
    )  # fmt: skip
    assert args.timeout == 12.0  # seconds per call, given before the command
    assert (args.attempt_timeout, args.job_timeout, args.stage_timeout, args.on_no_progress) == (
        timedelta(minutes=5),
        timedelta(hours=1),
        timedelta(seconds=90),
        "FAIL",
    )
    plain = parse("submit", "transcode")
    assert plain.timeout == 30.0 and plain.attempt_timeout is None and plain.on_no_progress is None
    with pytest.raises(SystemExit):
        parse("submit", "transcode", "--timeout", "soon")


def test_submit_depends_on_is_repeatable() -> None:
    args = parse("submit", "transcode", "--depends-on", "PT-20261008-001", "--depends-on", "PT-20261008-002")
    assert args.depends_on == ["PT-20261008-001", "PT-20261008-002"]
    assert parse("submit", "transcode").depends_on == []


def test_payload_and_payload_file_exclude_each_other() -> None:
    with pytest.raises(SystemExit):
        parse("submit", "t", "--payload", "{}", "--payload-file", "x")


def test_invalid_json_payload_is_a_usage_error() -> None:
    with pytest.raises(commands.UsageError):
        commands.read_payload(parse("submit", "t", "--payload", "{not json"))


def test_payload_file_is_sent_as_is(tmp_path: Path) -> None:
    path = tmp_path / "in.bin"
    path.write_bytes(b"\x00raw")
    assert commands.read_payload(parse("submit", "t", "--payload-file", str(path))) == b"\x00raw"


def test_label_needs_key_and_value() -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        commands.label_arg("novalue")
    assert commands.label_arg("k=v=w") == ("k", "v=w")


def test_status_and_kind_names() -> None:
    assert parse("list", "--status", "running", "--status", "FAILED").status == [
        job_pb2.Job.RUNNING,
        job_pb2.Job.FAILED,
    ]
    with pytest.raises(argparse.ArgumentTypeError, match="unknown status 'FINISHED'"):
        commands.status_arg("FINISHED")
    with pytest.raises(argparse.ArgumentTypeError):
        commands.kind_arg("ZOMBIE")


@pytest.mark.parametrize(
    ("word", "status"),
    [
        ("Processing", job_pb2.Job.RUNNING),
        ("processing", job_pb2.Job.RUNNING),
        ("DONE", job_pb2.Job.READY),
        ("Ready", job_pb2.Job.READY),  # the name, any case
        (" not completed ", job_pb2.Job.FAILED),
        ("Waiting for review", job_pb2.Job.WAITING),
        ("waiting  FOR review", job_pb2.Job.WAITING),
        ("waiting", job_pb2.Job.WAITING),  # the name
        ("Queued", job_pb2.Job.QUEUED),
        ("queued", job_pb2.Job.QUEUED),
        ("正在处理", job_pb2.Job.RUNNING),
        ("排队中", job_pb2.Job.QUEUED),
        ("等待审核", job_pb2.Job.WAITING),
    ],
)
def test_status_accepts_the_words_people_see(word: str, status: int) -> None:
    assert parse("list", "--status", word).status == [status]


def test_run_after_accepts_iso_times_and_delays() -> None:
    assert commands.when_arg("2026-10-08T12:00:00") == datetime(2026, 10, 8, 12, tzinfo=UTC)
    delay = commands.when_arg("5m") - datetime.now(UTC)
    assert 290 < delay.total_seconds() <= 300
    with pytest.raises(argparse.ArgumentTypeError):
        commands.when_arg("tomorrow")


def test_requeue_needs_a_reason() -> None:
    with pytest.raises(SystemExit):
        parse("requeue", "PT-1")
    assert parse("requeue", "PT-1", "--reason", "worker host died").reason == "worker host died"


@pytest.mark.parametrize(
    ("status", "code"),
    [(job_pb2.Job.READY, 0), (job_pb2.Job.FAILED, 1), (job_pb2.Job.CANCELLED, 3)],
)
def test_watch_exit_codes(status: job_pb2.Job.Status.ValueType, code: int) -> None:
    assert commands.exit_code(Job(job_pb2.Job(status=status))) == code


def test_error_line_and_exit_code() -> None:
    err = console()
    error = NotFoundError(grpc.StatusCode.NOT_FOUND, "No such job.", reason="JOB_NOT_FOUND")
    assert report_error(err, error, "h:1") == commands.EXIT_REFUSED
    assert err.export_text() == "error: NOT_FOUND JOB_NOT_FOUND: No such job.\n"


def test_unreachable_server_exit_code_and_hint() -> None:
    err = console()
    error = UnavailableError(grpc.StatusCode.UNAVAILABLE, "failed to connect")
    assert report_error(err, error, "h:1") == commands.EXIT_UNAVAILABLE
    assert err.export_text().splitlines() == [
        "error: UNAVAILABLE: failed to connect",
        "  is jobwire running at h:1?",
    ]


def test_token_refusals_say_the_code_once_and_what_to_do() -> None:
    err = console()
    error = UnauthenticatedError(grpc.StatusCode.UNAUTHENTICATED, "send a token", reason="UNAUTHENTICATED")
    assert report_error(err, error, "h:1") == commands.EXIT_REFUSED
    first, hint = err.export_text().splitlines()
    assert first == "error: UNAUTHENTICATED: send a token"
    assert "--token" in hint and "JOBWIRE_TOKEN" in hint
    err = console()  # the server's words say which role, or which queues: nothing to add
    denied = PermissionDeniedError(grpc.StatusCode.PERMISSION_DENIED, "needs client", reason="PERMISSION_DENIED")
    report_error(err, denied, "h:1")
    assert err.export_text().splitlines() == ["error: PERMISSION_DENIED: needs client"]


def test_a_missing_job_names_it_and_where_to_look() -> None:
    err = console()
    error = NotFoundError(grpc.StatusCode.NOT_FOUND, "No such job.", reason="JOB_NOT_FOUND")
    report_error(err, error, "h:1", job_no="PT-20260101-009")
    assert err.export_text().splitlines()[1].startswith("  no job PT-20260101-009 that this token can see")


def test_an_unknown_option_is_refused_by_its_commands_parser(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, usage in ((["submit", "count-words", "--bogus"], "jobctl submit"),
                        (["schedule", "list", "--zzz"], "jobctl schedule list")):  # fmt: skip
        assert run(argv, out=console(), err=console(), env={}) == 2
        said = capsys.readouterr().err
        assert f"{usage}: error: unrecognized arguments: {argv[-1]}" in said
        assert said.startswith(f"usage: {usage} ")  # the options that command has


def test_usage_errors_exit_2_without_a_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run(["frobnicate"], out=console(), err=console(), env={}) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_unreadable_payload_file_is_one_line(tmp_path: Path) -> None:
    err = console()
    missing = str(tmp_path / "missing.json")
    assert run(["submit", "t", "--payload-file", missing], out=console(), err=err, env={}) == 2
    assert err.export_text().startswith("error: cannot read ")


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["submit", "t", "--priority", "999999999999"], "priority"),
        (["submit", "t", "--priority", "-2147483649"], "priority"),
        (["submit", "t", "--max-attempts", "4294967296"], "max_attempts"),
        (["watch", "PT-20261130-001", "--after-version", str(2**64)], "after_version"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else v,
)
def test_out_of_range_numbers_are_invalid_argument_naming_the_field(argv: list[str], field: str) -> None:
    """Security review, finding 11: `--priority 999999999999` answered INTERNAL ValueError."""
    err = console()
    # Nothing listens on port 1: the error comes before any call is made.
    assert run(["--target", "127.0.0.1:1", *argv], out=console(), err=err, env={}) == commands.EXIT_REFUSED
    text = err.export_text()
    assert text.startswith(f"error: INVALID_ARGUMENT: {field} is out of range"), text
    assert "ValueError" not in text


def test_watch_against_a_wrong_port_says_it_reconnects_and_gives_up() -> None:
    """Security review, finding 13: `jobctl watch` at a wrong port printed nothing and retried forever."""
    out, err, pauses = console(), console(), []
    ctx = commands.Context(
        config=ChannelConfig(target="127.0.0.1:1"),
        locale="en",
        as_json=False,
        timeout=2.0,
        out=out,
        err=err,
        sleep=pauses.append,
    )
    with pytest.raises(UnavailableError):
        commands.follow(ctx, ctx.jobs(), "PT-20261130-001", 0)
    lines = err.export_text().splitlines()
    assert len(pauses) == commands.WATCH_RECONNECTS
    assert len(lines) == commands.WATCH_RECONNECTS
    assert lines[0].startswith("lost jobwire at 127.0.0.1:1 (UNAVAILABLE")
    assert lines[-1].endswith(f"(try {commands.WATCH_RECONNECTS} of {commands.WATCH_RECONNECTS})")


def test_resolve_and_list_by_assignee_arguments() -> None:
    args = parse("resolve", "PT-20261201-007", "reject", "--note", "Totals are off")
    assert (args.job_no, args.decision, args.note, args.handler) == (
        "PT-20261201-007", "REJECT", "Totals are off", commands.cmd_resolve,
    )  # fmt: skip
    assert parse("resolve", "PT-1", "approve").note == ""
    with pytest.raises(SystemExit):
        parse("resolve", "PT-1", "maybe")
    args = parse("list", "--status", "WAITING", "--assignee", "alice")
    assert (args.status, args.assignee) == ([job_pb2.Job.WAITING], "alice")


class _Results:
    """What `jobctl result` asks of a JobClient: the result's chunks (None: the fetch fails there)."""

    def __init__(self, chunks: list[bytes | None]) -> None:
        self.chunks = chunks

    def __enter__(self) -> _Results:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def result_chunks(self, job_no: str) -> Iterator[bytes]:
        for chunk in self.chunks:
            if chunk is None:  # the fetch breaks off here
                raise UnavailableError(grpc.StatusCode.UNAVAILABLE, "the connection broke")
            yield chunk


class _Stdout:
    def __init__(self, terminal: bool) -> None:
        self.buffer = io.BytesIO()
        self.terminal = terminal

    def isatty(self) -> bool:
        return self.terminal


@pytest.mark.parametrize(
    ("chunks", "terminal", "shown"),
    [
        ([b'{"a":', b" 1}"], True, b'{"a": 1}\n'),  # a terminal's prompt starts a line of its own
        ([b'{"a":', b" 1}"], False, b'{"a": 1}'),  # piped: the bytes exactly
        ([b"line\n"], True, b"line\n"),
        ([b"x", b""], True, b"x\n"),
        ([b"part", None], True, b"part\n"),  # broken off: the error that follows starts its own line
    ],
)
def test_result_to_a_terminal_ends_its_line(
    monkeypatch: pytest.MonkeyPatch, chunks: list[bytes | None], terminal: bool, shown: bytes
) -> None:
    stdout = _Stdout(terminal)
    monkeypatch.setattr(commands.sys, "stdout", stdout)
    monkeypatch.setattr(commands.Context, "jobs", lambda self: _Results(chunks))
    ctx = commands.Context(config=ChannelConfig(target="h:1"), locale="en", as_json=False, timeout=5.0,
                           out=console(), err=console())  # fmt: skip
    asked = argparse.Namespace(job_no="PT-20260101-001", output=None)
    if None in chunks:
        with pytest.raises(UnavailableError):
            commands.cmd_result(ctx, asked)
    else:
        assert commands.cmd_result(ctx, asked) == 0
    assert stdout.buffer.getvalue() == shown


def test_inspect_kind_offers_and_names_every_kind(capsys: pytest.CaptureFixture[str]) -> None:
    assert set(commands.FINDING_KINDS) == {"STALLED", "RUNNING_WITHOUT_LEASE", "TERMINAL_WITH_TOKEN", "NO_PROGRESS",
                                           "NO_WORKER"}  # fmt: skip
    assert run(["inspect", "--kind", "STALE"], out=console(), err=console(), env={}) == 2
    said = capsys.readouterr().err
    assert "unknown finding kind 'STALE'" in said and all(kind in said for kind in commands.FINDING_KINDS)
    assert build_parser({}).parse_args(["inspect", "--kind", "no_worker"]).kind == [5]


@pytest.mark.parametrize(
    ("status", "code"),
    [(health_pb2.HealthCheckResponse.SERVING, 0), (health_pb2.HealthCheckResponse.NOT_SERVING, 5)],
)
def test_health_exits_0_serving_and_5_not(
    monkeypatch: pytest.MonkeyPatch, status: health_pb2.HealthCheckResponse.ServingStatus.ValueType, code: int
) -> None:
    class Answering:
        def __init__(self, channel: object) -> None:
            pass

        def Check(self, request: health_pb2.HealthCheckRequest, timeout: float) -> health_pb2.HealthCheckResponse:
            return health_pb2.HealthCheckResponse(status=status)

    class Channelled(_Results):
        channel = None

    monkeypatch.setattr(admin_commands.health_pb2_grpc, "HealthStub", Answering)
    monkeypatch.setattr(commands.Context, "jobs", lambda self: Channelled([]))
    out = console()
    ctx = commands.Context(config=ChannelConfig(target="h:1"), locale="en", as_json=False, timeout=2.0,
                           out=out, err=console())  # fmt: skip
    assert admin_commands.cmd_health(ctx, argparse.Namespace(service="")) == code
    assert out.export_text().strip() == f"h:1: {health_pb2.HealthCheckResponse.ServingStatus.Name(status)}"
