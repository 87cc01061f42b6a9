"""When schedules fire and what a round does with a due one, on values with the clock passed in."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from jobwire.domain.errors import InvalidArgument
from jobwire.domain.schedules import (
    MIN_RUN_GAP,
    CatchUp,
    Outcome,
    Overlap,
    Run,
    Timing,
    continues,
    decide,
    firing_key,
    run_gap,
    served,
    timing,
)

ANCHOR = datetime(2026, 3, 1, 0, 0, 0)  # naive UTC, as the store keeps times
GRACE = timedelta(seconds=30)


def cron(expr: str, zone: str) -> Timing:
    return timing(cron=expr, every=None, time_zone=zone, anchor=ANCHOR)


def test_new_york_0900_moves_an_hour_earlier_in_utc_when_daylight_saving_starts_on_2026_03_08() -> None:
    daily = cron("0 9 * * *", "America/New_York")
    assert daily.next_after(datetime(2026, 3, 7, 0, 0)) == datetime(2026, 3, 7, 14, 0)  # 09:00 EST
    assert daily.next_after(datetime(2026, 3, 7, 14, 0)) == datetime(2026, 3, 8, 13, 0)  # 09:00 EDT: 23 h later
    assert daily.next_after(datetime(2026, 3, 8, 13, 0)) == datetime(2026, 3, 9, 13, 0)


def test_shanghai_keeps_its_utc_time_across_the_same_weekend() -> None:
    daily = cron("0 2 * * *", "Asia/Shanghai")  # UTC+8 all year: 18:00 UTC the day before
    assert daily.next_after(datetime(2026, 3, 7, 0, 0)) == datetime(2026, 3, 7, 18, 0)
    assert daily.next_after(datetime(2026, 3, 7, 18, 0)) == datetime(2026, 3, 8, 18, 0)
    assert daily.next_after(datetime(2026, 3, 8, 18, 0)) == datetime(2026, 3, 9, 18, 0)


def test_a_time_the_spring_forward_skips_fires_when_the_gap_ends_and_hourly_skips_the_lost_hour() -> None:
    at_0230 = cron("30 2 * * *", "America/New_York")  # 02:30 does not exist on 2026-03-08
    assert at_0230.next_after(datetime(2026, 3, 8, 0, 0)) == datetime(2026, 3, 8, 7, 0)  # 03:00 EDT
    assert at_0230.next_after(datetime(2026, 3, 8, 7, 0)) == datetime(2026, 3, 9, 6, 30)  # 02:30 EDT
    hourly = cron("0 * * * *", "America/New_York")
    assert hourly.next_after(datetime(2026, 3, 8, 6, 30)) == datetime(2026, 3, 8, 7, 0)  # 01:30 EST -> 03:00 EDT


def test_a_time_the_fall_back_repeats_fires_at_each_instant_it_names() -> None:
    at_0130 = cron("30 1 * * *", "America/New_York")
    assert at_0130.next_after(datetime(2026, 11, 1, 0, 0)) == datetime(2026, 11, 1, 5, 30)  # 01:30 EDT
    assert at_0130.next_after(datetime(2026, 11, 1, 5, 30)) == datetime(2026, 11, 1, 6, 30)  # 01:30 EST


def test_latest_at_is_the_last_fire_time_at_or_before() -> None:
    daily = cron("0 9 * * *", "America/New_York")
    assert daily.latest_at(datetime(2026, 3, 8, 13, 0)) == datetime(2026, 3, 8, 13, 0)
    assert daily.latest_at(datetime(2026, 3, 8, 12, 59)) == datetime(2026, 3, 7, 14, 0)


def test_every_counts_from_its_anchor() -> None:
    every = timing(cron=None, every=timedelta(seconds=2), time_zone="", anchor=ANCHOR)
    assert every.time_zone == "UTC"
    assert every.next_after(ANCHOR - timedelta(seconds=5)) == ANCHOR
    assert every.next_after(ANCHOR) == ANCHOR + timedelta(seconds=2)
    assert every.next_after(ANCHOR + timedelta(seconds=3)) == ANCHOR + timedelta(seconds=4)
    assert every.latest_at(ANCHOR + timedelta(seconds=3.9)) == ANCHOR + timedelta(seconds=2)
    assert every.latest_at(ANCHOR - timedelta(seconds=1)) is None


@pytest.mark.parametrize(
    ("cron_expr", "every", "zone", "field"),
    [
        ("0 2 * * *", timedelta(seconds=5), "", "cron"),  # both
        (None, None, "", "cron"),  # neither
        ("0 2 * *", None, "", "cron"),  # 4 fields
        ("0 2 * * * *", None, "", "cron"),  # 6 fields (croniter's seconds)
        ("61 2 * * *", None, "", "cron"),
        ("0 0 31 2 *", None, "", "cron"),  # never fires
        (None, timedelta(milliseconds=999), "", "every"),
        (None, timedelta(seconds=-5), "", "every"),
        ("0 2 * * *", None, "Mars/Olympus", "time_zone"),
        ("0 2 * * *", None, "../../etc/passwd", "time_zone"),
        ("0 2 * * *", None, "America", "time_zone"),  # a folder of zones, not a zone
    ],
)
def test_bad_timings_are_refused_naming_the_field(
    cron_expr: str | None, every: timedelta | None, zone: str, field: str
) -> None:
    with pytest.raises(InvalidArgument) as refused:
        timing(cron=cron_expr, every=every, time_zone=zone, anchor=ANCHOR)
    assert refused.value.field == field


EVERY_MINUTE = timing(cron=None, every=timedelta(minutes=1), time_zone="UTC", anchor=ANCHOR)


DUE = ANCHOR + timedelta(minutes=1)


def at(minutes: float) -> datetime:
    return ANCHOR + timedelta(minutes=minutes)


def decided(  # type: ignore[no-untyped-def]
    now: datetime,
    *,
    catch_up: CatchUp = CatchUp.NONE,
    running: bool = False,
    overlap: Overlap = Overlap.SKIP,
    runs: tuple[Run, ...] = (),
):
    return decide(
        EVERY_MINUTE, DUE, now, overlap=overlap, catch_up=catch_up, previous_unfinished=running, grace=GRACE,
        runs=runs,
    )  # fmt: skip


def test_a_fire_time_found_within_the_grace_fires_and_the_next_is_the_one_after_it() -> None:
    firing = decided(ANCHOR + timedelta(minutes=1, seconds=3))
    assert (firing.fire_at, firing.outcome) == (DUE, Outcome.SUBMITTED)
    assert firing.next_fire_at == at(2)


def test_missed_fire_times_submit_nothing_with_catch_up_none_and_one_job_with_one() -> None:
    later = ANCHOR + timedelta(minutes=10, seconds=31)  # ten fire times passed, the last 31 s ago; no loop ran
    none = decided(later)
    assert (none.fire_at, none.outcome, none.next_fire_at) == (None, Outcome.MISSED, at(11))
    one = decided(later, catch_up=CatchUp.ONE)
    assert (one.fire_at, one.outcome, one.next_fire_at) == (at(10), Outcome.SUBMITTED, at(11))


def test_a_fire_time_found_late_while_a_loop_ran_fires_as_if_on_time_whatever_catch_up_says() -> None:
    # The loops ran all along, but the round reached this schedule 80 s late: the servers were busy.
    busy = (Run(started_at=ANCHOR - timedelta(hours=1), last_at=at(2)),)
    late = DUE + timedelta(seconds=80)
    for catch_up in CatchUp:
        firing = decided(late, catch_up=catch_up, runs=busy)
        # the next fire time (minute 2) is due too: the round comes back for it
        assert (firing.fire_at, firing.outcome, firing.next_fire_at) == (DUE, Outcome.SUBMITTED, at(2))
    assert decided(late, runs=busy, running=True).outcome is Outcome.SKIPPED_OVERLAP


def test_a_loop_that_ran_at_the_fire_time_and_then_stopped_served_it() -> None:
    died = (Run(started_at=ANCHOR - timedelta(hours=1), last_at=DUE + timedelta(seconds=10)),)
    assert decided(at(30), runs=died).fire_at == DUE


def test_after_an_outage_the_fire_times_it_covered_are_missed_together_and_the_rest_fire() -> None:
    # Loops ran until minute 0.5 and again from minute 5.25: the fire times at minutes 1 to 4
    # had no server within the grace (30 s) after them; minute 5 (a run began 15 s after it) did.
    runs = (Run(ANCHOR - timedelta(hours=1), at(0.5)), Run(at(5.25), at(7)))
    none = decided(at(7), runs=runs)
    assert (none.fire_at, none.outcome, none.next_fire_at) == (None, Outcome.MISSED, at(5))
    one = decided(at(7), catch_up=CatchUp.ONE, runs=runs)
    assert (one.fire_at, one.outcome, one.next_fire_at) == (at(4), Outcome.SUBMITTED, at(5))
    after = decide(
        EVERY_MINUTE, at(5), at(7), overlap=Overlap.SKIP, catch_up=CatchUp.NONE, previous_unfinished=False,
        grace=GRACE, runs=runs,
    )  # fmt: skip
    assert (after.fire_at, after.outcome, after.next_fire_at) == (at(5), Outcome.SUBMITTED, at(6))


def test_a_run_covers_a_fire_time_when_it_overlaps_the_grace_after_it() -> None:
    fire = at(1)
    assert served([Run(at(0), at(1))], fire, GRACE)  # ran up to the fire time itself
    assert served([Run(at(1.5), at(3))], fire, GRACE)  # started within the grace
    assert not served([Run(at(1.6), at(3))], fire, GRACE)  # started after it
    assert not served([Run(at(0), at(0.99))], fire, GRACE)  # ended before the fire time
    assert not served([], fire, GRACE)


def test_a_run_continues_across_silences_up_to_its_gap() -> None:
    second = timedelta(seconds=1)
    assert run_gap(timedelta(seconds=60), second) == timedelta(seconds=60)
    assert run_gap(timedelta(0), timedelta(seconds=30)) == timedelta(seconds=90)
    assert run_gap(timedelta(0), second) == MIN_RUN_GAP
    assert continues(at(0), at(1), timedelta(seconds=60))
    assert not continues(at(0), at(1) + second, timedelta(seconds=60))


def test_skip_holds_while_the_previous_job_is_unfinished_and_allow_does_not() -> None:
    now = ANCHOR + timedelta(minutes=1, seconds=1)
    held = decided(now, running=True)
    assert (held.fire_at, held.outcome, held.next_fire_at) == (None, Outcome.SKIPPED_OVERLAP, at(2))
    assert decided(now, running=True, overlap=Overlap.ALLOW).outcome is Outcome.SUBMITTED


def test_the_firing_key_is_the_schedule_and_its_fire_time_in_iso_8601_utc() -> None:
    assert firing_key("nightly", datetime(2026, 3, 8, 7, 0, 0, 250)) == "nightly@2026-03-08T07:00:00Z"
