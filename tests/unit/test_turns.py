"""Whose turn it is (jobwire.process_state.turns): the tenants a shared fleet's claims take turns between."""

from __future__ import annotations

from jobwire.process_state.turns import Turns

TYPES = ("frames",)


def names(turns: Turns, queue: str = "q", types: tuple[str, ...] = TYPES) -> list[str]:
    return [tenant for tenant, _ in turns.order(queue, types)]


def test_turns_start_after_the_tenant_served_last() -> None:
    turns = Turns()
    turns.listed("q", TYPES, ["b", "a", "c"])
    assert names(turns) == ["a", "b", "c"]
    turns.served("q", "b")
    assert names(turns) == ["c", "a", "b"]
    turns.served("q", "c")
    assert names(turns) == ["a", "b", "c"]


def test_a_queue_nobody_listed_hears_nothing_and_is_due() -> None:
    turns = Turns()
    turns.heard("a", "q", "frames")
    assert names(turns) == [] and turns.due("q")
    turns.listed("q", TYPES, [])
    assert not turns.due("q")
    turns.heard("a", "q", "frames")
    assert names(turns) == ["a"]


def test_a_tenant_found_empty_is_forgotten_unless_news_came_since() -> None:
    turns = Turns()
    turns.listed("q", TYPES, ["a", "b"])
    seen = dict(turns.order("q", TYPES))
    turns.heard("a", "q", "frames")  # a submit while the claim scanned
    turns.forget("q", "a", seen["a"])
    turns.forget("q", "b", seen["b"])
    assert names(turns) == ["a"]


def test_only_tenants_with_jobs_of_the_claims_types_take_turns() -> None:
    turns = Turns()
    turns.listed("q", ("mail",), ["a"])
    turns.heard("b", "q", "frames")
    assert names(turns, types=("frames",)) == ["b"]
    assert names(turns, types=("frames", "mail")) == ["a", "b"]
    assert names(turns, queue="other") == []
