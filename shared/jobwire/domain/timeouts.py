"""A job's time limits: one attempt, the whole job, and how long it may run without progress."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from jobwire.domain.errors import InvalidArgument
from jobwire.domain.limits import MAX_TIMEOUT_S


class OnNoProgress(StrEnum):
    INSPECT = "INSPECT"  # an Inspect finding: an operator looks; the job runs on
    FAIL = "FAIL"  # also end the attempt with a TIMEOUT, as an attempt timeout would


@dataclass(frozen=True, kw_only=True)
class Timeouts:
    """Seconds each limit allows; None is no limit.

    Attributes:
        attempt_s: One attempt, from its claim to its end.
        job_s: The whole job, from its submit to its end, across retries and queueing.
        stage_s: A RUNNING job with no new units and no new stage for this long made no progress.
        on_no_progress: What no progress leads to.
    """

    attempt_s: float | None = None
    job_s: float | None = None
    stage_s: float | None = None
    on_no_progress: OnNoProgress = OnNoProgress.INSPECT

    def validated(self) -> Timeouts:
        for name, value in (
            ("attempt_timeout", self.attempt_s),
            ("job_timeout", self.job_s),
            ("stage_timeout", self.stage_s),
        ):
            # `not 0 < value` also refuses NaN, which compares false with everything.
            if value is not None and not 0 < value <= MAX_TIMEOUT_S:
                raise InvalidArgument(f"timeouts.{name}", "must be more than 0 and at most 30 days")
        if self.on_no_progress is OnNoProgress.FAIL and self.stage_s is None:
            raise InvalidArgument("timeouts.on_no_progress", "FAIL needs a stage_timeout")
        return self


def deadline(start: datetime, seconds: float | None) -> datetime | None:
    """When a limit of `seconds` from `start` runs out; None without a limit."""
    return None if seconds is None else start + timedelta(seconds=seconds)
