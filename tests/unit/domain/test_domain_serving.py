"""The NO_WORKER rule on values: when a kind of job counts as served."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from jobwire.domain.serving import last_asked, unserved

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
LIMIT = timedelta(seconds=300)


def test_a_kind_never_claimed_for_is_unserved() -> None:
    assert unserved(None, NOW, LIMIT)
    assert last_asked(None, None) == "never"


def test_a_claim_within_the_limit_serves_it_and_one_at_the_limit_no_longer_does() -> None:
    assert not unserved(NOW - timedelta(seconds=299), NOW, LIMIT)
    assert unserved(NOW - LIMIT, NOW, LIMIT)
    assert unserved(NOW - timedelta(hours=1), NOW, LIMIT)


def test_an_operator_reads_when_and_how_long_ago() -> None:
    then = datetime(2026, 12, 1, 11, 53, 20)
    assert last_asked(then, 400.4) == "2026-12-01 11:53:20 (400s ago)"
