"""`python -m jobwire.gateway` as a person starts it: its settings from the environment, and
its GET /metrics on a port of its own, as Prometheus scrapes it."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from processes import start_server_process
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.timeout(90)


def test_the_entry_serves_pages_for_the_target_it_is_given_and_stops_on_sigterm(tmp_path: Path) -> None:
    env = {"JOBWIRE_DATABASE_URL": f"sqlite:///{tmp_path / 'j.db'}", "JOBWIRE_LISTEN": "127.0.0.1:0"}
    server = start_server_process(["jobwire", "serve"], env)
    gateway_env = {**os.environ, "JOBWIRE_GATEWAY_LISTEN": "127.0.0.1:0", "JOBWIRE_TARGET": server.target}
    gateway = subprocess.Popen(
        [sys.executable, "-m", "jobwire.gateway"],
        env=gateway_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert gateway.stdout is not None and gateway.stderr is not None
        for line in gateway.stdout:  # it names the port it bound
            if found := re.search(r"^jobwire gateway serving on (http://127\.0\.0\.1:\d+)$", line):
                url = found.group(1)
                break
        else:
            pytest.fail(f"the gateway exited with {gateway.wait()}")
        with urllib.request.urlopen(f"{url}/signin", timeout=10) as reply:
            assert reply.status == 200 and b'name="token"' in reply.read()
        # This server has no auth file, so any token is accepted; the jobs page then asks it.
        request = urllib.request.Request(f"{url}/jobs", headers={"Cookie": "jobwire_token=any"})
        with urllib.request.urlopen(request, timeout=10) as reply:
            assert reply.status == 200 and b"No jobs to show." in reply.read()
        gateway.send_signal(signal.SIGTERM)
        # uvicorn drains, then ends by the signal it caught, as a supervisor expects
        assert gateway.wait(timeout=30) in (0, -signal.SIGTERM)
        assert "Finished server process" in gateway.stderr.read()
    finally:
        if gateway.poll() is None:
            gateway.kill()
        gateway.wait(10)
        server.kill()


def test_a_bad_listen_address_is_said_in_words() -> None:
    env = {**os.environ, "JOBWIRE_GATEWAY_LISTEN": "8080"}
    done = subprocess.run(
        [sys.executable, "-m", "jobwire.gateway"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert "JOBWIRE_GATEWAY_LISTEN must be host:port" in done.stderr and "Traceback" not in done.stderr


def test_a_port_another_program_holds_is_refused_in_words_never_shared() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        listen = f"127.0.0.1:{taken.getsockname()[1]}"
        env = {**os.environ, "JOBWIRE_GATEWAY_LISTEN": listen}
        done = subprocess.run(
            [sys.executable, "-m", "jobwire.gateway"], env=env, capture_output=True, text=True, timeout=60
        )
    assert done.returncode == 3  # jobwire.gateway.__main__.PORT_TAKEN, which `make run` looks for
    assert f"cannot listen on {listen}: another program is listening there" in done.stderr
    assert "Traceback" not in done.stderr and "serving on" not in done.stdout


def _announced(gateway: subprocess.Popen[str], *patterns: str) -> list[str]:
    """What each of `patterns` (a regex with one group, each a line of its own) found in the gateway's output."""
    assert gateway.stdout is not None
    found: dict[str, str] = {}
    for line in gateway.stdout:
        found |= {p: m.group(1) for p in patterns if (m := re.search(p, line))}
        if len(found) == len(patterns):
            return [found[p] for p in patterns]
    pytest.fail(f"the gateway exited with {gateway.wait()}")


def test_metrics_on_their_own_port_count_the_requests_by_route_and_code() -> None:
    env = {**os.environ, "JOBWIRE_GATEWAY_LISTEN": "127.0.0.1:0", "JOBWIRE_GATEWAY_METRICS_LISTEN": "127.0.0.1:0",
           "JOBWIRE_TARGET": "127.0.0.1:9"}  # fmt: skip  # no job service: these pages never ask it
    gateway = subprocess.Popen([sys.executable, "-m", "jobwire.gateway"], env=env, stdout=subprocess.PIPE, text=True)
    try:
        port, url = _announced(gateway, r"^jobwire gateway metrics at GET /metrics on port (\d+)$",
                               r"^jobwire gateway serving on (http://127\.0\.0\.1:\d+)$")  # fmt: skip
        for _ in range(2):
            with urllib.request.urlopen(f"{url}/signin", timeout=10) as reply:
                assert reply.status == 200
        for path in ("/jobs/PT-20260101-001", "/no-such-page"):  # not signed in: sent to sign in; a 404
            try:
                urllib.request.urlopen(f"{url}{path}", timeout=10).close()
            except urllib.error.HTTPError as refused:
                assert refused.code == 404 and path == "/no-such-page"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
            families = {f.name: f for f in text_string_to_metric_families(reply.read().decode())}
        counted = {
            (s.labels["route"], s.labels["method"], s.labels["code"]): s.value
            for s in families["jobwire_gateway_requests"].samples
        }
        assert counted[("/signin", "GET", "200")] == 3  # the redirect from /jobs/… asked it once more
        assert counted[("/jobs/{job_no}", "GET", "303")] == 1 and counted[("unmatched", "GET", "404")] == 1
        assert not [route for route, _, _ in counted if "PT-" in route]  # the pattern, never the path
        (latency,) = [s for s in families["jobwire_gateway_request_seconds"].samples if s.name.endswith("_count")
                      and s.labels["route"] == "/signin"]  # fmt: skip
        assert latency.value == 3
    finally:
        gateway.terminate()
        gateway.wait(30)
