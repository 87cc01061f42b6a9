"""Retry policy: how many attempts, how long to back off, what to do with a lost lease."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from jobwire.domain.errors import InvalidArgument

MAX_ATTEMPTS_LIMIT = 100
MAX_BACKOFF_LIMIT_S = 86_400.0


class OnLeaseLost(StrEnum):
    INSPECT = "INSPECT"  # leave the job RUNNING and stalled for an operator
    RETRY = "RETRY"  # requeue after the grace period while attempts remain


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    max_attempts: int = 3
    initial_backoff_s: float = 1.0
    max_backoff_s: float = 300.0
    backoff_multiplier: float = 2.0
    on_lease_lost: OnLeaseLost = OnLeaseLost.INSPECT

    def backoff_after(self, attempt: int) -> float:
        """Seconds to wait before the attempt that follows `attempt` (1-based)."""
        # Attempt numbers keep counting across retries; cap the exponent so it cannot overflow.
        exponent = min(max(0, attempt - 1), 64)
        delay = self.initial_backoff_s * self.backoff_multiplier**exponent
        return min(self.max_backoff_s, delay)

    def validated(self) -> RetryPolicy:
        if not 1 <= self.max_attempts <= MAX_ATTEMPTS_LIMIT:
            raise InvalidArgument("retry_policy.max_attempts", f"must be between 1 and {MAX_ATTEMPTS_LIMIT}")
        for name, value in (
            ("initial_backoff", self.initial_backoff_s),
            ("max_backoff", self.max_backoff_s),
        ):
            if not 0 <= value <= MAX_BACKOFF_LIMIT_S:
                raise InvalidArgument(f"retry_policy.{name}", "must be between 0 and 1 day")
        if self.max_backoff_s < self.initial_backoff_s:
            raise InvalidArgument("retry_policy.max_backoff", "must not be below initial_backoff")
        if not 1.0 <= self.backoff_multiplier <= 10.0:
            raise InvalidArgument("retry_policy.backoff_multiplier", "must be between 1 and 10")
        return self
