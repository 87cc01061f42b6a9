"""The handler's evidence entries: written with its lease fenced, counted per attempt.

A `Record` is a worker call like a report (jobwire.db.leases): decided on the job's row,
its UPDATE guarded by token and epoch, so a token that no longer holds the lease keeps
nothing. It changes no version and no snapshot (users see nothing of it); it renews the
lease as a heartbeat would, revives a stalled one as a heartbeat does, and counts the
entries of the attempt on the row, the count itself a guard: two calls that read the same
count cannot both pass the bound.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from jobwire.db.changes import Change, JobOp, Row
from jobwire.db.lease_tokens import issued
from jobwire.db.leases import replayed
from jobwire.domain.commands import EVERY_TENANT
from jobwire.domain.evidence import EventKind
from jobwire.domain.handler_evidence import Entry, admitted
from jobwire.domain.states import Action


@dataclass(frozen=True, kw_only=True)
class Record(JobOp[int]):
    """Entries for the attempt `token` holds; the outcome is the attempt's count after them."""

    tenant: str
    job_no: str
    token: str
    entries: tuple[Entry, ...]

    def names(self, row: Row) -> bool:
        # As every lease call: a shared fleet's token tells which tenant's job of the number.
        return issued(row, self.token) if self.tenant == EVERY_TENANT else super().names(row)

    def decide(self, row: Row | None, now: datetime) -> Change:
        replayed(row, self.token)  # a record is never a replay: refused unless the lease is held
        assert row is not None
        recorded = row["recorded_entries"] if row["recorded_attempt"] == row["attempt"] else 0
        values: dict[str, object] = {
            "recorded_attempt": row["attempt"],
            "recorded_entries": admitted(recorded, len(self.entries)),
        }
        revive = bool(row["stalled"])
        if revive:
            values["stalled"] = False
        return Change(
            action=Action.HEARTBEAT, kind=EventKind.LEASE_REVIVED if revive else None, values=values, fenced=True,
            renew=True, versioned=revive, guards=(("recorded_entries", {}),), entries=self.entries,
        )  # fmt: skip

    def outcome(self, row: Row | None, change: Change | None) -> int:
        assert row is not None
        count: int = row["recorded_entries"]
        return count
