"""The queue facts a stream's later messages stand on, each kept a second (jobwire.db.standing)."""

from __future__ import annotations

from jobwire.db.standing import RecentQueues
from jobwire.domain.flow import Held
from jobwire.domain.standing import QueueStanding

OPEN = QueueStanding(served=frozenset({"frames"}))
PAUSED = QueueStanding(served=frozenset({"frames"}), held=Held.PAUSED)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_facts_are_kept_for_the_ttl_then_read_again() -> None:
    clock = Clock()
    recent = RecentQueues(ttl_s=1.0, clock=clock)
    kept, missing, mark = recent.known({("a", "q")})
    assert (kept, missing) == ({}, [("a", "q")])
    recent.keep({("a", "q"): OPEN}, mark)
    clock.now += 0.9
    assert recent.known({("a", "q"), ("a", "r")})[:2] == ({("a", "q"): OPEN}, [("a", "r")])
    clock.now += 0.2
    assert recent.known({("a", "q")})[:2] == ({}, [("a", "q")])


def test_a_change_through_this_process_forgets_its_queue_at_once() -> None:
    recent = RecentQueues(clock=Clock())
    recent.keep({("a", "q"): OPEN, ("b", "q"): OPEN, ("a", "r"): OPEN}, recent.known(())[2])
    recent.forget("a", "q")  # tenant a paused q
    assert recent.known({("a", "q"), ("b", "q"), ("a", "r")})[1] == [("a", "q")]
    recent.forget("*", "r")  # a shared fleet claimed for r: every tenant's r
    assert recent.known({("a", "r"), ("b", "q")})[1] == [("a", "r")]


def test_a_read_that_overlapped_a_change_is_not_kept() -> None:
    recent = RecentQueues(clock=Clock())
    _, _, mark = recent.known({("a", "q")})  # a read starts
    recent.forget("a", "q")  # the queue is paused while it runs
    recent.keep({("a", "q"): OPEN}, mark)  # what it read may predate the pause
    assert recent.known({("a", "q")})[1] == [("a", "q")]
    _, _, mark = recent.known({("a", "q")})
    recent.keep({("a", "q"): PAUSED}, mark)
    assert recent.known({("a", "q")})[0] == {("a", "q"): PAUSED}
