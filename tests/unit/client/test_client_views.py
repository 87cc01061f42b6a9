"""The values the clients return: enums that print names, views over the messages, payloads.

No network: views are built over messages made here. tests/service/test_client_values.py
shows the same values coming back from a real server.
"""

from __future__ import annotations

import copy
import pickle
from datetime import UTC, datetime

import pytest
from google.protobuf.descriptor import EnumDescriptor, FieldDescriptor
from google.protobuf.timestamp_pb2 import Timestamp

from jobwire.client import convert, enums, views
from jobwire.client.enums import DisplayAction, ErrorCategory, FindingKind, JobStatus, WireEnum
from jobwire.client.job_calls import parse_result_json
from jobwire.client.watch import BatchEnd
from jobwire.v1 import admin_pb2, job_pb2, schedule_pb2

pytestmark = pytest.mark.timeout(10)

# Each wrapper and the proto enum it stands for.
WRAPS: dict[type[WireEnum], EnumDescriptor] = {
    enums.JobStatus: job_pb2.Job.Status.DESCRIPTOR,
    enums.ErrorCategory: job_pb2.JobError.Category.DESCRIPTOR,
    enums.DisplayAction: job_pb2.Display.Action.DESCRIPTOR,
    enums.FindingKind: admin_pb2.Finding.Kind.DESCRIPTOR,
    enums.Overlap: schedule_pb2.Schedule.Overlap.DESCRIPTOR,
    enums.CatchUp: schedule_pb2.Schedule.CatchUp.DESCRIPTOR,
}
VIEWS = [
    views.Job,
    views.JobError,
    views.Display,
    views.JobPage,
    views.Batch,
    views.SubmittedBatch,
    views.Schedule,
    views.JobEvent,
    views.EventPage,
    views.Finding,
    views.WorkerInfo,
]
NOW = datetime(2026, 10, 8, 9, 30, 15, 250000, tzinfo=UTC)


def stamp(moment: datetime = NOW) -> Timestamp:
    ts = Timestamp()
    ts.FromDatetime(moment)
    return ts


# ---- the enums ----------------------------------------------------------------------------


@pytest.mark.parametrize("wrapper", list(WRAPS), ids=lambda w: w.__name__)
def test_each_enum_matches_its_proto_enum_exactly(wrapper: type[WireEnum]) -> None:
    descriptor = WRAPS[wrapper]
    assert [(m.name, m.value) for m in wrapper] == [(v.name, v.number) for v in descriptor.values]


def test_every_enum_module_member_is_checked_against_a_proto_enum() -> None:
    written = {v for v in vars(enums).values() if isinstance(v, type) and issubclass(v, WireEnum) and v is not WireEnum}
    assert written == set(WRAPS)


def test_an_enum_prints_its_name_and_equals_the_wire_number() -> None:
    ready = JobStatus(job_pb2.Job.READY)
    assert (str(ready), f"{ready}", f"[{ready:>7}]") == ("READY", "READY", "[  READY]")
    assert repr(ready) == "<JobStatus.READY: 4>"
    assert ready == job_pb2.Job.READY and ready == 4 and int(ready) == 4 and ready.value == 4
    assert job_pb2.Job.Status.Name(ready) == "READY"  # goes wherever the number went
    assert JobStatus["FAILED"] is JobStatus.FAILED


def test_a_number_a_newer_server_added_reads_as_unknown_not_an_error() -> None:
    newer = ErrorCategory(42)
    assert str(newer) == "UNKNOWN_42" and newer == 42 and isinstance(newer, ErrorCategory)
    with pytest.raises(ValueError):
        JobStatus("READY")  # a name is looked up with JobStatus["READY"], not called


# ---- the views match their messages -------------------------------------------------------


def _declared(view: type[views.View[object]], field: FieldDescriptor) -> views.Field[object]:
    declared = vars(view).get(field.name)
    assert isinstance(declared, views.Field), f"{view.__name__}.{field.name} is not declared"
    return declared


