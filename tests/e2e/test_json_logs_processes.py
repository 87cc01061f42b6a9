"""JOBWIRE_LOG_FORMAT=json in real processes: `python -m jobwire serve` and `jobwire-worker`
write only JSON lines, name the job they are about, say why an attempt failed, and never
write the payload or the worker's token."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import grpc
from processes import start_server_process

from jobwire.runtime import family
from jobwire.v1 import job_pb2, job_pb2_grpc

BIN = Path(sys.executable).parent
SECRET = "payload-5ecret-do-not-log"
TOKEN = "worker-token-do-not-log"
JSON = {"JOBWIRE_LOG_FORMAT": "json", "JOBWIRE_LOG_LEVEL": "DEBUG"}


def _lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_server_and_worker_write_json_lines_naming_the_job(tmp_path: Path) -> None:
    env = {"JOBWIRE_DATABASE_URL": f"sqlite:///{tmp_path / 'jobwire.db'}", "JOBWIRE_LISTEN": "127.0.0.1:0",
           "JOBWIRE_PROCESSES": "1", **JSON}  # fmt: skip
    server = start_server_process(["jobwire", "serve"], env)
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        worker = subprocess.Popen(
            [str(BIN / "jobwire-worker"), "--target", server.target, "--handlers", "jobwire.examples:handlers",
             "--tmp-dir", str(tmp_path / "tmp"), "--claim-wait", "1"],
            stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **JSON, "JOBWIRE_TOKEN": TOKEN},
        )  # fmt: skip
    try:
        with grpc.insecure_channel(server.target) as channel:
            jobs = job_pb2_grpc.JobServiceStub(channel)
            payload = json.dumps({"frames": "many", "note": SECRET}).encode()
            job_no = jobs.Submit(job_pb2.SubmitRequest(job_type="frames", payload=payload), timeout=10).job.job_no
            deadline = time.monotonic() + 30
            while jobs.Get(job_pb2.GetRequest(job_no=job_no), timeout=10).status != job_pb2.Job.FAILED:
                assert time.monotonic() < deadline, "the job never failed"
                time.sleep(0.05)
    finally:
        worker.terminate()
        worker.wait(30)
        server.terminate()

    served = _lines("".join(line for line in server.output if not line.startswith(family.READY)))
    calls = [x for x in served if x["logger"] == "jobwire.rpc.calls"]
    assert {x["job_no"] for x in calls if x["method"].endswith(("/Submit", "/Get", "/Fail"))} == {job_no}
    worked = _lines(log.read_text())
    (failed,) = [x for x in worked if x.get("error_category")]
    assert (failed["job_no"], failed["error_category"]) == (job_no, "INPUT_INVALID")
    assert "must be numbers" in failed["message"] and failed["worker_id"]
    everything = "".join(server.output) + log.read_text()
    assert SECRET not in everything and TOKEN not in everything
