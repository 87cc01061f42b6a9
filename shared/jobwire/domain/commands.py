"""What callers ask of the store, as values: decoded and validated by a servicer, carried out by the store.

Servicers build these from requests and never import jobwire.db; the store turns them into
rows and guarded statements.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from jobwire.domain.job import ErrorCategory
from jobwire.domain.retry import RetryPolicy
from jobwire.domain.stages import StageDef
from jobwire.domain.states import Status
from jobwire.domain.timeouts import Timeouts


@dataclass(frozen=True, kw_only=True)
class NewJob:
    tenant: str
    job_type: str
    queue: str
    payload: bytes
    idempotency_key: str | None = None
    priority: int = 0
    run_after: datetime | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    timeouts: Timeouts = field(default_factory=Timeouts)
    owner: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    locale: str = "en"
    depends_on: tuple[str, ...] = ()  # job numbers of the same tenant, each once, in the order given
    batch_id: str | None = None  # set by SubmitBatch for each of its jobs
    trace_context: str | None = None  # the W3C traceparent of the submitting call, when tracing
    title: str = ""  # what a person reads as its name; empty: none given (no title is invented)

    def fingerprint(self) -> str:
        """What makes two submits with one idempotency key "the same request"."""
        h = hashlib.sha256()
        for part in (self.job_type, self.queue, str(self.priority), self.owner,
                     json.dumps(self.labels, sort_keys=True)):  # fmt: skip
            h.update(part.encode())
            h.update(b"\0")
        h.update(self.payload)
        if self.depends_on:  # only then: keys stored before dependencies existed still replay
            h.update(b"\0" + ",".join(self.depends_on).encode())
        if self.title:  # likewise: keys stored before titles existed still replay
            h.update(b"\0title\0" + self.title.encode())
        return h.hexdigest()


@dataclass(frozen=True, kw_only=True)
class Scope:
    """What one caller may see and act on: its tenant's jobs in the queues its token grants.

    A job, batch, schedule or finding outside the scope answers exactly as one that does not
    exist (NOT_FOUND, the same reason and message as another tenant's), and lists leave it
    out, so a token learns nothing of the queues it may not use.
    """

    tenant: str
    queues: frozenset[str] | None = None  # None: every queue (the auth file's ["*"])

    def sees(self, tenant: str, queue: str) -> bool:
        return tenant == self.tenant and (self.queues is None or queue in self.queues)


@dataclass(frozen=True, kw_only=True)
class JobFilter:
    scope: Scope
    owner: str = ""
    statuses: Sequence[Status] = ()
    job_type: str = ""
    assignee: str = ""  # handed to this reviewer (jobwire.domain.review)
    queue: str = ""  # one queue (the scope's queues otherwise)
    labels: Mapping[str, str] = field(default_factory=dict)  # every one of them, with its value
    batch_id: str = ""  # one batch's jobs (jobwire.domain.batches)

    @property
    def tenant(self) -> str:
        return self.scope.tenant


# The tenant of a shared fleet's worker token (auth file `tenant = "*"`): its workers serve
# their queues for every tenant, taking turns between the tenants with runnable jobs.
EVERY_TENANT = "*"


def may_act_for(caller: str, tenant: str) -> bool:
    """Whether a caller of `caller`'s tenant may act on a job of `tenant` (a shared fleet: any)."""
    return caller in (tenant, EVERY_TENANT)


@dataclass(frozen=True, kw_only=True)
class Claimant:
    tenant: str  # EVERY_TENANT: a shared fleet's worker
    worker_id: str
    queues: Sequence[str]
    plans: Mapping[str, tuple[StageDef, ...]]  # job type -> its stage plan
    lease_seconds: float

    @property
    def shared(self) -> bool:
        return self.tenant == EVERY_TENANT


@dataclass(frozen=True, kw_only=True)
class Failure:
    category: ErrorCategory
    message: str
    retryable: bool
    detail: str


@dataclass(frozen=True, kw_only=True)
class ProgressReport:
    """A worker's ReportStage: where its lease's job is now, with an optional checkpoint."""

    tenant: str
    job_no: str
    token: str
    stage: str
    processed: int
    total: int | None = None
    checkpoint: bytes | None = None
    note: str = ""
