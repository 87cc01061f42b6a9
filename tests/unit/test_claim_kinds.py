"""The queue and job type pairs a process records for NO_WORKER, per tenant (jobwire.process_state.claim_kinds)."""

from __future__ import annotations

from jobwire.process_state.claim_kinds import ClaimKinds


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def kinds(clock: Clock, told: list[tuple[str, int]]) -> ClaimKinds:
    return ClaimKinds(every_s=5, keep_s=100, per_tenant=3, full=lambda *said: told.append(said), clock=clock)


def test_a_tenant_past_its_bound_records_no_new_pair_but_keeps_its_own_fresh() -> None:
    clock, told = Clock(), []
    claimed = kinds(clock, told)
    assert claimed.due("a", ["q"], ["x", "y"]) == [("q", "x"), ("q", "y")]
    assert claimed.due("a", ["q"], ["x", "y", "z", "new"]) == [("q", "z")]  # "new" is past the bound
    assert told == [("a", 3)]
    assert claimed.due("a", ["q"], ["more"]) == [] and told == [("a", 3)]  # said once
    assert claimed.due("b", ["q"], ["x"]) == [("q", "x")]  # each tenant its own bound
    clock.now = 6
    assert claimed.due("a", ["q"], ["x", "new"]) == [("q", "x")]  # a recorded pair is written again in time


def test_pairs_not_recorded_for_the_rows_retention_give_their_place_back() -> None:
    clock, told = Clock(), []
    claimed = kinds(clock, told)
    claimed.due("a", ["q"], ["x", "y", "z"])
    clock.now = 50
    claimed.due("a", ["q"], ["z"])
    clock.now = 120  # x and y last recorded 120 s ago: purged from the table by now; z 70 s ago
    assert claimed.due("a", ["q"], ["new", "newer", "newest"]) == [("q", "new"), ("q", "newer")]
    assert told == [("a", 3)]
    clock.now = 200  # z's place is free again
    assert claimed.due("a", ["q"], ["newest", "again"]) == [("q", "newest")]
    assert told == [("a", 3), ("a", 3)]  # said again: the tenant had room in between
