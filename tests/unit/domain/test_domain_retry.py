"""Retry policy: backoff growth and caps; validation names the field."""

from __future__ import annotations

import math

import pytest

from jobwire.domain.errors import InvalidArgument
from jobwire.domain.retry import (
    MAX_ATTEMPTS_LIMIT,
    MAX_BACKOFF_LIMIT_S,
    OnLeaseLost,
    RetryPolicy,
)


def test_default_policy_is_valid_and_inspects_lost_leases() -> None:
    p = RetryPolicy()
    assert p.validated() is p
    assert p.on_lease_lost is OnLeaseLost.INSPECT
    assert {m.value for m in OnLeaseLost} == {"INSPECT", "RETRY"}


@pytest.mark.parametrize(
    ("attempt", "delay"),
    [
        (1, 1.0),
        (2, 2.0),
        (3, 4.0),
        (4, 8.0),
        (8, 128.0),
        (9, 256.0),
        (10, 300.0),
        (11, 300.0),
        (50, 300.0),
    ],
)
def test_exponential_growth_then_cap(attempt: int, delay: float) -> None:
    p = RetryPolicy(initial_backoff_s=1.0, max_backoff_s=300.0, backoff_multiplier=2.0)
    assert p.backoff_after(attempt) == pytest.approx(delay)


@pytest.mark.parametrize("attempt", [0, -3])
def test_attempt_below_one_gives_initial(attempt: int) -> None:
    assert RetryPolicy(initial_backoff_s=5.0).backoff_after(attempt) == 5.0


def test_multiplier_one_is_constant() -> None:
    p = RetryPolicy(initial_backoff_s=3.0, max_backoff_s=10.0, backoff_multiplier=1.0)
    assert [p.backoff_after(a) for a in range(1, 6)] == [3.0] * 5


def test_zero_backoff() -> None:
    p = RetryPolicy(initial_backoff_s=0.0, max_backoff_s=0.0)
    assert all(p.backoff_after(a) == 0.0 for a in range(1, 20))


def test_fractional_multiplier() -> None:
    p = RetryPolicy(initial_backoff_s=1.0, max_backoff_s=100.0, backoff_multiplier=1.5)
    assert p.backoff_after(3) == pytest.approx(2.25)


def test_initial_above_max_is_capped() -> None:
    # validated() refuses this, but the arithmetic alone still honours the cap
    assert RetryPolicy(initial_backoff_s=10.0, max_backoff_s=2.0).backoff_after(1) == 2.0


@pytest.mark.parametrize("multiplier", [1.0, 1.5, 2.0, 3.0, 10.0])
def test_backoff_non_decreasing_and_capped(multiplier: float) -> None:
    p = RetryPolicy(initial_backoff_s=0.5, max_backoff_s=600.0, backoff_multiplier=multiplier).validated()
    delays = [p.backoff_after(a) for a in range(1, MAX_ATTEMPTS_LIMIT + 1)]
    assert delays == sorted(delays)
    assert all(0.5 <= d <= 600.0 for d in delays)


@pytest.mark.parametrize(("multiplier", "attempt"), [(10.0, 400), (2.0, 1100), (10.0, 10_000)])
def test_huge_attempt_numbers_stay_capped(multiplier: float, attempt: int) -> None:
    """Attempt numbers keep counting across Retry, so they can pass
    MAX_ATTEMPTS_LIMIT; the delay must stay at the cap, not raise OverflowError."""
    p = RetryPolicy(initial_backoff_s=1.0, max_backoff_s=300.0, backoff_multiplier=multiplier).validated()
    assert p.backoff_after(attempt) == 300.0


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize("n", [1, 2, MAX_ATTEMPTS_LIMIT])
def test_max_attempts_in_range(n: int) -> None:
    assert RetryPolicy(max_attempts=n).validated().max_attempts == n


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"max_attempts": 0}, "retry_policy.max_attempts"),
        ({"max_attempts": -1}, "retry_policy.max_attempts"),
        ({"max_attempts": MAX_ATTEMPTS_LIMIT + 1}, "retry_policy.max_attempts"),
        ({"initial_backoff_s": -0.1}, "retry_policy.initial_backoff"),
        (
            {
                "initial_backoff_s": MAX_BACKOFF_LIMIT_S + 1,
                "max_backoff_s": MAX_BACKOFF_LIMIT_S + 1,
            },
            "retry_policy.initial_backoff",
        ),
        ({"initial_backoff_s": math.nan}, "retry_policy.initial_backoff"),
        ({"max_backoff_s": -1.0, "initial_backoff_s": 0.0}, "retry_policy.max_backoff"),
        ({"max_backoff_s": MAX_BACKOFF_LIMIT_S + 1}, "retry_policy.max_backoff"),
        ({"max_backoff_s": math.inf}, "retry_policy.max_backoff"),
        ({"initial_backoff_s": 10.0, "max_backoff_s": 5.0}, "retry_policy.max_backoff"),
        ({"backoff_multiplier": 0.5}, "retry_policy.backoff_multiplier"),
        ({"backoff_multiplier": 0.0}, "retry_policy.backoff_multiplier"),
        ({"backoff_multiplier": 10.01}, "retry_policy.backoff_multiplier"),
        ({"backoff_multiplier": math.nan}, "retry_policy.backoff_multiplier"),
    ],
    ids=repr,
)
def test_invalid_policy_names_field(kw: dict, field: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        RetryPolicy(**kw).validated()
    assert info.value.field == field
    assert info.value.code == "INVALID_ARGUMENT"
    assert str(info.value).startswith(field + ": ")


@pytest.mark.parametrize(
    "kw",
    [
        {"initial_backoff_s": 0.0, "max_backoff_s": 0.0},
        {
            "initial_backoff_s": MAX_BACKOFF_LIMIT_S,
            "max_backoff_s": MAX_BACKOFF_LIMIT_S,
        },
        {"backoff_multiplier": 1.0},
        {"backoff_multiplier": 10.0},
        {"initial_backoff_s": 5.0, "max_backoff_s": 5.0},
    ],
    ids=repr,
)
def test_boundary_policies_valid(kw: dict) -> None:
    assert RetryPolicy(**kw).validated()
