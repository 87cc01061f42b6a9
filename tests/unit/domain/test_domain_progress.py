"""Progress rules: a fact, never backwards, percent only with a known total."""

from __future__ import annotations

import itertools
import random

import pytest

from jobwire.domain.errors import (
    InvalidArgument,
    JobwireError,
    ProgressRegression,
    TotalChanged,
)
from jobwire.domain.progress import Progress, apply_report
from jobwire.domain.stages import DEFAULT_PLAN, StageDef

PLAN = DEFAULT_PLAN  # PREPARING(1) PROCESSING(2) VERIFYING(3) DELIVERING(4)
CODES = [s.code for s in PLAN]


def at(index: int, processed: int = 0, total: int | None = None) -> Progress:
    return Progress(
        stage_index=index,
        stage_count=len(PLAN),
        processed_units=processed,
        total_units=total,
    )


FRESH = Progress(stage_index=0, stage_count=len(PLAN))


# ---------------------------------------------------------------- percent


@pytest.mark.parametrize(
    ("processed", "total", "percent"),
    [
        (0, None, None),
        (5, None, None),
        (0, 0, None),  # total 0 is known but not > 0: no percent
        (0, 1, 0),
        (1, 3, 33),  # floor, never rounded up
        (2, 3, 66),
        (3, 3, 100),
        (99, 100, 99),
        (999, 1000, 99),
        (1, 1000, 0),
        (50, 100, 50),
        (150, 100, 100),  # min(100, ...) even if a value slipped past validation
        (10**15, 10**15 + 1, 99),  # big int64-ish numbers stay exact
    ],
)
def test_percent(processed: int, total: int | None, percent: int | None) -> None:
    assert at(2, processed, total).percent == percent


def test_negative_total_gives_no_percent() -> None:
    assert at(2, 0, -5).percent is None


# ---------------------------------------------------------------- accepted reports


def test_first_report_enters_stage_from_fresh() -> None:
    p = apply_report(PLAN, FRESH, "PREPARING", 0, None)
    assert p == at(1, 0, None)
    assert p.stage_count == 4


def test_first_report_may_skip_to_any_stage() -> None:
    assert apply_report(PLAN, FRESH, "VERIFYING", 2, 4) == at(3, 2, 4)


def test_stage_index_counts_from_one() -> None:
    for i, code in enumerate(CODES, start=1):
        assert apply_report(PLAN, FRESH, code, 0, None).stage_index == i


def test_same_stage_forward() -> None:
    assert apply_report(PLAN, at(2, 3, 10), "PROCESSING", 7, 10) == at(2, 7, 10)


def test_same_stage_equal_processed_is_not_a_regression() -> None:
    assert apply_report(PLAN, at(2, 3, 10), "PROCESSING", 3, 10) == at(2, 3, 10)


def test_processed_equal_to_total_allowed() -> None:
    p = apply_report(PLAN, at(2, 3, 10), "PROCESSING", 10, None)
    assert p == at(2, 10, 10)
    assert p.percent == 100


def test_total_zero_with_zero_processed_is_allowed_and_shows_no_percent() -> None:
    p = apply_report(PLAN, at(1), "PROCESSING", 0, 0)
    assert p.total_units == 0
    assert p.percent is None


def test_total_unknown_to_known_once() -> None:
    p = apply_report(PLAN, at(2, 4, None), "PROCESSING", 5, 20)
    assert p == at(2, 5, 20)
    assert p.percent == 25


def test_omitted_total_keeps_known_total() -> None:
    p = apply_report(PLAN, at(2, 4, 20), "PROCESSING", 6, None)
    assert p.total_units == 20
    assert p.percent == 30


def test_same_total_again_is_fine() -> None:
    assert apply_report(PLAN, at(2, 4, 20), "PROCESSING", 6, 20).total_units == 20


def test_unknown_total_stays_unknown() -> None:
    p = apply_report(PLAN, at(2, 4, None), "PROCESSING", 9, None)
    assert p.total_units is None
    assert p.percent is None


def test_new_stage_resets_units_and_total() -> None:
    p = apply_report(PLAN, at(2, 80, 100), "VERIFYING", 0, None)
    assert p == at(3, 0, None)


