"""Queue flow control: how many jobs of a queue may run at once, how fast they may start, and pause.

The rules live here; the state (a row per limited queue with its token bucket) lives in the
database and is read and spent inside each claim's transaction (jobwire.db.queue_limits).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from jobwire.domain.errors import InvalidArgument


class Held(StrEnum):
    """Why a queue leases nothing now: what a job waiting in it is told instead of its place in line."""

    PAUSED = "PAUSED"
    AT_LIMIT = "AT_LIMIT"


MAX_RUNNING = 1_000_000
MAX_RATE_PER_SECOND = 100_000.0
MAX_BURST = 1_000_000


@dataclass(frozen=True)
class QueueLimits:
    """0 means no limit of that kind. A rate without a burst starts one job at a time."""

    max_running: int = 0
    rate_per_second: float = 0.0
    burst: int = 0
    paused: bool = False

    @property
    def bucket_size(self) -> int:
        return max(self.burst, 1)

    @property
    def none(self) -> bool:
        """No limit and not paused: the queue needs no row, and its claims no lock."""
        return not (self.max_running or self.rate_per_second or self.paused)


def checked(max_running: int, rate_per_second: float, burst: int) -> QueueLimits:
    """Limits from a request, or INVALID_ARGUMENT naming the first bad field."""
    if not 0 <= max_running <= MAX_RUNNING:
        raise InvalidArgument("limits.max_running", f"must be between 0 (no limit) and {MAX_RUNNING}")
    if not (math.isfinite(rate_per_second) and 0 <= rate_per_second <= MAX_RATE_PER_SECOND):
        raise InvalidArgument("limits.rate_per_second", f"must be between 0 (no limit) and {MAX_RATE_PER_SECOND:g}")
    if not 0 <= burst <= MAX_BURST:
        raise InvalidArgument("limits.burst", f"must be between 0 and {MAX_BURST}")
    if burst and not rate_per_second:
        raise InvalidArgument("limits.burst", "a burst needs a rate_per_second")
    return QueueLimits(max_running=max_running, rate_per_second=rate_per_second, burst=burst)


@dataclass(frozen=True)
class Bucket:
    """A token bucket as stored: `tokens` left at `refilled_at`."""

    tokens: float
    refilled_at: datetime

    def at(self, now: datetime, limits: QueueLimits) -> float:
        """The tokens at `now`: refilled at the rate, never beyond the burst (a clock behind counts as no time)."""
        elapsed = max((now - self.refilled_at).total_seconds(), 0.0)
        return min(float(limits.bucket_size), self.tokens + elapsed * limits.rate_per_second)


def next_token_s(tokens: float, limits: QueueLimits) -> float:
    """Seconds until a bucket holding `tokens` holds a whole one."""
    return max(1.0 - tokens, 0.0) / limits.rate_per_second if tokens < 1 else 0.0
