"""Whether any worker serves a kind of job: the NO_WORKER rule, on values.

A worker's every claim names its queues and job types; the store keeps, per (queue, job
type), when one last did. A QUEUED job whose kind nobody has claimed for within the limit
(JOBWIRE_NO_WORKER_AFTER) waits for a worker that may never come: an Inspect finding, and
its user is told so instead of a place in line.
"""

from __future__ import annotations

from datetime import datetime, timedelta


def unserved(claimed_at: datetime | None, now: datetime, limit: timedelta) -> bool:
    """True when no worker claimed for the kind within `limit` of `now` (or ever)."""
    return claimed_at is None or now - claimed_at >= limit


def last_asked(claimed_at: datetime | None, ago_s: float | None) -> str:
    """When a worker last asked for the kind, for an operator: "never", or a time and how long ago."""
    if claimed_at is None:
        return "never"
    ago = f" ({ago_s:.0f}s ago)" if ago_s is not None else ""
    return f"{claimed_at.isoformat(sep=' ', timespec='seconds')}{ago}"
