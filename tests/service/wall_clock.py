"""The wall clock job numbering reads, under a test's control.

`jobwire.process_state.job_numbers` takes the day of a number from the process's own UTC wall clock
(`datetime.now(UTC)`), not the database clock, so that is the clock replaced here: a test
that counts numbers then never sees the day turn under it, and one about midnight sets it.
"""

from __future__ import annotations

from datetime import UTC, datetime, tzinfo

import pytest

from jobwire.process_state import job_numbers

# One tenth of a second before midnight UTC at the end of a year: the day, the month and the year turn.
EVE = datetime(2031, 12, 31, 23, 59, 59, 900_000, tzinfo=UTC)


class Clock:
    """The wall clock job numbering reads: set by the test, never moved by itself."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    @property
    def day(self) -> str:
        """The UTC day a number takes now (YYYYMMDD)."""
        return self.now.astimezone(UTC).strftime("%Y%m%d")

    def datetime_class(self) -> type[datetime]:
        clock = self

        class Controlled(datetime):
            @classmethod
            def now(cls, tz: tzinfo | None = None) -> datetime:  # type: ignore[override]
                return clock.now.astimezone(tz) if tz is not None else clock.now.replace(tzinfo=None)

        return Controlled


def numbering_clock(monkeypatch: pytest.MonkeyPatch, now: datetime = EVE) -> Clock:
    """Job numbering reads `Clock` (set to `now`) until the test ends."""
    controlled = Clock(now)
    monkeypatch.setattr(job_numbers, "datetime", controlled.datetime_class())
    return controlled
