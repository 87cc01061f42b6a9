"""One batched heartbeat per worker; CANCEL_REQUESTED, LOST and TIMED_OUT reach the jobs."""

from __future__ import annotations

import asyncio
import contextlib

from sdk_support import FakeWorkerService, unavailable

from jobwire.rpc.server import KEEPALIVE_SILENCE_S
from jobwire.v1 import worker_pb2
from jobwire.worker.sdk._attempt import StopReason
from jobwire.worker.sdk._lease_keeper import LeaseKeeper
from jobwire.worker.sdk._session import SESSION_BEAT_S


async def test_one_heartbeat_carries_every_lease(fake: FakeWorkerService) -> None:
    keeper = LeaseKeeper(fake, worker_id="w1", default_interval=10.0)
    stops: dict[str, list[StopReason]] = {}
    for no in ("A", "B", "C", "D"):
        keeper.add(no, f"t-{no}", interval=0.1, on_stop=stops.setdefault(no, []).append)
    fake.lease_states.update({
        "B": worker_pb2.LeaseState.CANCEL_REQUESTED, "C": worker_pb2.LeaseState.LOST,
        "D": worker_pb2.LeaseState.TIMED_OUT,
    })  # fmt: skip
    task = asyncio.create_task(keeper.run())
    try:
        beats = await fake.wait_for("Heartbeat", 2, timeout=2.0)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert beats[0].worker_id == "w1"
    assert sorted((ref.job_no, ref.worker_token) for ref in beats[0].leases) == [
        ("A", "t-A"),
        ("B", "t-B"),
        ("C", "t-C"),
        ("D", "t-D"),
    ]
    assert stops["A"] == []
    assert stops["B"][0] is StopReason.CANCEL
    assert stops["C"][0] is StopReason.LOST
    assert stops["D"][0] is StopReason.TIMED_OUT


async def test_the_interval_is_the_shortest_a_lease_asks_for(fake: FakeWorkerService) -> None:
    keeper = LeaseKeeper(fake, worker_id="w1", default_interval=10.0)
    assert keeper.interval() == 10.0
    keeper.add("A", "t-A", interval=5.0, on_stop=lambda r: None)
    keeper.add("B", "t-B", interval=2.0, on_stop=lambda r: None)
    assert keeper.interval() == 2.0
    keeper.remove("B", "t-B")
    assert keeper.interval() == 5.0


async def test_on_a_session_a_heartbeat_goes_at_least_every_beat_whatever_the_lease(fake: FakeWorkerService) -> None:
    keeper = LeaseKeeper(fake, worker_id="w1", default_interval=10.0, most=SESSION_BEAT_S)
    keeper.add("A", "t-A", interval=20.0, on_stop=lambda r: None)  # a minute's lease asks for 20 s
    assert keeper.interval() == SESSION_BEAT_S
    keeper.add("B", "t-B", interval=1.0, on_stop=lambda r: None)
    assert keeper.interval() == 1.0


def test_a_session_worker_speaks_more_often_than_the_servers_take_a_silent_session_for_a_stopped_one() -> None:
    # A killed worker's session that ended SESSION_BEAT_S (and a heartbeat's trip) after its
    # last word must read as a dead worker's, not as one the keepalive closed.
    assert SESSION_BEAT_S + 2 < KEEPALIVE_SILENCE_S


async def test_a_failed_heartbeat_is_retried_sooner(fake: FakeWorkerService) -> None:
    keeper = LeaseKeeper(fake, worker_id="w1", default_interval=10.0)
    keeper.add("A", "t", interval=5.0, on_stop=lambda r: None)
    fake.fail_next("Heartbeat", unavailable())
    assert await keeper.beat() < 1.0
    assert await keeper.beat() == 5.0


async def test_renew_now_beats_at_once_not_at_the_interval(fake: FakeWorkerService) -> None:
    keeper = LeaseKeeper(fake, worker_id="w1", default_interval=60.0)
    keeper.add("A", "t-A", interval=60.0, on_stop=lambda r: None)
    task = asyncio.create_task(keeper.run())
    try:
        keeper.renew_now()  # a new session opened: its leases are named on it now
        (beat,) = await fake.wait_for("Heartbeat", 1, timeout=2.0)
        assert [(ref.job_no, ref.worker_token) for ref in beat.leases] == [("A", "t-A")]
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_no_leases_no_heartbeats(fake: FakeWorkerService) -> None:
    keeper = LeaseKeeper(fake, worker_id="w1", default_interval=0.05)
    task = asyncio.create_task(keeper.run())
    try:
        # Time passing is what is tested: an idle keeper stays silent for several of its intervals.
        await asyncio.sleep(0.2)
        assert fake.of("Heartbeat") == []
        # ...and it was alive all along: the first lease gets the first heartbeat.
        keeper.add("A", "t-A", interval=0.05, on_stop=lambda r: None)
        (first, *_) = await fake.wait_for("Heartbeat", 1)
        assert [ref.job_no for ref in first.leases] == ["A"]
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


class _ByToken:
    """A WorkerService whose Heartbeat answers each lease by its token, in the request's order."""

    def __init__(self, states: dict[str, int]) -> None:
        self.states = states

    async def Heartbeat(
        self, request: worker_pb2.HeartbeatRequest, *, timeout: float | None = None
    ) -> worker_pb2.HeartbeatResponse:
        return worker_pb2.HeartbeatResponse(
            leases=[
                worker_pb2.LeaseState(job_no=ref.job_no, state=self.states[ref.worker_token]) for ref in request.leases
            ]
        )


async def test_two_leases_of_one_number_are_both_renewed_and_told_apart() -> None:
    """Numbers are per tenant: a shared fleet's worker may hold acme's and globex's PT-1 at once."""
    stub = _ByToken({"t-acme": worker_pb2.LeaseState.OK, "t-globex": worker_pb2.LeaseState.LOST})
    keeper = LeaseKeeper(stub, worker_id="w1", default_interval=10.0)  # type: ignore[arg-type]
    stops: dict[str, list[StopReason]] = {"t-acme": [], "t-globex": []}
    for token in stops:
        keeper.add("PT-1", token, interval=5.0, on_stop=stops[token].append)
    assert keeper.held == 2
    await keeper.beat()
    assert stops == {"t-acme": [], "t-globex": [StopReason.LOST]}
    keeper.remove("PT-1", "t-globex")
    assert keeper.held == 1
