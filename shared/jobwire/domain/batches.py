"""Batches: jobs submitted together, all or none, and what a batch says about its jobs."""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from jobwire.domain.commands import NewJob
from jobwire.domain.states import Status


def new_batch_id() -> str:
    """A batch's name: random, so it says nothing about other tenants' batches."""
    return f"B-{secrets.token_hex(10)}"


@dataclass(frozen=True, kw_only=True)
class NewBatch:
    tenant: str
    batch_id: str
    jobs: Sequence[NewJob]  # each carries batch_id
    idempotency_key: str | None = None


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
