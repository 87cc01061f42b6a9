"""A valid request of each RPC, for the fuzzer to change one field of (strategies.mutated).

Each names live things the fuzzer's server holds (`Targets`), so that a changed field is
the one thing a servicer can refuse: an extreme Duration in a schedule's `every` reaches
the check of `every` only in a request whose schedule_id and template are good. An RPC
without a seed here starts from the empty request.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jobwire.v1 import job_pb2


@dataclass(frozen=True)
class Targets:
    queued: str  # a QUEUED job
    failed: str  # a FAILED job (terminal: WaitOperation answers at once)
    doomed: str  # another FAILED job, for the calls that delete one
    batch_id: str
    schedule_id: str  # a schedule that exists
    job_no: str = ""  # a RUNNING job and its lease, fresh for each WorkerService RPC
    worker_token: str = ""


def seed(name: str, at: Targets) -> dict[str, Any]:
    """The valid request of `name` ("Service.Method") as message_dict values; {} when it has none."""
    lease = {"job_no": at.job_no, "worker_token": at.worker_token}
    template = {"job_type": "fuzz", "payload": b"{}", "title": "Fuzz report, November"}
    return {
        "JobService.Submit": template,
        "JobService.Get": {"job_no": at.queued},
        "JobService.Cancel": {"job_no": at.queued},
        "JobService.WatchStatus": {"job_no": at.queued},
        "JobService.Retry": {"job_no": at.failed},
        "JobService.SubmitBatch": {"jobs": [template]},
        "JobService.GetBatch": {"batch_id": at.batch_id},
        "JobService.CancelBatch": {"batch_id": at.batch_id},
        "JobService.Resolve": {"job_no": at.queued, "decision": job_pb2.Review.APPROVE},
        "JobService.GetResult": {"job_no": at.failed},
        "JobService.GetPayload": {"job_no": at.queued, "max_bytes": 16},
        "JobService.WatchJobs": {"job_nos": [at.queued]},
        "ScheduleService.CreateSchedule": {"schedule_id": "fuzz", "cron": "0 2 * * *", "template": template},
        "ScheduleService.GetSchedule": {"schedule_id": at.schedule_id},
        "ScheduleService.PauseSchedule": {"schedule_id": at.schedule_id},
        "ScheduleService.ResumeSchedule": {"schedule_id": at.schedule_id},
        "ScheduleService.DeleteSchedule": {"schedule_id": at.schedule_id},
        "ScheduleService.ListScheduleJobs": {"schedule_id": at.schedule_id, "page_size": 2},
        "WorkerService.Claim": {"worker_id": "fuzz", "job_types": [{"name": "fuzz-none"}]},
        "WorkerService.Heartbeat": {"worker_id": "fuzz", "leases": [lease]},
        "WorkerService.ReportStage": lease,
        "WorkerService.BatchReportStage": {"reports": [lease]},
        "WorkerService.Complete": {**lease, "inline_result": b"{}"},
        "WorkerService.Fail": {**lease, "message": "fuzz"},
        "WorkerService.ConfirmCancel": lease,
        "WorkerService.Release": lease,
        "WorkerService.AwaitReview": {**lease, "assignee": "fuzz"},
        "WorkerService.UploadResult": {**lease, "data": b"x"},
        "WorkerService.RecordEvidence": {**lease, "entries": [{"key": "payment_request_id", "value": "pi_3Nx"}]},
        "AdminService.ListEvents": {"job_no": at.queued},
        "AdminService.GetCheckpoint": {"job_no": at.queued},
        "AdminService.Requeue": {"job_no": at.failed, "reason": "fuzz"},
        "AdminService.SetQueueLimits": {"queue": "fuzz", "limits": {"max_running": 1}},
        "AdminService.GetQueueLimits": {"queue": "fuzz"},
        "AdminService.PauseQueue": {"queue": "fuzz"},
        "AdminService.ResumeQueue": {"queue": "fuzz"},
        "AdminService.ListQueues": {"queue": "fuzz", "minutes": 5},
        "Operations.GetOperation": {"name": f"operations/{at.queued}"},
        "Operations.CancelOperation": {"name": f"operations/{at.queued}"},
        "Operations.WaitOperation": {"name": f"operations/{at.failed}"},
        "Operations.DeleteOperation": {"name": f"operations/{at.doomed}"},
        "Health.Check": {"service": "jobwire.v1.JobService"},
        "Health.Watch": {"service": "jobwire.v1.JobService"},
    }.get(name, {})
