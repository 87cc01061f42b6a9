"""Server settings are checked at start: a bad one stops the server naming the variable."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from jobwire.rpc.server import connection_age_options
from jobwire.runtime.parts import endpoint
from jobwire.runtime.settings import Settings


def test_defaults_and_environment() -> None:
    settings = Settings.from_env({"JOBWIRE_LEASE_SECONDS": "12", "JOBWIRE_JOB_PREFIX": "ACME2"})
    assert (settings.lease_seconds, settings.job_prefix, settings.stall_grace) == (12.0, "ACME2", 12.0)
    assert Settings.from_env({}).database_url == "sqlite:///var/jobwire.db"
    assert Settings.from_env({"JOBWIRE_RESULT_SCHEMES": "minio, https"}).result_schemes == {"minio", "https"}
    assert Settings.from_env({}).default_attempt_timeout_seconds is None  # unset: no default limit
    assert Settings.from_env({"JOBWIRE_DEFAULT_ATTEMPT_TIMEOUT": "600"}).default_attempt_timeout_seconds == 600.0
    assert Settings.from_env({}).no_worker_after_seconds == 300.0
    assert Settings.from_env({"JOBWIRE_NO_WORKER_AFTER": "60"}).no_worker_after_seconds == 60.0
    limits = Settings.from_env({})
    assert (limits.max_watched_jobs, limits.max_transfers, limits.stream_idle_seconds) == (100_000, 256, 60.0)
    assert limits.max_result_bytes == 5 << 30
    assert Settings.from_env({"JOBWIRE_MAX_RESULT_BYTES": "1000"}).max_result_bytes == 1000
    assert Settings.from_env({}).max_schedules_per_tenant == 1000
    assert Settings.from_env({"JOBWIRE_MAX_SCHEDULES_PER_TENANT": "50"}).max_schedules_per_tenant == 50
    assert Settings.from_env({}).chore_lease_seconds == 15.0
    assert Settings.from_env({}).session_grace_seconds == 3.0
    assert Settings.from_env({"JOBWIRE_SESSION_GRACE_SECONDS": "0.5"}).session_grace_seconds == 0.5
    assert Settings.from_env({"JOBWIRE_CHORE_LEASE_SECONDS": "2.5"}).chore_lease_seconds == 2.5
    assert Settings.from_env({}).list_scan_rows == 1000
    assert Settings.from_env({"JOBWIRE_LIST_SCAN_ROWS": "200"}).list_scan_rows == 200


@pytest.mark.parametrize(
    ("env", "names"),
    [
        ({"JOBWIRE_JOB_PREFIX": "acme"}, "JOBWIRE_JOB_PREFIX"),
        ({"JOBWIRE_JOB_PREFIX": "A-B"}, "JOBWIRE_JOB_PREFIX"),
        ({"JOBWIRE_LEASE_SECONDS": "0.5"}, "JOBWIRE_LEASE_SECONDS"),
        ({"JOBWIRE_LEASE_SECONDS": "7200"}, "JOBWIRE_LEASE_SECONDS"),
        ({"JOBWIRE_TLS_CERT": "/etc/cert.pem"}, "JOBWIRE_TLS_KEY"),
        ({"JOBWIRE_TLS_CLIENT_CA": "/etc/ca.pem"}, "JOBWIRE_TLS_CLIENT_CA"),
        ({"JOBWIRE_MAX_STREAMS": "0"}, "JOBWIRE_MAX_STREAMS"),
        ({"JOBWIRE_MAX_WATCHED_JOBS": "0"}, "JOBWIRE_MAX_WATCHED_JOBS"),
        ({"JOBWIRE_MAX_TRANSFERS": "0"}, "JOBWIRE_MAX_TRANSFERS"),
        ({"JOBWIRE_STREAM_IDLE_SECONDS": "0"}, "JOBWIRE_STREAM_IDLE_SECONDS"),
        ({"JOBWIRE_STREAM_IDLE_SECONDS": "nan"}, "JOBWIRE_STREAM_IDLE_SECONDS"),
        ({"JOBWIRE_MAX_RESULT_BYTES": "0"}, "JOBWIRE_MAX_RESULT_BYTES"),
        ({"JOBWIRE_LIST_SCAN_ROWS": "0"}, "JOBWIRE_LIST_SCAN_ROWS"),
        ({"JOBWIRE_REAPER_INTERVAL_SECONDS": "-1"}, "JOBWIRE_REAPER_INTERVAL_SECONDS"),
        ({"JOBWIRE_SESSION_GRACE_SECONDS": "-1"}, "JOBWIRE_SESSION_GRACE_SECONDS"),
        ({"JOBWIRE_SESSION_GRACE_SECONDS": "nan"}, "JOBWIRE_SESSION_GRACE_SECONDS"),
        ({"JOBWIRE_SESSION_GRACE_SECONDS": "7200"}, "JOBWIRE_SESSION_GRACE_SECONDS"),
        ({"JOBWIRE_CHORE_LEASE_SECONDS": "0"}, "JOBWIRE_CHORE_LEASE_SECONDS"),
        ({"JOBWIRE_CHORE_LEASE_SECONDS": "nan"}, "JOBWIRE_CHORE_LEASE_SECONDS"),
        ({"JOBWIRE_RESULT_SCHEMES": "HTTPS"}, "JOBWIRE_RESULT_SCHEMES"),
        ({"JOBWIRE_RETENTION_WORKER_DAYS": "0"}, "JOBWIRE_RETENTION_WORKER_DAYS"),
        ({"JOBWIRE_RESULT_SCHEMES": "https:"}, "JOBWIRE_RESULT_SCHEMES"),
        ({"JOBWIRE_RESULT_SCHEMES": " , "}, "JOBWIRE_RESULT_SCHEMES"),
        ({"JOBWIRE_MIGRATE": "maybe"}, "JOBWIRE_MIGRATE"),
        ({"JOBWIRE_LOG_FORMAT": "xml"}, "JOBWIRE_LOG_FORMAT"),
        ({"JOBWIRE_LOG_LEVEL": "chatty"}, "JOBWIRE_LOG_LEVEL"),
        ({"JOBWIRE_DEFAULT_ATTEMPT_TIMEOUT": "0"}, "JOBWIRE_DEFAULT_ATTEMPT_TIMEOUT"),
        ({"JOBWIRE_DEFAULT_ATTEMPT_TIMEOUT": "-5"}, "JOBWIRE_DEFAULT_ATTEMPT_TIMEOUT"),
        ({"JOBWIRE_DEFAULT_ATTEMPT_TIMEOUT": "nan"}, "JOBWIRE_DEFAULT_ATTEMPT_TIMEOUT"),
        ({"JOBWIRE_DEFAULT_ATTEMPT_TIMEOUT": "2600000"}, "JOBWIRE_DEFAULT_ATTEMPT_TIMEOUT"),
        ({"JOBWIRE_NO_WORKER_AFTER": "0"}, "JOBWIRE_NO_WORKER_AFTER"),
        ({"JOBWIRE_NO_WORKER_AFTER": "nan"}, "JOBWIRE_NO_WORKER_AFTER"),
        ({"JOBWIRE_NO_WORKER_AFTER": "2600000"}, "JOBWIRE_NO_WORKER_AFTER"),
        ({"JOBWIRE_MAX_SCHEDULES_PER_TENANT": "0"}, "JOBWIRE_MAX_SCHEDULES_PER_TENANT"),
        ({"JOBWIRE_MAX_CONNECTION_AGE_SECONDS": "-1"}, "JOBWIRE_MAX_CONNECTION_AGE_SECONDS"),
        ({"JOBWIRE_MAX_CONNECTION_AGE_SECONDS": "nan"}, "JOBWIRE_MAX_CONNECTION_AGE_SECONDS"),
        ({"JOBWIRE_MAX_CONNECTION_AGE_GRACE_SECONDS": "0"}, "JOBWIRE_MAX_CONNECTION_AGE_GRACE_SECONDS"),
        ({"JOBWIRE_PROCESSES": "65"}, "JOBWIRE_PROCESSES"),
    ],
)
def test_bad_settings_are_refused_naming_the_variable(env: dict[str, str], names: str) -> None:
    with pytest.raises(ValueError, match=names):
        Settings.from_env(env)


def test_tls_needs_both_halves() -> None:
    # Read from the environment as paths, and handed to the server's endpoint together.
    both = Settings.from_env({"JOBWIRE_TLS_CERT": "/etc/jobwire/c.pem", "JOBWIRE_TLS_KEY": "/etc/jobwire/k.pem"})
    tls = endpoint(both)
    assert (tls.tls_cert, tls.tls_key, tls.tls_client_ca) == (
        Path("/etc/jobwire/c.pem"),
        Path("/etc/jobwire/k.pem"),
        None,
    )
    plain = endpoint(Settings.from_env({"JOBWIRE_TLS_CERT": "", "JOBWIRE_TLS_KEY": ""}))  # empty: not set
    assert (plain.tls_cert, plain.tls_key) == (None, None)
    for half in ({"tls_cert": Path("c.pem")}, {"tls_key": Path("k.pem")}):
        with pytest.raises(ValueError, match="JOBWIRE_TLS_CERT and JOBWIRE_TLS_KEY go together"):
            Settings(**half)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "migrate"), [("", True), ("1", True), ("true", True), ("YES", True), ("0", False), ("false", False)]
)
def test_migrating_at_start_is_the_default_and_can_be_left_to_the_migrate_step(value: str, migrate: bool) -> None:
    assert Settings.from_env({"JOBWIRE_MIGRATE": value}).migrate is migrate


def test_servers_close_connections_after_their_age_with_a_grace() -> None:
    """5 minutes, then 10 for the calls in flight, unless told otherwise; 0 keeps connections."""
    assert connection_age_options(endpoint(Settings.from_env({}))) == [
        ("grpc.max_connection_age_ms", 300_000),
        ("grpc.max_connection_age_grace_ms", 600_000),
    ]
    env = {"JOBWIRE_MAX_CONNECTION_AGE_SECONDS": "0.5", "JOBWIRE_MAX_CONNECTION_AGE_GRACE_SECONDS": "0.25"}
    assert connection_age_options(endpoint(Settings.from_env(env))) == [
        ("grpc.max_connection_age_ms", 500),
        ("grpc.max_connection_age_grace_ms", 250),
    ]
    assert connection_age_options(endpoint(Settings.from_env({"JOBWIRE_MAX_CONNECTION_AGE_SECONDS": "0"}))) == []


def test_every_server_setting_is_in_the_deployment_table() -> None:
    """An operator's first hour: JOBWIRE_DB_POOL_SIZE and the retention days were read by the
    code and in no table. Every variable Settings.from_env reads has its row in docs/deployment.md."""
    root = Path(__file__).resolve().parents[2]
    read = set(re.findall(r'"(JOBWIRE_[A-Z0-9_]+)"', (root / "shared/jobwire/runtime/settings.py").read_text()))
    # a row's first cell names one variable or several (`JOBWIRE_TLS_CERT`, `JOBWIRE_TLS_KEY`, ...)
    first_cells = [line.split("|")[1] for line in (root / "docs/deployment.md").read_text().splitlines()
                   if line.startswith("| `JOBWIRE_")]  # fmt: skip
    rows = set(re.findall(r"`(JOBWIRE_[A-Z0-9_]+)`", " ".join(first_cells)))
    assert read - rows == set()
