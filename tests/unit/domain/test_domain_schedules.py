"""When schedules fire and what a round does with a due one, on values with the clock passed in."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from jobwire.domain.errors import InvalidArgument
from jobwire.domain.schedules import CatchUp, Outcome, Overlap, Timing, decide, firing_key, timing

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


def decided(now: datetime, *, catch_up: CatchUp = CatchUp.NONE, running: bool = False, overlap: Overlap = Overlap.SKIP):  # type: ignore[no-untyped-def]
    due = ANCHOR + timedelta(minutes=1)
    return decide(EVERY_MINUTE, due, now, overlap=overlap, catch_up=catch_up, previous_unfinished=running, grace=GRACE)


def test_a_fire_time_found_within_the_grace_fires_and_the_next_is_the_first_after_now() -> None:
    firing = decided(ANCHOR + timedelta(minutes=1, seconds=3))
    assert (firing.fire_at, firing.outcome) == (ANCHOR + timedelta(minutes=1), Outcome.SUBMITTED)
    assert firing.next_fire_at == ANCHOR + timedelta(minutes=2)


def test_missed_fire_times_submit_nothing_with_catch_up_none_and_one_job_with_one() -> None:
    later = ANCHOR + timedelta(minutes=10, seconds=31)  # ten fire times passed, the last 31 s ago
    none = decided(later)
    assert (none.fire_at, none.outcome, none.next_fire_at) == (None, Outcome.MISSED, ANCHOR + timedelta(minutes=11))
    one = decided(later, catch_up=CatchUp.ONE)
    assert (one.fire_at, one.outcome, one.next_fire_at) == (
        ANCHOR + timedelta(minutes=10), Outcome.SUBMITTED, ANCHOR + timedelta(minutes=11),
    )  # fmt: skip


def test_skip_holds_while_the_previous_job_is_unfinished_and_allow_does_not() -> None:
    now = ANCHOR + timedelta(minutes=1, seconds=1)
    held = decided(now, running=True)
    assert (held.fire_at, held.outcome, held.next_fire_at) == (
        None,
        Outcome.SKIPPED_OVERLAP,
        ANCHOR + timedelta(minutes=2),
    )
    assert decided(now, running=True, overlap=Overlap.ALLOW).outcome is Outcome.SUBMITTED


def test_the_firing_key_is_the_schedule_and_its_fire_time_in_iso_8601_utc() -> None:
    assert firing_key("nightly", datetime(2026, 3, 8, 7, 0, 0, 250)) == "nightly@2026-03-08T07:00:00Z"
