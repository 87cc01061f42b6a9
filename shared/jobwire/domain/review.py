"""Waiting for a person: what a worker asks a reviewer, and what the reviewer decides.

A worker holding a lease hands its job to a named person with a short list of things to
look at (AwaitReview); the job waits with no lease and no clock on its attempt until a
client resolves it. APPROVE queues it again, and the next lease carries the decision;
REJECT ends it FAILED with the reviewer's note as its message.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from jobwire.domain import limits
from jobwire.domain.errors import InvalidArgument
from jobwire.domain.job import ErrorCategory, JobFailure, plain_message

MAX_ITEMS = 50
MAX_ITEM_CHARS = 500
REJECTED_MESSAGE = "A reviewer rejected the job."


class Decision(StrEnum):
    APPROVE = "APPROVE"
    REJECT = "REJECT"


@dataclass(frozen=True, kw_only=True)
class ReviewRequest:
    """Who must review the job, and what they should look at."""

    assignee: str
    items: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Review:
    """A reviewer's decision, as the next lease of an approved job carries it."""

    decision: Decision
    note: str
    resolved_by: str


def review_request(assignee: str, items: Sequence[str]) -> ReviewRequest:
    """A validated request: a required assignee name and at most MAX_ITEMS lines of plain text."""
    if not assignee:
        raise InvalidArgument("assignee", "is required")
    if len(items) > MAX_ITEMS:
        raise InvalidArgument("items", f"at most {MAX_ITEMS} items")
    return ReviewRequest(
        assignee=limits.key("assignee", assignee),
        items=tuple(limits.short_text("items", item, MAX_ITEM_CHARS) for item in items),
    )


def rejection(note: str, stage: str) -> JobFailure:
    """What the user of a rejected job is told: the reviewer's note, made plain; never retryable."""
    message = plain_message(note) if note.strip() else REJECTED_MESSAGE
    return JobFailure(category=ErrorCategory.REJECTED, stage=stage, message=message, retryable=False)


def evidence(review: Review) -> str:
    """The event detail that records who resolved the job and what they wrote."""
    return f"{review.decision.value} by {review.resolved_by}" + (f": {review.note}" if review.note else "")