def test_new_stage_may_report_smaller_units_than_previous_stage() -> None:
    p = apply_report(PLAN, at(2, 80, 100), "VERIFYING", 1, 4)
    assert p == at(3, 1, 4)


def test_new_stage_takes_a_different_total() -> None:
    assert apply_report(PLAN, at(2, 100, 100), "VERIFYING", 0, 7).total_units == 7


def test_skipping_stages_forward_is_allowed() -> None:
    assert apply_report(PLAN, at(1, 3, 5), "DELIVERING", 0, None).stage_index == 4


def test_custom_plan() -> None:
    plan = (StageDef(code="FETCH"), StageDef(code="IMPORT"))
    p = apply_report(plan, Progress(stage_index=0, stage_count=2), "IMPORT", 3, 9)
    assert p == Progress(stage_index=2, stage_count=2, processed_units=3, total_units=9)


# ---------------------------------------------------------------- refused reports


def test_stage_backwards_refused() -> None:
    with pytest.raises(ProgressRegression) as info:
        apply_report(PLAN, at(3, 0, None), "PROCESSING", 0, None)
    assert info.value.reason == "PROGRESS_REGRESSION"
    assert info.value.code == "FAILED_PRECONDITION"


@pytest.mark.parametrize("earlier", ["PREPARING", "PROCESSING", "VERIFYING"])
def test_every_earlier_stage_refused_from_last(earlier: str) -> None:
    with pytest.raises(ProgressRegression):
        apply_report(PLAN, at(4, 0, None), earlier, 0, None)


def test_processed_backwards_within_stage_refused() -> None:
    with pytest.raises(ProgressRegression):
        apply_report(PLAN, at(2, 7, 10), "PROCESSING", 6, 10)


def test_processed_backwards_without_total_refused() -> None:
    with pytest.raises(ProgressRegression):
        apply_report(PLAN, at(2, 7, None), "PROCESSING", 0, None)


@pytest.mark.parametrize(("processed", "total"), [(11, 10), (1, 0), (11, None)])
def test_processed_over_total_refused(processed: int, total: int | None) -> None:
    current = at(2, 5, 10) if total is None else at(2, 0, None)
    with pytest.raises(InvalidArgument) as info:
        apply_report(PLAN, current, "PROCESSING", processed, total)
    assert info.value.code == "INVALID_ARGUMENT"
    assert info.value.field == "processed_units"


def test_processed_over_total_refused_on_new_stage() -> None:
    with pytest.raises(InvalidArgument):
        apply_report(PLAN, at(1, 0, None), "PROCESSING", 11, 10)


def test_total_learned_below_already_processed_refused() -> None:
    with pytest.raises(InvalidArgument):
        apply_report(PLAN, at(2, 8, None), "PROCESSING", 8, 5)


