"""What a handler leaves for operators in its job's trail: named entries of its attempt.

A handler that calls a payment API, an OCR service or another team's endpoint records the
request's ID where an operator will look (WorkerService.RecordEvidence, `ctx.record` in the
SDK). Each entry is an evidence-only event of its own kind; users never see it. Bounded per
call, per value and per attempt, each refusal saying which bound.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from jobwire.domain import limits
from jobwire.domain.errors import EvidenceLimitReached, InvalidArgument

MAX_ENTRIES_PER_CALL = 50
MAX_ENTRIES_PER_ATTEMPT = 200
MAX_VALUE_CHARS = 1000


@dataclass(frozen=True, slots=True)
class Entry:
    key: str  # a name: [A-Za-z0-9][A-Za-z0-9_.:-]{0,63}
    value: str  # plain text


def entries(given: Iterable[tuple[str, str]]) -> tuple[Entry, ...]:
    """One call's entries, each checked, or refused naming the entry and the bound it broke."""
    found = list(given)
    if not 1 <= len(found) <= MAX_ENTRIES_PER_CALL:
        raise InvalidArgument("entries", f"1 to {MAX_ENTRIES_PER_CALL} entries per call")
    return tuple(
        Entry(
            key=limits.name(f"entries[{i}].key", key),
            value=limits.short_text(f"entries[{i}].value", value, MAX_VALUE_CHARS),
        )
        for i, (key, value) in enumerate(found)
    )


def admitted(recorded: int, adding: int) -> int:
    """The attempt's count with `adding` more entries; past the bound the whole call is refused."""
    if recorded + adding > MAX_ENTRIES_PER_ATTEMPT:
        raise EvidenceLimitReached(MAX_ENTRIES_PER_ATTEMPT, recorded)
    return recorded + adding
