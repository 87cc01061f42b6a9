"""The database clock, read once a second instead of once per statement.

Lease decisions are made by the database inside its statements (`run_after <=
UTC_TIMESTAMP(6)`, `lease_expires_at = UTC_TIMESTAMP(6) + lease`). The other times a
change records (updated_at, created_at, an event's time, a backoff's run_after) must be
known to the server before it writes, because they go into the event's snapshot and the
reply. Reading the clock in a SELECT of its own cost a round trip per change.

`DbClock` reads the database clock now and then and advances that reading with this
process's monotonic clock. A reading taken at some moment inside the round trip
[t0, t1] is advanced from t1, so the estimate never runs ahead of the database: it lags
by at most one round trip (a fraction of a millisecond on a LAN). Never ahead matters: a
job submitted "now" must be claimable by the database's own `run_after <= now` at once.
The estimate never goes back within a process, even when a new reading would pull it back.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

MAX_AGE_S = 5.0  # older than this, the next now() reads the database first
MAX_ROUND_TRIP_S = 0.05  # a slower reading is kept only when no better one comes


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
    """SQLite's clock is this machine's, read with millisecond precision as SQLite reads it.

    Truncated to the millisecond, so a time written now is never ahead of SQLite's own
    `'now'` in the same millisecond.
    """

    def calibrate(self) -> None:
        """Nothing to read: the database runs in this process."""

    def now(self) -> datetime:
        now = datetime.now(UTC).replace(tzinfo=None)
        return now.replace(microsecond=now.microsecond // 1000 * 1000)
