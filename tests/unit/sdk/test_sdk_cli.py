"""jobwire-worker's arguments, environment fallbacks and handler loading."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobwire.worker.sdk import Handlers, WorkerConfig
from jobwire.worker.sdk.cli import build_config, load_handlers, main, parse_args


def test_flags_build_the_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JOBWIRE_TARGET", raising=False)
    monkeypatch.delenv("JOBWIRE_TOKEN", raising=False)
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
    monkeypatch.delenv("JOBWIRE_RESULTS_URL", raising=False)
    assert build_config(parse_args(["--handlers", "jobwire.examples:handlers"])).results_url is None  # file:// URIs
    monkeypatch.setenv("JOBWIRE_RESULTS_URL", "s3://bucket/prefix/")
    assert build_config(parse_args(["--handlers", "jobwire.examples:handlers"])).results_url == "s3://bucket/prefix/"
    args = parse_args(["--handlers", "jobwire.examples:handlers", "--results-url", "https://files.example/jobwire/"])
    assert build_config(args).results_url == "https://files.example/jobwire/"


def test_transport_and_session_grace_flags_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JOBWIRE_WORKER_TRANSPORT", raising=False)
    monkeypatch.delenv("JOBWIRE_SESSION_GRACE_SECONDS", raising=False)
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


def test_help_lists_every_setting_with_its_environment_variable(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--help"])
    shown = " ".join(capsys.readouterr().out.split())  # argparse wraps lines where it likes
    for flag, variable in [
        ("--target", "JOBWIRE_TARGET"),
        ("--token-file", "JOBWIRE_TOKEN_FILE"),
        ("--results-dir", "JOBWIRE_RESULTS_DIR"),
        ("--results-url", "JOBWIRE_RESULTS_URL"),
        ("--transport", "JOBWIRE_WORKER_TRANSPORT"),
        ("--session-grace-seconds", "JOBWIRE_SESSION_GRACE_SECONDS"),
        ("--log-level", "JOBWIRE_LOG_LEVEL"),
        ("--log-format", "JOBWIRE_LOG_FORMAT"),
    ]:
        assert f"{variable} {flag}" in shown, variable  # the environment table pairs each with its flag
    assert "JOBWIRE_TOKEN the bearer token itself" in shown
    assert "OTEL_*" in shown
    assert "3 the server refused the token" in shown
