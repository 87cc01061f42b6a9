"""A worker that claims, reports, pauses, then tries to finish anyway: a zombie in the making.

    python zombie_worker.py TARGET JOB_TYPE LEASE_SECONDS

It heartbeats every third of its lease from a thread, as a real worker does. After its
first report it waits for a line on stdin: the test freezes the whole process (SIGSTOP)
there, past the lease, thaws it (SIGCONT) after another worker took the job over, and
then writes the line that lets it try to finish. Each step is one JSON line on stdout.
Raw gRPC stubs only: this is what any worker on the network could send.
"""

from __future__ import annotations

import json
import sys
import threading
from typing import Any

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from jobwire.v1 import job_pb2, worker_pb2, worker_pb2_grpc

SHA = "cd" * 32


def say(step: str, **fields: Any) -> None:
    print(json.dumps({"step": step, **fields}), flush=True)


def outcome(call: Any) -> dict[str, str]:
    """{"code", "reason"} of a call: the status code and its google.rpc.ErrorInfo reason."""
    try:
        call()
        return {"code": "OK", "reason": ""}
    except grpc.RpcError as exc:
        reason = ""
        status = rpc_status.from_call(exc)  # type: ignore[arg-type]
        for detail in status.details if status else ():
            info = error_details_pb2.ErrorInfo()
            if detail.Unpack(info):
                reason = info.reason
        return {"code": exc.code().name, "reason": reason}  # type: ignore[attr-defined]


def heartbeats(stub: Any, lease: Any, every: float, stop: threading.Event) -> None:
    ref = worker_pb2.LeaseRef(job_no=lease.job_no, worker_token=lease.worker_token)
    while not stop.wait(every):
        try:
            reply = stub.Heartbeat(worker_pb2.HeartbeatRequest(worker_id="zombie", leases=[ref]), timeout=5)
            say("heartbeat", state=worker_pb2.LeaseState.State.Name(reply.leases[0].state))
        except grpc.RpcError as exc:
            say("heartbeat", state=exc.code().name)  # type: ignore[attr-defined]


def main(target: str, job_type: str, lease_s: float) -> None:
    with grpc.insecure_channel(target) as channel:
        stub = worker_pb2_grpc.WorkerServiceStub(channel)
        request = worker_pb2.ClaimRequest(
            worker_id="zombie", job_types=[worker_pb2.JobTypeSpec(name=job_type)], max_jobs=1
        )
        request.wait.FromNanoseconds(5 * 10**9)
        request.lease_duration.FromNanoseconds(int(lease_s * 1e9))
        [lease] = stub.Claim(request, timeout=10).leases
        say("claimed", job_no=lease.job_no, token=lease.worker_token, attempt=lease.attempt)
        stop = threading.Event()
        threading.Thread(target=heartbeats, args=(stub, lease, lease_s / 3, stop), daemon=True).start()

        def report(units: int) -> None:
            stub.ReportStage(worker_pb2.ReportStageRequest(
                job_no=lease.job_no, worker_token=lease.worker_token, stage="PROCESSING",
                processed_units=units, total_units=10, checkpoint=f"zombie-{units}".encode(),
            ), timeout=5)  # fmt: skip

        report(2)
        say("reported")
        sys.stdin.readline()  # frozen here by the test, past the lease; it says when to go on
        stop.set()
        say("report", **outcome(lambda: report(9)))
        artifact = job_pb2.Artifact(uri="file:///results/zombie.bin", size_bytes=1, sha256=SHA)
        complete = worker_pb2.CompleteRequest(job_no=lease.job_no, worker_token=lease.worker_token, result=artifact)
        say("complete", **outcome(lambda: stub.Complete(complete, timeout=5)))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]))
