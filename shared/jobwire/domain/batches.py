"""Batches: jobs submitted together, all or none, and what a batch says about its jobs.

A batch's reply carries every job it made, so it must fit one gRPC message: a batch whose
reply would not is refused before anything is written (a 4.1 MB batch once committed, then
its 4.3 MB reply failed, and every replay of its key with it). The servicer weighs each job's
reply before the store runs (`NewBatch.reply_bytes`); a replay's reply, read back from jobs
that may have grown since (results, errors), lists those that fit and counts the rest.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from jobwire.domain.commands import NewJob
from jobwire.domain.errors import ResourceExhausted
from jobwire.domain.limits import MAX_GRPC_MESSAGE_BYTES
from jobwire.domain.states import Status

# What a SubmitBatch reply may carry: the gRPC message limit, less room for its framing.
REPLY_BUDGET = MAX_GRPC_MESSAGE_BYTES - (64 << 10)


class BatchTooLarge(ResourceExhausted):
    """The batch's reply would not fit one message; split the batch."""

    reason = "BATCH_TOO_LARGE"

    def __init__(self, reply_bytes: int) -> None:
        super().__init__(
            f"the reply to this batch would be about {reply_bytes:,} bytes, over the {REPLY_BUDGET:,} one"
            " reply may carry: split the batch into smaller ones (nothing was submitted)"
        )


def new_batch_id() -> str:
    """A batch's name: random, so it says nothing about other tenants' batches."""
    return f"B-{secrets.token_hex(10)}"


@dataclass(frozen=True, kw_only=True)
class NewBatch:
    tenant: str
    batch_id: str
    jobs: Sequence[NewJob]  # each carries batch_id
    idempotency_key: str | None = None
    reply_bytes: int = 0  # what the reply listing its jobs would weigh, at most (weighed by the servicer)

    def refusal(self) -> BatchTooLarge | None:
        """Why the batch cannot be made (its reply would not fit), if it cannot; a replay is never refused."""
        return BatchTooLarge(self.reply_bytes) if self.reply_bytes > REPLY_BUDGET else None


@dataclass(frozen=True, kw_only=True)
class BatchRecord:
    batch_id: str
    tenant: str
    total: int
    created_at: datetime
    counts: Mapping[Status, int] = field(default_factory=dict)

    @property
    def finished(self) -> int:
        return sum(n for status, n in self.counts.items() if status.terminal)

    @property
    def progress(self) -> float:
        """Finished jobs over all: a job has no share of a percent a batch could honestly add up."""
        return self.finished / self.total if self.total else 1.0
