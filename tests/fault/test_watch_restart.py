"""A server restarted mid-watch: JobClient.watch() reconnects and still sees the end."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from watch_processes import ServerProcess, Stubs, start_server

from jobwire.client import Backoff, JobClient, RetrySettings
from jobwire.v1 import job_pb2

WAIT_S = 20.0


class Watcher(threading.Thread):
    """Runs JobClient.watch() in the background and records every job it yields."""

    def __init__(self, client: JobClient, job_no: str) -> None:
        super().__init__(daemon=True)
        self.client, self.job_no = client, job_no
        self.seen: list[job_pb2.Job] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for job in self.client.watch(self.job_no):
                self.seen.append(job)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    def wait_for(self, done, what: str) -> None:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            if any(done(j) for j in self.seen):
                return
            assert self.error is None, self.error
            time.sleep(0.02)
        raise AssertionError(f"the watcher never saw {what}: {[(j.status, j.stage, j.version) for j in self.seen]}")


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_watch_survives_a_server_restart(tmp_path: Path, how: str) -> None:
    url = f"sqlite:///{tmp_path / 'jobwire.db'}"
    server = start_server(url)
    stubs = Stubs.to(server.target)
    retry = RetrySettings(watch_backoff=Backoff(initial=0.1, maximum=0.5))
    client = JobClient.connect(server.target, retry=retry)
    second: ServerProcess | None = None
    try:
        job = stubs.submit()
        watcher = Watcher(client, job.job_no)
        watcher.start()
        watcher.wait_for(lambda j: j.status == job_pb2.Job.QUEUED, "QUEUED")
        lease = stubs.claim()
        stubs.report(lease, "PREPARING", 5)
        watcher.wait_for(lambda j: j.progress.processed_units == 5, "the first report")

        if how == "sigterm":
            assert server.terminate() == 0
        else:
            server.kill()
        second = start_server(url, listen=server.target)  # same address: the client's target
        stubs.close()
        stubs = Stubs.to(second.target)
        stubs.report(lease, "PROCESSING", 40)  # the lease outlives the restart
        stubs.report(lease, "PROCESSING", 80)
        stubs.report(lease, "VERIFYING", 1)
        final = stubs.complete(lease)

        watcher.join(WAIT_S)
        assert not watcher.is_alive() and watcher.error is None, watcher.error
        seen = watcher.seen
        versions = [j.version for j in seen]
        assert versions == sorted(set(versions)), f"a duplicate or a step back: {versions}"
        assert seen[-1].status == job_pb2.Job.READY and seen[-1].version == final.version
        stages = [j.stage for j in seen if j.status == job_pb2.Job.RUNNING]
        assert [s for i, s in enumerate(stages) if i == 0 or stages[i - 1] != s] == [
            "PREPARING",
            "PROCESSING",
            "VERIFYING",
        ]
    finally:
        client.close()
        stubs.close()
        for proc in (server, second):
            if proc is not None and proc.proc.poll() is None:
                proc.kill()
