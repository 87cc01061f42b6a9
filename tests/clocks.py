"""Time a test can move: the store's clock (jobwire.db.clock) plus how far the test moved it.

Every time the store decides by comes from `Database.clock`: leases and their expiry,
attempt, job and progress deadlines, run_after, a schedule's fire times, retention's
cutoffs, the times a change writes. A test that puts a `MovableClock` in its place and
calls `advance(timedelta(seconds=31))` is 31 seconds later for all of them at once, in a
store and in an in-process server (tests/served.py installs one in every server it starts),
without sleeping through a lease. Time still flows as it does for the store; a test only
ever moves it forward, as real time goes.

What a moved clock does not move is pacing: how often housekeeping or the schedule loop
runs, how long a Claim waits, a watch's idle cut. Those are real seconds. A test that
moves time and wants a round of housekeeping runs one (tests/served.py `housekeeping_round`).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from jobwire.db.clock import Clock
from jobwire.db.store import JobStore


class MovableClock:
    """The clock `inner` keeps, `moved` later."""

    def __init__(self, inner: Clock) -> None:
        self._inner = inner
        self.moved = timedelta(0)  # only the test moves it; the store's threads read it

    def now(self) -> datetime:
        return self._inner.now() + self.moved

    def calibrate(self) -> None:
        self._inner.calibrate()

    def advance(self, by: timedelta) -> datetime:
        """Move time forward by `by`; the new time."""
        if by < timedelta(0):
            raise ValueError("time only moves forward")
        self.moved += by
        return self.now()


def movable_clock(store: JobStore) -> MovableClock:
    """Put a clock that moves in place of `store`'s (before anything reads the time)."""
    clock = MovableClock(store.db.clock)
    store.db.clock = clock
    return clock
