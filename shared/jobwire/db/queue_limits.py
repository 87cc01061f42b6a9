"""Queue limits in the store: set and read by operators, enforced inside each claim's transaction.

A claim of a limited queue locks the queue's `queue_limits` row (FOR UPDATE on MySQL; SQLite's
writers hold the whole database), counts the queue's leased jobs on the claim index, refills
the token bucket by the database clock, takes no more than both allow, and writes the bucket
back with the leases. Claims on every replica and process queue up on that one row, so no
number of them can lease past the limit.

A queue without limits has no row, and its claims must not pay for the feature: no statement
of their own. The claim SELECT says, per candidate, whether its queue has a limits row (a
primary-key probe inside that statement); a process locks first the queues it has seen
limited (jobwire.process_state.limited_queues), and any other that turns out limited after
its scan.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from jobwire.db.reads import clock
from jobwire.db.sql import Lock, RowShape
from jobwire.db.tables import job, queue_limits
from jobwire.db.wire import Statement, Wire
from jobwire.db.writer import RetryTransaction
from jobwire.domain.commands import may_act_for
from jobwire.domain.flow import Bucket, Held, QueueLimits, next_token_s
from jobwire.domain.states import LEASED
from jobwire.process_state.limited_queues import LimitedQueues

_LEASED = ", ".join(f"'{s.value}'" for s in sorted(LEASED, key=lambda s: s.value))
_LIMIT_COLUMNS = ("max_running", "rate_per_second", "burst", "paused", "tokens", "refilled_at")


@dataclass
class Budget:
    """What one limited queue may still lease in this transaction."""

    limits: QueueLimits
    tokens: float  # the bucket at `now` (unused without a rate)
    allowed: int
    used: int = 0

    @property
    def left(self) -> int:
        return self.allowed - self.used

    @property
    def held(self) -> Held | None:
        if self.limits.paused:
            return Held.PAUSED
        return Held.AT_LIMIT if self.left <= 0 else None

    def retry_after_s(self) -> float | None:
        """When a claim held back by the rate may find a token; None: when woken (paused, or at max_running)."""
        tokens = self.tokens - self.used
        if self.limits.paused or not self.limits.rate_per_second or tokens >= 1:
            return None
        return next_token_s(tokens, self.limits)


class Budgets:
    """The limited queues one claim transaction touched, locked, and what each may still lease."""

    def __init__(self, limited: LimitedQueues, now: datetime) -> None:
        self.limited = limited
        self._now = now
        self._by: dict[tuple[str, str], Budget | None] = {}

    async def lock(self, wire: Wire, tenant: str, queues: Iterable[str]) -> None:
        """Lock the limits of `queues` not locked yet, in name order (claims that lock in one order never deadlock)."""
        for queue in sorted(set(queues)):
            if (tenant, queue) not in self._by:
                budget = await _budget(wire, tenant, queue, self._now)
                self._by[tenant, queue] = budget
                self.limited.learn(tenant, queue, budget is not None)

    def locked(self, tenant: str, queue: str) -> bool:
        return (tenant, queue) in self._by

    def left(self, tenant: str, queue: str) -> int | None:
        """How many more jobs `queue` may lease in this transaction; None: no limit."""
        budget = self._by.get((tenant, queue))
        return None if budget is None else max(budget.left, 0)

    def take(self, rows: Sequence[dict[str, Any]]) -> None:
        for row in rows:
            budget = self._by.get((row["tenant"], row["queue"]))
            if budget is not None:
                budget.used += 1

    def held(self, tenant: str, queues: Iterable[str]) -> dict[str, Budget]:
        """The queues of `queues` that can lease no more now, with their budgets (a shared
        fleet's, EVERY_TENANT: a held tenant's queue, the one whose next token comes first)."""
        wanted = set(queues)
        out: dict[str, Budget] = {}
        for (owner, queue), budget in self._by.items():
            if budget is None or budget.held is None or queue not in wanted or not may_act_for(tenant, owner):
                continue
            if queue not in out or _sooner(budget, out[queue]):
                out[queue] = budget
        return out

    def spent(self, wire: Wire) -> list[Statement]:
        """The buckets written back: tokens left now, for every rate-limited queue that leased."""
        sql = wire.sql.dialect.text(
            "UPDATE queue_limits SET tokens = :tokens, refilled_at = :refilled_at"
            " WHERE tenant = :tenant AND queue = :queue"
        )
        return [
            (sql, {"tokens": b.tokens - b.used, "refilled_at": self._now, "tenant": tenant, "queue": queue})
            for (tenant, queue), b in sorted(self._by.items())
            if b is not None and b.used and b.limits.rate_per_second
        ]


async def _budget(wire: Wire, tenant: str, queue: str, now: datetime) -> Budget | None:
    d = wire.sql.dialect
    key = {"tenant": tenant, "queue": queue}
    found = await wire.fetch(
        d.text(
            f"SELECT {', '.join(_LIMIT_COLUMNS)} FROM queue_limits WHERE tenant = :tenant AND queue = :queue"
            + (Lock.UPDATE if d.locks else "")
        ),
        key,
        RowShape([], _LIMIT_COLUMNS, d),
    )
    if not found:
        return None  # removed since this process last looked
    row = found[0]
    limits = _limits(row)
    bucket = Bucket(tokens=float(row["tokens"]), refilled_at=_time(row["refilled_at"]))
    tokens = bucket.at(now, limits) if limits.rate_per_second else 0.0
    allowed = 0 if limits.paused else 1 << 30
    if limits.rate_per_second:
        allowed = min(allowed, math.floor(tokens))
    if limits.max_running and allowed:
        # Leased jobs of the queue, on the claim index (tenant, queue, status ...).
        counted = await wire.fetch(
            d.text(
                f"SELECT COUNT(*) AS n FROM job WHERE tenant = :tenant AND queue = :queue AND status IN ({_LEASED})"
            ),
            key,
            RowShape([], ["n"], d),
        )
        allowed = min(allowed, limits.max_running - int(counted[0]["n"]))
    return Budget(limits=limits, tokens=tokens, allowed=max(allowed, 0))


def _sooner(budget: Budget, than: Budget) -> bool:
    mine, theirs = budget.retry_after_s(), than.retry_after_s()
    return mine is not None and (theirs is None or mine < theirs)


def _limits(row: dict[str, Any]) -> QueueLimits:
    return QueueLimits(
        max_running=int(row["max_running"]),
        rate_per_second=float(row["rate_per_second"]),
        burst=int(row["burst"]),
        paused=bool(row["paused"]),
    )


def _time(value: Any) -> datetime:
    return value if isinstance(value, datetime) else datetime.fromisoformat(value)


# -- what operators do (AdminService), on the cold path ------------------------------------


def get(conn: Connection, tenant: str, queue: str) -> QueueLimits:
    row = conn.execute(_where(sa.select(queue_limits), tenant, queue)).mappings().first()
    return QueueLimits() if row is None else _limits(dict(row))


def every(conn: Connection, tenant: str, queues: Sequence[str]) -> dict[str, QueueLimits]:
    """The limits of those of `queues` that have any (a queue without a row has none)."""
    query = sa.select(queue_limits).where(queue_limits.c.tenant == tenant, queue_limits.c.queue.in_(list(queues)))
    return {row["queue"]: _limits(dict(row)) for row in conn.execute(query).mappings()}


def put(
    conn: Connection, tenant: str, queue: str, now: datetime, change: Callable[[QueueLimits], QueueLimits]
) -> QueueLimits:
    """Change a queue's limits (or pause) and keep its bucket; a queue left without any loses its row."""
    row = conn.execute(_where(sa.select(queue_limits), tenant, queue).with_for_update()).mappings().first()
    before = QueueLimits() if row is None else _limits(dict(row))
    after = change(before)
    if after.none:
        if row is not None:
            conn.execute(_where(sa.delete(queue_limits), tenant, queue))
        return after
    values: dict[str, Any] = {
        "max_running": after.max_running,
        "rate_per_second": after.rate_per_second,
        "burst": after.burst,
        "paused": after.paused,
    }
    if row is None:
        # A new bucket starts full: the first `burst` jobs start at once.
        try:
            conn.execute(sa.insert(queue_limits).values(
                tenant=tenant, queue=queue, tokens=float(after.bucket_size), refilled_at=now, **values
            ))  # fmt: skip
        except IntegrityError:
            raise RetryTransaction() from None  # another call made the row first: decide again on it
    else:
        bucket = Bucket(tokens=float(row["tokens"]), refilled_at=_time(row["refilled_at"]))
        tokens = bucket.at(now, after) if after.rate_per_second else float(after.bucket_size)
        conn.execute(_where(sa.update(queue_limits), tenant, queue).values(tokens=tokens, refilled_at=now, **values))
    return after


