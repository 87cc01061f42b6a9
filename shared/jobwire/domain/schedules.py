"""Schedules: when one fires next, and what a round does with a schedule that is due.

Pure: every function takes the time it reasons about (naive UTC, as the store keeps times)
and reads no clock. Cron expressions are read by croniter in the schedule's IANA time zone
(zoneinfo; the tzdata package stands in on machines without system zones), so fire times
follow the zone's daylight-saving changes: a wall-clock time that a spring-forward skips
fires at the first instant after the gap, and one that a fall-back repeats fires at each
instant it names. `every` is a fixed period, blind to zones: created_at + k * every.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterError, croniter

from jobwire.domain.errors import InvalidArgument

MIN_EVERY = timedelta(seconds=1)
MAX_EVERY = timedelta(days=366)
MAX_ZONE_CHARS = 64
CRON_FIELDS = 5
_TICK = timedelta(microseconds=1)  # croniter's get_prev is strictly before its start


class Overlap(enum.StrEnum):
    SKIP = "SKIP"  # no firing while the schedule's previous job is unfinished
    ALLOW = "ALLOW"


class CatchUp(enum.StrEnum):
    NONE = "NONE"  # firings missed while no server ran are skipped
    ONE = "ONE"  # one job for all of them, then on as before


class Outcome(enum.StrEnum):
    """What a round did with a due schedule (the firings metric's label)."""

    SUBMITTED = "submitted"
    SKIPPED_OVERLAP = "skipped_overlap"
    MISSED = "missed"


@dataclass(frozen=True, kw_only=True)
class Timing:
    """When a schedule fires: a 5-field cron read in `time_zone`, or every `every` from `anchor`."""

    cron: str | None
    every: timedelta | None
    time_zone: str
    anchor: datetime  # created_at: `every` counts from it

    def next_after(self, t: datetime) -> datetime:
        """The first fire time strictly after `t`."""
        if self.every is not None:
            return self.anchor + self.every * (max(t - self.anchor, -_TICK) // self.every + 1)
        assert self.cron is not None
        return _utc(croniter(self.cron, _local(t, self.time_zone)).get_next(datetime))

    def latest_at(self, t: datetime) -> datetime | None:
        """The last fire time at or before `t`; None before the first."""
        if self.every is not None:
            return None if t < self.anchor else self.anchor + self.every * ((t - self.anchor) // self.every)
        assert self.cron is not None
        try:
            return _utc(croniter(self.cron, _local(t + _TICK, self.time_zone)).get_prev(datetime))
        except CroniterError:
            return None


def timing(*, cron: str | None, every: timedelta | None, time_zone: str, anchor: datetime) -> Timing:
    """A schedule's timing from a caller's request, each mistake an InvalidArgument naming its field."""
    if (cron is None) == (every is None):
        raise InvalidArgument("cron", "give a cron expression or an every period: exactly one")
    zone = time_zone or "UTC"
    _zone(zone)
    if every is not None:
        if not MIN_EVERY <= every <= MAX_EVERY:
            raise InvalidArgument("every", "must be between 1 s and 366 days")
        return Timing(cron=None, every=every, time_zone=zone, anchor=anchor)
    assert cron is not None
    if len(cron.split()) != CRON_FIELDS or not croniter.is_valid(cron):
        raise InvalidArgument("cron", "is not a 5-field cron expression (minute hour day month weekday)")
    made = Timing(cron=" ".join(cron.split()), every=None, time_zone=zone, anchor=anchor)
    try:
        made.next_after(anchor)
    except CroniterError:
        raise InvalidArgument("cron", "never fires") from None
    return made


@dataclass(frozen=True)
class Firing:
    """A round's decision: the fire time to submit a job for (its key), if any, and what follows."""

    fire_at: datetime | None
    outcome: Outcome
    next_fire_at: datetime


def decide(
    when: Timing,
    due_at: datetime,
    now: datetime,
    *,
    overlap: Overlap,
    catch_up: CatchUp,
    previous_unfinished: bool,
    grace: timedelta,
) -> Firing:
    """What to do with a schedule due at `due_at` (<= now), seen at `now`.

    At most one job per round, for the latest fire time that has passed: found within
    `grace` it is on time; later, every fire time since `due_at` was missed (no server
    ran), and catch_up decides: NONE submits nothing, ONE submits one. Either way the
    next fire time is the first after now, so a round never fires twice.
    """
    latest = max(when.latest_at(now) or due_at, due_at)
    upcoming = when.next_after(now)
    if now - latest > grace and catch_up is CatchUp.NONE:
        return Firing(None, Outcome.MISSED, upcoming)
    if overlap is Overlap.SKIP and previous_unfinished:
        return Firing(None, Outcome.SKIPPED_OVERLAP, upcoming)
    return Firing(latest, Outcome.SUBMITTED, upcoming)


def firing_key(schedule_id: str, fire_at: datetime) -> str:
    """The idempotency key of a firing: `<schedule_id>@<fire time, ISO 8601 UTC>`, one job per fire time."""
    return f"{schedule_id}@{fire_at.replace(tzinfo=None).isoformat(timespec='seconds')}Z"


def _zone(name: str) -> ZoneInfo:
    if len(name) > MAX_ZONE_CHARS:
        raise InvalidArgument("time_zone", f"at most {MAX_ZONE_CHARS} characters")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise InvalidArgument("time_zone", "is not an IANA time zone name like Asia/Shanghai") from None


def _local(t: datetime, zone: str) -> datetime:
    return t.replace(tzinfo=UTC).astimezone(ZoneInfo(zone))


def _utc(t: datetime) -> datetime:
    return t.astimezone(UTC).replace(tzinfo=None)


@dataclass(frozen=True, kw_only=True)
class ScheduleRecord:
    """A schedule as stored. `template` is the SubmitRequest each firing submits, serialized."""

    tenant: str
    schedule_id: str
    queue: str  # the template's, so a token's queues scope its schedules as they scope jobs
    timing: Timing
    template: bytes
    overlap: Overlap
    catch_up: CatchUp
    paused: bool = False
    next_fire_at: datetime | None = None
    last_fire_at: datetime | None = None
    last_job_no: str | None = None
    skipped_firings: int = 0

    @property
    def created_at(self) -> datetime:
        return self.timing.anchor


@dataclass(frozen=True)
class Due:
    """A schedule a round found due, and whether its previous job is still unfinished (for SKIP)."""

    schedule: ScheduleRecord
    previous_unfinished: bool
