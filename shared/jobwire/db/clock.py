"""The store's one clock: every time that decides a lease, a deadline, a run_after or a purge.

No statement reads the database's own clock. Each transaction takes its time from
`Database.clock` once, as it begins, and binds it: the claim's `run_after <= :now`, the
reaper's and the sweeps' `< now`, retention's cutoff (`Wire.now` for the state changes,
`jobwire.db.reads.clock(conn)` for the queries built per call). The values a change writes
(updated_at, lease_expires_at, heartbeat_at, a backoff's run_after) are that same time, so
a reply shows exactly what was written, and a test that moves the clock (tests/clocks.py)
moves every one of them.

MySQL: the time is the database server's, estimated by `DbClock` without a round trip per
change. It reads the database clock now and then and advances that reading with this
process's monotonic clock. A reading taken at some moment inside the round trip [t0, t1]
is advanced from t1, so the estimate never runs ahead of the database: it lags by at most
one round trip (a fraction of a millisecond on a LAN). The estimate never goes back within
a process, even when a new reading would pull it back. Every process keeps its own
estimate; two processes' differ by at most the lag of their readings, which moves when a
lease decision is made by as much (milliseconds at worst), never whether: every write is
guarded by token, epoch and version, and a job's times never go back
(jobwire.db.changes). A job another process made runnable "now" is claimable here once
this process's estimate reaches its run_after, which the runnable-work watcher waits for
(jobwire.worker.server.runnable).

SQLite runs in this process: its time is this machine's (`LocalClock`).

So all times that decide leases come from the database's clock, never a worker's. Only
tests make a clock that is moved.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Protocol

MAX_AGE_S = 5.0  # older than this, the next now() reads the database first
MAX_ROUND_TRIP_S = 0.05  # a slower reading is kept only when no better one comes


class Clock(Protocol):
    """Where the store's time comes from: UTC, as naive datetime, never going back."""

    def now(self) -> datetime: ...

    def calibrate(self) -> None:
        """Read the database's clock again (one round trip where it is another machine's)."""


class DbClock:
    """`now()`: the database's UTC time, as naive datetime, without a round trip."""

    def __init__(self, read: Callable[[], datetime], *, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._read = read
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._base: tuple[datetime, float] | None = None  # (database time, monotonic time it was valid at)
        self._last = datetime.min

    def calibrate(self) -> None:
        """Read the database clock (one round trip); raises what the read raises."""
        for _ in range(3):
            t0 = self._monotonic()
            reading = self._read()
            t1 = self._monotonic()
            if t1 - t0 <= MAX_ROUND_TRIP_S:
                break
        with self._lock:
            self._base = (reading, t1)

    def now(self) -> datetime:
        base = self._base
        if base is None or self._monotonic() - base[1] > MAX_AGE_S:
            self.calibrate()
            base = self._base
            assert base is not None
        reading, at = base
        estimate = reading + timedelta(seconds=self._monotonic() - at)
        with self._lock:
            if estimate > self._last:
                self._last = estimate
            return self._last


class LocalClock:
    """SQLite's clock is this machine's."""

    def calibrate(self) -> None:
        """Nothing to read: the database runs in this process."""

    def now(self) -> datetime:
        return datetime.now(UTC).replace(tzinfo=None)