def holds(conn: Connection, tenant: str, queues: Iterable[str]) -> dict[str, Held]:
    """Which of `queues` lease nothing now, and why (a waiting job's view): a lookup per page, not per job."""
    names = sorted(set(queues))
    if not names:
        return {}
    rows = [dict(r) for r in conn.execute(
        sa.select(queue_limits).where(queue_limits.c.tenant == tenant, queue_limits.c.queue.in_(names))
    ).mappings()]  # fmt: skip
    counted = [r["queue"] for r in rows if r["max_running"] and not r["paused"]]
    running: dict[str, int] = {}
    if counted:
        query = (
            sa.select(job.c.queue, sa.func.count())
            .where(job.c.tenant == tenant, job.c.queue.in_(counted), job.c.status.in_([s.value for s in LEASED]))
            .group_by(job.c.queue)
        )
        running = {queue: int(n) for queue, n in conn.execute(query)}
    now = clock(conn)
    out = {}
    for row in rows:
        limits = _limits(row)
        if limits.paused:
            out[row["queue"]] = Held.PAUSED
        elif limits.max_running and running.get(row["queue"], 0) >= limits.max_running:
            out[row["queue"]] = Held.AT_LIMIT
        elif limits.rate_per_second:
            bucket = Bucket(tokens=float(row["tokens"]), refilled_at=_time(row["refilled_at"]))
            if bucket.at(now, limits) < 1:
                out[row["queue"]] = Held.AT_LIMIT
    return out


def _where(statement: Any, tenant: str, queue: str) -> Any:
    return statement.where(queue_limits.c.tenant == tenant, queue_limits.c.queue == queue)
