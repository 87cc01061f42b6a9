"""`make run`'s launcher (python -m jobwire.devrun) as real processes: it owns its three children.

Security review, finding 13: SIGTERM to the launcher left the example worker running, and
the launcher did not notice when its server died.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from proc_support import alive, children

from jobwire.client import JobClient, JobStatus

pytestmark = pytest.mark.timeout(90)
READY = "Ctrl-C (or SIGTERM) stops every process"


@dataclass
class Launched:
    proc: subprocess.Popen[str]
    printed: str  # what it printed until it was ready
    children: list[int]  # the server, the example worker, the gateway

    @property
    def gateway_url(self) -> str:
        found = re.search(r"The pages \(.*\): open (http://127\.0\.0\.1:\d+)\n", self.printed)
        assert found, self.printed
        return found.group(1)


def _gone_within(pids: list[int], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not any(alive(p) for p in pids):
            return True
        time.sleep(0.05)
    return False


@contextmanager
def _launch(tmp_path: Path, gateway_listen: str = "127.0.0.1:0", *, started: str = "") -> Iterator[Launched]:
    """The launcher on port 0 and a fresh SQLite file, once it printed how to use it.

    `started`: "terminal", in a process group of its own, as a shell with job control
    starts `make run` in the foreground; "background", the same with SIGINT ignored, as a
    shell without job control starts `make run &`."""
    env = {**os.environ, "JOBWIRE_PROCESSES": "1"}
    env.pop("JOBWIRE_AUTH_FILE", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobwire.devrun", "--listen", "127.0.0.1:0",
         "--database-url", f"sqlite:///{tmp_path}/j.db", "--gateway-listen", gateway_listen],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
        start_new_session=bool(started),
        preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if started == "background" else None,
    )  # fmt: skip
    assert proc.stdout is not None
    printed = []
    for line in proc.stdout:
        printed.append(line)
        if READY in line:
            break
    else:
        pytest.fail(f"the launcher ended early with code {proc.wait()}:\n{''.join(printed)}")
    launched = Launched(proc, "".join(printed), children(proc.pid))
    try:
        yield launched
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in launched.children:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def launcher(tmp_path: Path) -> Iterator[Launched]:
    with _launch(tmp_path) as launched:
        assert len(launched.children) == 3, launched.printed
        yield launched


def test_sigterm_stops_the_server_the_example_worker_and_the_gateway(launcher: Launched) -> None:
    launcher.proc.send_signal(signal.SIGTERM)
    assert launcher.proc.wait(timeout=60) == 0
    assert _gone_within(launcher.children, 5), "a child outlived the launcher"


@pytest.mark.parametrize(
    ("started", "told"),
    [("terminal", signal.SIGINT), ("background", signal.SIGINT), ("terminal", signal.SIGHUP)],  # Ctrl-C; closed
)
def test_ctrl_c_or_a_closed_terminal_stops_every_process_in_order_and_the_running_job_is_released(
    tmp_path: Path, started: str, told: signal.Signals
) -> None:
    """SIGINT to the launcher's process group, as a terminal's Ctrl-C sends it (even to a
    launcher started with SIGINT ignored), or SIGHUP, as a closing terminal does: it exits 0
    and says it is stopping (not "the example worker exited"), and its worker, stopped
    before the server, hands its running job back (told at once with the server, it used
    to abandon it; on SIGHUP the launcher died and left its children running)."""
    with _launch(tmp_path, started=started) as launched:
        found = re.search(r"AdminService on (\S+)\n", launched.printed)
        assert found, launched.printed
        with JobClient.connect(found.group(1)) as client:
            job, _ = client.submit("report", {"seconds": 60})
            deadline = time.monotonic() + 30
            while client.get(job.job_no).status != JobStatus.RUNNING:
                assert time.monotonic() < deadline, "the example worker never started the job"
                time.sleep(0.05)
        os.killpg(launched.proc.pid, told)
        assert launched.proc.wait(timeout=60) == 0
        assert launched.proc.stdout is not None
        said = launched.proc.stdout.read()
        assert "stopping" in said and "exited" not in said, said
        # in order: the worker hands its job back while the server still takes calls
        assert said.index("released without a checkpoint") < said.index("stopping: finishing calls in flight"), said
        assert _gone_within(launched.children, 5), "a child outlived the launcher"
    with sqlite3.connect(tmp_path / "j.db") as db:
        (status,) = db.execute("SELECT status FROM job WHERE job_no = ?", (job.job_no,)).fetchone()
        kinds = [k for (k,) in db.execute("SELECT kind FROM job_event WHERE job_no = ? ORDER BY id", (job.job_no,))]
    assert status == "QUEUED" and kinds[-1] == "RELEASED", (status, kinds)


def test_a_dead_server_stops_the_launcher_its_worker_and_gateway(launcher: Launched) -> None:
    server, worker, gateway = launcher.children
    os.kill(server, signal.SIGKILL)
    assert launcher.proc.wait(timeout=60) == 1
    assert launcher.proc.stdout is not None
    assert "the server exited (code -9); stopping" in launcher.proc.stdout.read()
    assert _gone_within([worker, gateway], 5), "a child outlived the launcher"


def test_the_printed_gateway_address_and_sign_in_work(launcher: Launched) -> None:
    assert "sign in with any token, such as dev" in launcher.printed
    _signs_in_with_dev(launcher.gateway_url)


def test_a_taken_gateway_port_is_said_and_a_free_one_taken(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        listen = f"127.0.0.1:{taken.getsockname()[1]}"
        with _launch(tmp_path, listen) as launched:
            assert (
                f"{listen} is taken by another program: the web gateway takes a free port instead" in launched.printed
            )
            assert launched.gateway_url != f"http://{listen}"
            _signs_in_with_dev(launched.gateway_url)
            assert len(launched.children) == 3  # the refused first try is gone


def _signs_in_with_dev(url: str) -> None:
    """As the launcher says: any token, here `dev`, then the jobs page."""
    with httpx.Client(base_url=url, headers={"Origin": url}, timeout=10) as client:  # as a browser sends it
        client.get("/signin")  # the form, and its CSRF cookie
        signed_in = client.post("/signin", data={"token": "dev", "csrf": client.cookies["jobwire_csrf"]})
        assert signed_in.status_code == 303 and signed_in.headers["location"] == "/jobs"
        assert client.get("/jobs").status_code == 200