@pytest.mark.parametrize("view", VIEWS, ids=lambda v: v.__name__)
def test_each_view_declares_every_field_and_converts_enums_and_times(view: type[views.View[object]]) -> None:
    """A field added to the proto fails here until its view reads it, in Python's terms."""
    for field in view.wire_type.DESCRIPTOR.fields:
        declared = _declared(view, field)
        if field.enum_type is not None:
            assert declared.kind in WRAPS and WRAPS[declared.kind].full_name == field.enum_type.full_name, field.name
        elif field.message_type is not None and field.message_type.full_name == "google.protobuf.Timestamp":
            assert declared.kind is datetime, f"{view.__name__}.{field.name} must read as a datetime"
        elif field.has_presence and field.message_type is None and _optional(field):
            assert declared.kind is int, f"{view.__name__}.{field.name} is optional: int | None"


def _optional(field: FieldDescriptor) -> bool:
    """A proto3 `optional` field (its own synthetic oneof), not a member of a real oneof."""
    return field.containing_oneof is not None and field.containing_oneof.name == f"_{field.name}"


def test_a_job_reads_in_python_terms() -> None:
    raw = job_pb2.Job(
        job_no="PT-20261008-001",
        status=job_pb2.Job.FAILED,
        stage="PROCESSING",
        version=6,
        created_at=stamp(),
        error=job_pb2.JobError(category=job_pb2.JobError.PROCESSING_ERROR, message="boom", retryable=True),
        display=job_pb2.Display(detail="Failed", actions=[job_pb2.Display.VIEW, job_pb2.Display.RETRY]),
    )
    job = views.Job(raw)
    assert str(job.status) == "FAILED" and job.status == job_pb2.Job.FAILED and job.status is JobStatus.FAILED
    assert job.error is not None and f"{job.error.category}" == "PROCESSING_ERROR" and job.error.message == "boom"
    assert job.display.actions == (DisplayAction.VIEW, DisplayAction.RETRY) and job.display.detail == "Failed"
    assert job.created_at == NOW and job.created_at.tzinfo is UTC
    assert (job.started_at, job.finished_at, job.run_after, job.result, job.queue_position) == (None,) * 5
    assert job.raw is raw and job.job_no == "PT-20261008-001" and job.progress.percent == 0
    assert not job.HasField("queue_position") and job.WhichOneof is not None  # the message's own methods
    assert repr(job) == "Job(job_no='PT-20261008-001', status=FAILED, stage='PROCESSING', version=6)"


def test_a_job_without_error_or_result_and_a_queued_one_at_the_head() -> None:
    queued = views.Job(job_pb2.Job(status=job_pb2.Job.QUEUED, queue_position=0))
    assert queued.queue_position == 0 and queued.error is None and queued.result is None
    ready = views.Job(job_pb2.Job(status=job_pb2.Job.READY, result=job_pb2.Artifact(sha256="c" * 64)))
    assert ready.result is not None and ready.result.sha256 == "c" * 64 and ready.queue_position is None


def test_views_compare_by_message_are_read_only_and_survive_copy_and_pickle() -> None:
    one, same = views.Job(job_pb2.Job(job_no="A", version=1)), views.Job(job_pb2.Job(job_no="A", version=1))
    assert one == same and one != views.Job(job_pb2.Job(job_no="A", version=2))
    assert one != job_pb2.Job(job_no="A", version=1)  # a view is not its message: compare .raw
    with pytest.raises(TypeError):
        hash(one)  # as unhashable as the message
    with pytest.raises(AttributeError):
        one.priority = 3  # type: ignore[misc]
    assert copy.copy(one) == one and pickle.loads(pickle.dumps(one)) == one
    assert "job_no" in dir(one) and "HasField" in dir(one)


def test_admin_and_schedule_views() -> None:
    stalled = admin_pb2.Finding(kind=admin_pb2.Finding.STALLED, status=job_pb2.Job.RUNNING, total_units=0)
    finding = views.Finding(stalled)
    assert (str(finding.kind), str(finding.status), finding.total_units) == ("STALLED", "RUNNING", 0)
    assert finding.kind == FindingKind.STALLED and finding.worker_claimed_at is None
    event = views.JobEvent(admin_pb2.JobEvent(to_status=job_pb2.Job.QUEUED, created_at=stamp()))
    assert (f"{event.from_status}", f"{event.to_status}", event.created_at, event.total_units) == (
        "STATUS_UNSPECIFIED", "QUEUED", NOW, None,
    )  # fmt: skip
    worker = views.WorkerInfo(admin_pb2.WorkerInfo(worker_id="w-7", last_seen_at=stamp()))
    assert worker.last_seen_at == NOW
    schedule = views.Schedule(schedule_pb2.Schedule(overlap=schedule_pb2.Schedule.SKIP, last_fire_time=stamp()))
    assert (str(schedule.overlap), str(schedule.catch_up)) == ("SKIP", "CATCH_UP_UNSPECIFIED")
    assert schedule.next_fire_time is None and schedule.last_fire_time == NOW
    assert isinstance(schedule.template, job_pb2.SubmitRequest)
    made = views.SubmittedBatch(job_pb2.SubmitBatchResponse(batch_id="b", jobs=[job_pb2.Job(job_no="A")]))
    assert [job.job_no for job in made.jobs] == ["A"] and isinstance(made.jobs[0], views.Job)


