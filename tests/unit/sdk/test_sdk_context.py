"""JobContext: honest progress checked locally, checkpoints, payload, thread safety."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from jobwire.domain.errors import InvalidArgument, ProgressRegression, TotalChanged
from jobwire.domain.stages import DEFAULT_PLAN
from jobwire.worker.sdk import InputInvalid, JobCancelled, JobContext, LeaseLost, ShuttingDown, UndeclaredStage
from jobwire.worker.sdk._attempt import AttemptState, JobInfo, Snapshot, StopReason


class Recorder:
    def __init__(self) -> None:
        self.snapshots: list[Snapshot] = []

    def publish(self, snapshot: Snapshot) -> None:
        self.snapshots.append(snapshot)


def make(payload: bytes = b"") -> tuple[JobContext, AttemptState, Recorder]:
    sink = Recorder()
    info = JobInfo(
        job_no="PT-20260101-001",
        job_type="t",
        tenant="default",
        payload=payload,
        attempt=1,
        last_checkpoint=None,
        stages=DEFAULT_PLAN,
        tmp_dir=Path("/nonexistent"),
    )
    state = AttemptState(info, sink)
    return JobContext(state), state, sink


def test_progress_never_goes_back_and_totals_stay() -> None:
    ctx, _, sink = make()
    ctx.progress(5, total=10)
    with pytest.raises(ProgressRegression):
        ctx.progress(4)
    with pytest.raises(TotalChanged):
        ctx.progress(6, total=11)
    with pytest.raises(InvalidArgument):
        ctx.progress(11)
    with pytest.raises(InvalidArgument):
        ctx.progress(-1)
    ctx.progress(6)  # omitting the total keeps it
    assert (sink.snapshots[-1].processed, sink.snapshots[-1].total) == (6, 10)


def test_stages_move_forward_only_and_reset_progress() -> None:
    ctx, _, sink = make()
    ctx.progress(3, total=3)
    ctx.stage("VERIFYING")
    assert ctx.current_stage == "VERIFYING"
    assert (sink.snapshots[-1].stage, sink.snapshots[-1].processed, sink.snapshots[-1].total) == ("VERIFYING", 0, None)
    ctx.stage("VERIFYING")  # the same stage again is a no-op
    assert len(sink.snapshots) == 2
    with pytest.raises(ProgressRegression):
        ctx.stage("PROCESSING")
    with pytest.raises(UndeclaredStage, match="has no stage 'NO_SUCH_STAGE'"):
        ctx.stage("NO_SUCH_STAGE")


def test_an_unchanged_report_is_not_published() -> None:
    ctx, _, sink = make()
    ctx.progress(1, total=5)
    ctx.progress(1, total=5)
    ctx.progress(1)
    assert len(sink.snapshots) == 1


def test_checkpoints_are_bounded_and_counted() -> None:
    ctx, state, sink = make()
    ctx.checkpoint(b"a")
    ctx.checkpoint(bytearray(b"b"))
    assert [s.checkpoint_seq for s in sink.snapshots] == [1, 2]
    assert state.checkpoint == b"b"
    with pytest.raises(InvalidArgument):
        ctx.checkpoint(b"x" * (64 * 1024 + 1))


def test_check_raises_the_strongest_reason_and_keeps_raising() -> None:
    ctx, state, _ = make()
    ctx.check()
    state.request_stop(StopReason.SHUTDOWN)
    with pytest.raises(ShuttingDown):
        ctx.check()
    state.request_stop(StopReason.CANCEL)
    with pytest.raises(JobCancelled):
        ctx.check()
    state.request_stop(StopReason.SHUTDOWN)  # weaker: ignored
    with pytest.raises(JobCancelled):
        ctx.check()
    state.request_stop(StopReason.LOST)
    with pytest.raises(LeaseLost):
        ctx.check()
    assert state.delivered is StopReason.LOST


class _AnnouncedWait(threading.Event):
    """The state's wake-up event, telling the test once a sleep waits on it."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting = threading.Event()

    def wait(self, timeout: float | None = None) -> bool:
        self.waiting.set()
        return super().wait(timeout)


def test_sleep_wakes_early_on_a_stop() -> None:
    ctx, state, _ = make()
    state._wake = wake = _AnnouncedWait()
    ended: list[BaseException] = []

    def sleeper() -> None:
        try:
            ctx.sleep(600)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            ended.append(exc)

    thread = threading.Thread(target=sleeper, daemon=True)
    thread.start()
    assert wake.waiting.wait(10), "ctx.sleep never began to wait"
    state.request_stop(StopReason.CANCEL)  # while it sleeps, not before
    thread.join(30)
    assert not thread.is_alive(), "a stop did not wake ctx.sleep(600)"
    assert [type(e) for e in ended] == [JobCancelled]


def test_payload_json() -> None:
    assert make(b"")[0].json() == {}
    assert make(b'{"a": 1}')[0].json() == {"a": 1}
    with pytest.raises(InputInvalid):
        make(b"{not json")[0].json()
    with pytest.raises(InputInvalid):
        make(b"\xff\xfe")[0].json()


def test_many_threads_publish_in_order() -> None:
    ctx, _, sink = make()
    barrier = threading.Barrier(8)

    def work() -> None:
        barrier.wait()
        for _ in range(200):
            ctx.checkpoint(b"c")

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seqs = [s.checkpoint_seq for s in sink.snapshots]
    assert seqs == list(range(1, 1601))
