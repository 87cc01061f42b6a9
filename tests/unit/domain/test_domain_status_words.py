"""Words that name a status: every label of every locale names exactly one status, so a
person's word never selects two (jobctl list --status, the client's statuses, the pages' filter)."""

from __future__ import annotations

import pytest

from jobwire.domain.states import Status
from jobwire.domain.view import LOCALES, STATUS_LABELS, status_named


def _statuses_a_word_could_mean(word: str) -> set[Status]:
    """Every status whose name or label, in any locale, reads as `word` (any case)."""
    folded = word.casefold()
    return {
        status
        for status, labels in STATUS_LABELS.items()
        if folded == status.value.casefold() or folded in {label.casefold() for label in labels.values()}
    }


@pytest.mark.parametrize("locale", LOCALES)
@pytest.mark.parametrize("status", list(Status), ids=[s.value for s in Status])
def test_every_label_of_every_locale_names_exactly_its_own_status(status: Status, locale: str) -> None:
    label = STATUS_LABELS[status][locale]
    assert _statuses_a_word_could_mean(label) == {status}, label
    for spelled in (label, label.upper(), label.lower(), f"  {label} "):
        assert status_named(spelled) is status, spelled


@pytest.mark.parametrize("status", list(Status), ids=[s.value for s in Status])
def test_every_name_names_its_status_in_any_case(status: Status) -> None:
    assert _statuses_a_word_could_mean(status.value) == {status}
    assert status_named(status.value.lower()) is status


@pytest.mark.parametrize(
    ("word", "status"),
    [
        ("Queued", Status.QUEUED),
        ("排队中", Status.QUEUED),
        ("waiting", Status.WAITING),  # the name: no label of another status reads "Waiting" any more
        ("Waiting for review", Status.WAITING),
        ("waiting  for   REVIEW", Status.WAITING),
        ("等待审核", Status.WAITING),
    ],
)
def test_the_words_that_once_collided_now_name_one_status(word: str, status: Status) -> None:
    assert status_named(word) is status


@pytest.mark.parametrize("word", ["", "Waiting for", "STATUS_UNSPECIFIED", "等待处理", "finished"])
def test_a_word_that_names_no_status_is_none(word: str) -> None:
    assert status_named(word) is None