# ---- payloads -----------------------------------------------------------------------------


def test_payloads_bytes_as_given_mappings_as_sorted_compact_json() -> None:
    assert convert.encode_payload(None) == b""
    assert convert.encode_payload(b"\x00raw") == b"\x00raw"
    assert convert.encode_payload(bytearray(b"ba")) == b"ba" and convert.encode_payload(memoryview(b"mv")) == b"mv"
    assert convert.encode_payload({"z": 1, "a": "é"}) == '{"a":"é","z":1}'.encode()
    assert convert.encode_payload({"rows": [1, {"b": 1, "a": 2}]}) == b'{"rows":[1,{"a":2,"b":1}]}'


@pytest.mark.parametrize("payload", [[1, {"a": 2}], (1, 2), []], ids=["list", "tuple", "empty list"])
def test_a_list_or_tuple_payload_is_a_type_error_that_says_to_send_a_dict_or_bytes(payload: object) -> None:
    with pytest.raises(TypeError) as refused:
        convert.encode_payload(payload)  # type: ignore[arg-type]
    said = str(refused.value)
    assert said.startswith("payload must be bytes, a JSON-serialisable mapping (a dict), or None, not ")
    assert (
        f"not {type(payload).__name__}; pass a dict, or send this JSON as bytes: payload=json.dumps(value).encode()"
        in said
    )


@pytest.mark.parametrize(
    ("payload", "says"),
    [
        ("a string", "not str; to send text, encode it: payload=text.encode()"),
        (42, "not int"),
        ({1, 2}, "not set"),
        (object(), "not object"),
        ({"when": NOW}, "not JSON-serialisable (Object of type datetime"),
        ({"tags": {"a"}}, "not JSON-serialisable (Object of type set"),
        ({"x": float("nan")}, "not JSON-serialisable"),
    ],
    ids=["str", "int", "set", "object", "datetime inside", "set inside", "nan"],
)
def test_any_other_payload_is_a_type_error_naming_payload(payload: object, says: str) -> None:
    with pytest.raises(TypeError) as refused:
        convert.encode_payload(payload)  # type: ignore[arg-type]
    assert str(refused.value).startswith("payload ") and says in str(refused.value)
    assert "pass bytes" in str(refused.value) or "encode it" in str(refused.value)  # what to do instead
    assert "or list" not in str(refused.value)  # a list is not among the types it takes


# ---- result_json and the batch watch's end ------------------------------------------------


def test_result_json_parses_or_names_the_job_and_content_type() -> None:
    assert parse_result_json("PT-1", "application/json", b'{"rows": [1, 2]}') == {"rows": [1, 2]}
    with pytest.raises(ValueError, match=r"the result of PT-1 is not JSON \(image/png, 4 bytes"):
        parse_result_json("PT-1", "image/png", b"\x89PNG")
    with pytest.raises(ValueError, match=r"PT-2 is not JSON \(no content type"):
        parse_result_json("PT-2", "", b"")


def test_a_batch_watch_is_over_when_each_job_has_ended_and_a_retried_one_counts_again() -> None:
    def job(job_no: str, status: int) -> views.Job:
        return views.Job(job_pb2.Job(job_no=job_no, status=status))  # type: ignore[arg-type]

    end = BatchEnd(total=2)
    assert not end.over_after(job("A", job_pb2.Job.FAILED))
    assert not end.over_after(job("A", job_pb2.Job.QUEUED))  # retried: running again
    assert not end.over_after(job("B", job_pb2.Job.READY))
    assert not end.over_after(job("B", job_pb2.Job.READY))  # a repeat counts once
    assert end.over_after(job("A", job_pb2.Job.CANCELLED))