@pytest.mark.parametrize(
    ("processed", "total", "field"),
    [
        (-1, None, "processed_units"),
        (-1, 10, "processed_units"),
        (0, -1, "total_units"),
        (5, -10, "total_units"),
    ],
)
def test_negative_numbers_refused(processed: int, total: int | None, field: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        apply_report(PLAN, at(1), "PREPARING", processed, total)
    assert info.value.code == "INVALID_ARGUMENT"
    assert info.value.field == field


@pytest.mark.parametrize("code", ["UNKNOWN", "preparing", "", "PREPARING ", "Processing"])
def test_unknown_stage_code_refused(code: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        apply_report(PLAN, at(1), code, 0, None)
    assert info.value.code == "INVALID_ARGUMENT"
    assert info.value.field == "stage"


def test_changed_total_refused() -> None:
    with pytest.raises(TotalChanged) as info:
        apply_report(PLAN, at(2, 3, 10), "PROCESSING", 4, 12)
    assert info.value.reason == "TOTAL_CHANGED"
    assert info.value.code == "FAILED_PRECONDITION"


def test_changed_total_refused_even_downward() -> None:
    with pytest.raises(TotalChanged):
        apply_report(PLAN, at(2, 3, 10), "PROCESSING", 4, 9)


def test_total_cannot_be_unset_then_changed() -> None:
    # omitting the total keeps it; a later different total is still refused
    p = apply_report(PLAN, at(2, 3, 10), "PROCESSING", 4, None)
    with pytest.raises(TotalChanged):
        apply_report(PLAN, p, "PROCESSING", 5, 11)


def test_total_from_known_to_zero_refused() -> None:
    with pytest.raises(TotalChanged):
        apply_report(PLAN, at(2, 0, 10), "PROCESSING", 0, 0)


# ---------------------------------------------------------------- property: random sequences


def _violations(current: Progress, stage: str, processed: int, total: int | None) -> set[type]:
    """An independent model of the progress rules: the set of error types this report deserves."""
    found: set[type] = set()
    if processed < 0 or (total is not None and total < 0):
        found.add(InvalidArgument)
    if stage not in CODES:
        found.add(InvalidArgument)
        return found
    index = CODES.index(stage) + 1
    if index < current.stage_index:
        found.add(ProgressRegression)
        return found
    if index == current.stage_index:
        if processed < current.processed_units:
            found.add(ProgressRegression)
        known = current.total_units
        if known is not None and total is not None and total != known:
            found.add(TotalChanged)
        effective = total if total is not None else known
    else:
        effective = total
    if effective is not None and processed > effective:
        found.add(InvalidArgument)
    return found


def _random_report(rng: random.Random, current: Progress) -> tuple[str, int, int | None]:
    roll = rng.random()
    if roll < 0.05:
        stage = rng.choice(["NOPE", "preparing", ""])
    elif roll < 0.75 and current.stage_index:
        stage = CODES[current.stage_index - 1]
    elif roll < 0.92:
        stage = CODES[min(current.stage_index, len(CODES) - 1)]
    else:
        stage = rng.choice(CODES)
    base = current.processed_units
    processed = max(-2, base + rng.randint(-3, 6))
    t = rng.random()
    if t < 0.45:
        total = None
    elif t < 0.75 and current.total_units is not None:
        total = current.total_units
    else:
        total = rng.randint(-1, base + 12)
    return stage, processed, total


@pytest.mark.parametrize("seed", range(40))
def test_any_accepted_sequence_is_monotone(seed: int) -> None:
    """Property (plain stdlib, hypothesis is not installed): seeded random report sequences.

    Every report is checked against the independent model `_violations`; every accepted
    sequence is monotone. Each seed runs several attempts (a new attempt starts fresh).
    """
    rng = random.Random(seed)
    accepted = 0
    for _attempt in range(6):
        current = FRESH
        history: list[Progress] = [current]
        for _ in range(60):
            stage, processed, total = _random_report(rng, current)
            expected_errors = _violations(current, stage, processed, total)
            try:
                nxt = apply_report(PLAN, current, stage, processed, total)
            except JobwireError as exc:
                assert expected_errors, f"refused a valid report {stage, processed, total} at {current}: {exc}"
                assert type(exc) in expected_errors, (
                    stage,
                    processed,
                    total,
                    current,
                    exc,
                )
                continue
            assert not expected_errors, f"accepted an invalid report {stage, processed, total} at {current}"
            accepted += 1
            # stage never goes back; within a stage units never go back, total fixed once known
            assert nxt.stage_index >= current.stage_index
            if nxt.stage_index == current.stage_index:
                assert nxt.processed_units >= current.processed_units
                if current.total_units is not None:
                    assert nxt.total_units == current.total_units
            assert nxt.stage_count == len(PLAN)
            assert nxt.processed_units >= 0
            if nxt.total_units is not None:
                assert 0 <= nxt.processed_units <= nxt.total_units
            if nxt.percent is not None:
                assert nxt.total_units and 0 <= nxt.percent <= 100
                assert nxt.percent == min(100, nxt.processed_units * 100 // nxt.total_units)
            else:
                assert not nxt.total_units
            history.append(nxt)
            current = nxt
        # the (stage_index, processed-in-stage) sequence is lexicographically non-decreasing
        keys = [(p.stage_index, p.processed_units) for p in history]
        assert keys == sorted(keys)
        percents = [(p.stage_index, p.percent) for p in history if p.percent is not None]
        for (s1, p1), (s2, p2) in itertools.pairwise(percents):
            if s1 == s2:
                assert p2 >= p1
    assert accepted > 0
