"""Schedules: when one fires next, and what a round does with a schedule that is due.

Pure: every function takes the time it reasons about (naive UTC, as the store keeps times)
and reads no clock. Cron expressions are read by croniter in the schedule's IANA time zone
(zoneinfo; the tzdata package stands in on machines without system zones), so fire times
follow the zone's daylight-saving changes: a wall-clock time that a spring-forward skips
fires at the first instant after the gap, and one that a fall-back repeats fires at each
instant it names. `every` is a fixed period, blind to zones: created_at + k * every.

A fire time is missed only when no server ran at its time: no schedule loop of any server
ran between it and the misfire grace after it. What ran is kept as `Run`s (a stretch of
rounds, by the database clock, no two further apart than `run_gap`); a fire time a round
finds late while loops were running (the servers were busy) fires as if on time.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
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
# Rounds closer than this are one run, whatever the grace: a loop's own pauses (the interval
# between rounds, a slow batch) are not an outage.
MIN_RUN_GAP = timedelta(seconds=5)
RUN_HISTORY = timedelta(days=7)  # runs ended longer ago are forgotten: no fire time waits that long for a round


class Overlap(enum.StrEnum):
    SKIP = "SKIP"  # no firing while the schedule's previous job is unfinished
    ALLOW = "ALLOW"


class CatchUp(enum.StrEnum):
    NONE = "NONE"  # firings missed while no server ran are skipped
    ONE = "ONE"  # one job for all of them, then on as before


class Outcome(enum.StrEnum):
    """What a round did with a due schedule (the firings metric's label)."""

    SUBMITTED = "submitted"
    SKIPPED_OVERLAP = "skipped_overlap"  # SKIP: the previous job was unfinished
    MISSED = "missed"  # no server ran at its time (past the misfire grace)
    REFUSED = "refused"  # a server ran, but Submit refused its job (a queue's limits, a bad template)


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
class Run:
    """A stretch in which some server's schedule loop ran: rounds from `started_at` to `last_at`,
    none further from the one before than `run_gap` (database clock)."""

    started_at: datetime
    last_at: datetime


def run_gap(grace: timedelta, interval: timedelta) -> timedelta:
    """How long a loop may go without a round and still be running: past it, the servers were down.

    At least the grace (a shorter silence cannot make a fire time missed anyway) and three of
    the loop's intervals (its rounds are jittered, and a round may be slow)."""
    return max(grace, 3 * interval, MIN_RUN_GAP)


def continues(last_at: datetime, now: datetime, gap: timedelta) -> bool:
    """Whether a round at `now` continues the run last seen at `last_at` (else a new run starts)."""
    return now - last_at <= gap


def served(runs: Sequence[Run], fire_at: datetime, grace: timedelta) -> bool:
    """Whether some loop ran between `fire_at` and `fire_at + grace`: a late firing was then the
    servers' delay, not a miss."""
    end = fire_at + grace
    return any(run.started_at <= end and run.last_at >= fire_at for run in runs)


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
    runs: Sequence[Run],
) -> Firing:
    """What to do with a schedule due at `due_at` (<= now), seen at `now`, given the loops' `runs`.

    Fire times are dealt with oldest first. `due_at` found within `grace`, or later while
    some loop ran within `grace` of it (busy servers), fires: one job, keyed by it, and next
    comes the fire time after it (due already, the round comes back for it). Otherwise it
    was missed, and so was every fire time after it until the first run that started later
    (no server ran at any of them): catch_up NONE submits nothing, ONE one job keyed by the
    latest of them; next comes the first fire time after those.
    """
    fire_at = due_at
    if now - due_at > grace and not served(runs, due_at, grace):
        back = min((run.started_at for run in runs if run.started_at > due_at + grace), default=now)
        fire_at = max(when.latest_at(back - grace - _TICK) or due_at, due_at)
        if catch_up is CatchUp.NONE:
            return Firing(None, Outcome.MISSED, when.next_after(fire_at))
    upcoming = when.next_after(fire_at)
    if overlap is Overlap.SKIP and previous_unfinished:
        return Firing(None, Outcome.SKIPPED_OVERLAP, upcoming)
    return Firing(fire_at, Outcome.SUBMITTED, upcoming)


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
    skipped_firings: int = 0  # fire times a server reached that made no job (SKIPPED_OVERLAP, REFUSED)
    missed_firings: int = 0  # fire times no server ran for (MISSED)

    @property
    def created_at(self) -> datetime:
        return self.timing.anchor


@dataclass(frozen=True)
class Due:
    """A schedule a round found due, and whether its previous job is still unfinished (for SKIP)."""

    schedule: ScheduleRecord
    previous_unfinished: bool


@dataclass(frozen=True)
class Backlog:
    """One read of a round: due schedules, each tenant's oldest first, and the oldest due fire time
    of all (how far behind the rounds are); None when nothing is due."""

    due: list[Due]
    oldest: datetime | None


@dataclass(frozen=True, kw_only=True)
class Advance:
    """Move `schedule` on from `due_at` to `next_fire_at`, recording its firing (fire time, job), a skip or a miss."""

    schedule: ScheduleRecord
    due_at: datetime
    next_fire_at: datetime
    fired: tuple[datetime, str] | None = None
    skipped: bool = False  # no job though a server ran: SKIP held it back, or Submit refused it
    missed: bool = False  # no server ran at its time
