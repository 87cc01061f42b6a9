"""jobwire-worker's arguments, environment fallbacks and handler loading."""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path

import pytest

from jobwire.worker.sdk import Handlers, WorkerConfig
from jobwire.worker.sdk.cli import build_config, build_parser, load_handlers, main, parse_args


@pytest.fixture(autouse=True)
def no_jobwire_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test sets the variables it reads: none come from the shell that runs it."""
    for name in list(os.environ):
        if name.startswith("JOBWIRE_"):
            monkeypatch.delenv(name)


def test_flags_build_the_config(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    args = parse_args(
        ["--target", "h:1", "--handlers", "jobwire.examples:handlers", "--queue", "a", "--queue", "b",
         "--concurrency", "3", "--worker-id", "w9", "--token-file", str(token), "--lease-seconds", "12"]
    )  # fmt: skip
    config = build_config(args)
    assert (config.target, config.queues, config.concurrency, config.worker_id) == ("h:1", ("a", "b"), 3, "w9")
    assert (config.token, config.lease_duration) == ("s3cret", 12.0)


def test_environment_fallbacks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBWIRE_TARGET", "envhost:7")
    monkeypatch.setenv("JOBWIRE_TOKEN", "from-env")
    config = build_config(parse_args(["--handlers", "jobwire.examples:handlers"]))
    assert (config.target, config.token, config.queues) == ("envhost:7", "from-env", ("default",))
    assert config.lease_duration is None


def test_results_url_flag_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert build_config(parse_args(["--handlers", "jobwire.examples:handlers"])).results_url is None  # file:// URIs
    monkeypatch.setenv("JOBWIRE_RESULTS_URL", "s3://bucket/prefix/")
    assert build_config(parse_args(["--handlers", "jobwire.examples:handlers"])).results_url == "s3://bucket/prefix/"
    args = parse_args(["--handlers", "jobwire.examples:handlers", "--results-url", "https://files.example/jobwire/"])
    assert build_config(args).results_url == "https://files.example/jobwire/"


def test_transport_and_session_grace_flags_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    config = build_config(parse_args(["--handlers", "jobwire.examples:handlers"]))
    assert (config.transport, config.session_grace) == ("session", 3.0)  # the server's default grace
    monkeypatch.setenv("JOBWIRE_WORKER_TRANSPORT", "unary")
    monkeypatch.setenv("JOBWIRE_SESSION_GRACE_SECONDS", "7.5")
    config = build_config(parse_args(["--handlers", "jobwire.examples:handlers"]))
    assert (config.transport, config.session_grace) == ("unary", 7.5)
    args = parse_args(
        ["--handlers", "jobwire.examples:handlers", "--transport", "session", "--session-grace-seconds", "1"]
    )
    assert (build_config(args).transport, build_config(args).session_grace) == ("session", 1.0)


def test_a_transport_not_known_exits_2(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("JOBWIRE_WORKER_TRANSPORT", "grpc-web")
    assert main(["--handlers", "jobwire.examples:handlers"]) == 2
    assert "transport must be session or unary, not 'grpc-web'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="session_grace"):
        WorkerConfig(target="h:1", session_grace=-1)


def test_a_relative_results_url_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--handlers", "jobwire.examples:handlers", "--results-url", "files.example/x"]) == 2
    assert "results_url" in capsys.readouterr().err


def test_handlers_load_from_module_and_object() -> None:
    handlers = load_handlers("jobwire.examples:handlers")
    assert isinstance(handlers, Handlers)
    assert {s.job_type for s in handlers} == {"frames", "csv_import", "report"}
    assert "frames" in load_handlers("jobwire.examples.frames:handlers")


@pytest.mark.parametrize(
    "spec",
    ["jobwire.examples", "jobwire.examples:nope", "no_such_module_xyz:handlers", "jobwire.examples.frames:WIDTH"],
)
def test_bad_handler_specs_exit_2(spec: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--target", "h:1", "--handlers", spec]) == 2
    assert "jobwire-worker:" in capsys.readouterr().err


def _options() -> list[argparse.Action]:
    """Every option of the parser, but --help and --version (they set nothing)."""
    return [a for a in build_parser()._actions if a.option_strings and a.dest not in ("help", "version")]


def test_help_lists_every_setting_with_its_environment_variable(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--help"])
    shown = " ".join(capsys.readouterr().out.split())  # argparse wraps lines where it likes
    options = _options()
    assert len(options) >= 20  # the parser's own list, not one written here
    for option in options:
        flag = option.option_strings[0]
        named = re.search(r"\benv (JOBWIRE_[A-Z_]+)", option.help or "")
        assert named, f"{flag}'s help names no environment variable"
        assert f"{named[1]} {flag}" in shown, flag  # the environment table pairs each with its flag
    assert "JOBWIRE_TOKEN the bearer token itself" in shown
    assert "OTEL_*" in shown
    assert "3 the server refused the token" in shown


SETTINGS = {
    "JOBWIRE_HANDLERS": "jobwire.examples.frames:handlers",
    "JOBWIRE_QUEUES": "exports, imports,",
    "JOBWIRE_CONCURRENCY": "9",
    "JOBWIRE_WORKER_ID": "env-worker",
    "JOBWIRE_LEASE_SECONDS": "45",
    "JOBWIRE_SHUTDOWN_GRACE_SECONDS": "60",
    "JOBWIRE_CLAIM_WAIT_SECONDS": "2.5",
    "JOBWIRE_TMP_DIR": "/scratch",
    "JOBWIRE_TLS": "yes",
    "JOBWIRE_TLS_CA": "/etc/jobwire/ca.pem",
    "JOBWIRE_TLS_CLIENT_CERT": "/etc/jobwire/worker.pem",
    "JOBWIRE_TLS_CLIENT_KEY": "/etc/jobwire/worker.key",
}


def test_the_worker_settings_come_from_their_environment_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in SETTINGS.items():
        monkeypatch.setenv(name, value)
    args = parse_args([])  # --handlers is not required when JOBWIRE_HANDLERS names them
    config = build_config(args)
    assert args.handlers == "jobwire.examples.frames:handlers"
    assert (config.queues, config.concurrency, config.worker_id) == (("exports", "imports"), 9, "env-worker")
    assert (config.lease_duration, config.grace_period, config.claim_wait) == (45.0, 60.0, 2.5)
    assert (config.tmp_root, config.tls, config.tls_ca) == (Path("/scratch"), True, Path("/etc/jobwire/ca.pem"))
    assert (config.tls_cert, config.tls_key) == (Path("/etc/jobwire/worker.pem"), Path("/etc/jobwire/worker.key"))


def test_a_flag_wins_over_its_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in SETTINGS.items():
        monkeypatch.setenv(name, value)
    args = parse_args(
        ["--handlers", "jobwire.examples:handlers", "--queue", "q1", "--concurrency", "2", "--worker-id", "w2",
         "--lease-seconds", "10", "--grace-seconds", "5", "--claim-wait", "1", "--no-tls", "--tmp-dir", "/t"]
    )  # fmt: skip
    config = build_config(args)
    assert args.handlers == "jobwire.examples:handlers"
    assert (config.queues, config.concurrency, config.worker_id) == (("q1",), 2, "w2")  # not added to the variable's
    assert (config.lease_duration, config.grace_period, config.claim_wait) == (10.0, 5.0, 1.0)
    assert (config.tmp_root, config.tls) == (Path("/t"), False)


def test_without_handlers_in_a_flag_or_the_environment_it_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        parse_args([])
    assert stop.value.code == 2 and "--handlers" in capsys.readouterr().err


def test_a_tls_variable_that_is_not_yes_or_no_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("JOBWIRE_TLS", "maybe")
    with pytest.raises(SystemExit) as stop:
        parse_args(["--handlers", "jobwire.examples:handlers"])
    assert (
        stop.value.code == 2 and "JOBWIRE_TLS must be 1/true/yes or 0/false/no, not 'maybe'" in capsys.readouterr().err
    )
