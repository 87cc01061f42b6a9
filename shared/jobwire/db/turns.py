"""Whose turn it is: the tenants a shared fleet's claims take turns between, queue by queue.

A shared fleet's worker (auth file `tenant = "*"`, jobwire.domain.commands.EVERY_TENANT)
serves its queue names for every tenant. Its claims take jobs round-robin across the
tenants with runnable jobs, then by priority and age inside each tenant, so a tenant that
submits 100,000 jobs does not put another tenant's single job behind them all.

Which tenants have runnable jobs costs a claim no statement of its own:
- news of a runnable job (a submit here, a sibling's relay, the event tail: whatever wakes
  a waiting claim, jobwire.runtime.wakeup) names its tenant (`heard`);
- a claim whose scan of a tenant finds nothing forgets it, unless news of it came after
  the claim began (each key counts its news, `generation`);
- a queue's first shared claim, and one every REFRESH_S, lists the tenants again with a
  skip scan on the claim index (one short statement per tenant that has jobs at all), for
  what no news announced here: jobs made before this process started, jobs whose
  run_after came while every claim was busy.
The cursor is per queue and per process: the tenant served last; the next claim starts
after it. Two processes keep their own cursors, so turns are fair within each.

The claim SELECT itself is the one every claim runs (jobwire.db.sql.claim), once per
tenant visited; a claim visits at most as many tenants with jobs as it wants jobs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from jobwire.db.sql import RowShape
from jobwire.db.wire import Wire

REFRESH_S = 5.0
MAX_TENANTS = 10_000  # per queue: a skip scan stops there


@dataclass
class _Queue:
    # (tenant, job type) -> how much news of it came; a tenant is known while it has a key here.
    news: dict[tuple[str, str], int] = field(default_factory=dict)
    last: str | None = None  # the tenant served last
    refreshed_at: float = float("-inf")


class Turns:
    """Per process: the tenants with runnable jobs per queue, and whose turn is next."""

    def __init__(self) -> None:
        # Claims run on database threads, news arrives on the event loop.
        self._lock = threading.Lock()
        self._queues: dict[str, _Queue] = {}

    def heard(self, tenant: str, queue: str, job_type: str) -> None:
        """A job of `tenant` can run in `queue` (news that wakes claims)."""
        with self._lock:
            q = self._queues.get(queue)
            if q is not None:  # a queue no shared claim asked for yet is listed at its first claim
                q.news[tenant, job_type] = q.news.get((tenant, job_type), 0) + 1

    def due(self, queue: str) -> bool:
        """Whether the tenants of `queue` should be listed again from the database."""
        with self._lock:
            q = self._queues.get(queue)
            return q is None or time.monotonic() - q.refreshed_at >= REFRESH_S

    def listed(self, queue: str, job_types: Collection[str], tenants: Collection[str]) -> None:
        """A skip scan found runnable jobs of `job_types` for `tenants`."""
        with self._lock:
            q = self._queues.setdefault(queue, _Queue())
            q.refreshed_at = time.monotonic()
            for tenant in tenants:
                for job_type in job_types:
                    q.news.setdefault((tenant, job_type), 0)

    def order(self, queue: str, job_types: Collection[str]) -> list[tuple[str, dict[str, int]]]:
        """The tenants known to have jobs of `job_types` in `queue`, the next turn first, each
        with the news counts of its keys (`forget` compares them)."""
        with self._lock:
            q = self._queues.get(queue)
            if q is None:
                return []
            known: dict[str, dict[str, int]] = {}
            for (tenant, job_type), count in q.news.items():
                if job_type in job_types:
                    known.setdefault(tenant, {})[job_type] = count
            names = sorted(known)
            start = 0 if q.last is None else next((i for i, t in enumerate(names) if t > q.last), 0)
            return [(t, known[t]) for t in names[start:] + names[:start]]

    def forget(self, queue: str, tenant: str, seen: dict[str, int]) -> None:
        """A claim found no runnable job of `tenant` (of the job types in `seen`): forget them,
        unless news came since the claim read `seen`."""
        with self._lock:
            q = self._queues.get(queue)
            if q is None:
                return
            for job_type, count in seen.items():
                if q.news.get((tenant, job_type)) == count:
                    del q.news[tenant, job_type]

    def served(self, queue: str, tenant: str) -> None:
        """`tenant` had the last turn in `queue`."""
        with self._lock:
            q = self._queues.get(queue)
            if q is not None:
                q.last = tenant


async def list_tenants(wire: Wire, queue: str, job_types: Sequence[str]) -> list[str]:
    """The tenants with runnable jobs of `job_types` in `queue`: a skip scan, one statement per
    tenant in the job table (each two index seeks), never a scan of anyone's backlog."""
    d = wire.sql.dialect
    names = ", ".join(f":t{i}" for i in range(len(job_types)))
    sql = d.text(
        "SELECT n.tenant, EXISTS (SELECT 1 FROM job r WHERE r.tenant = n.tenant AND r.queue = :queue"
        " AND r.status = 'QUEUED' AND r.waiting_on = 0"
        f" AND r.run_after <= {d.now} AND r.job_type IN ({names})) AS runnable"
        " FROM (SELECT tenant FROM job WHERE tenant > :after ORDER BY tenant LIMIT 1) n"
    )
    shape = RowShape([], ["tenant", "runnable"], d)
    params = {"queue": queue, **{f"t{i}": name for i, name in enumerate(job_types)}}
    found, after = [], ""
    for _ in range(MAX_TENANTS):
        rows = await wire.fetch(sql, {**params, "after": after}, shape)
        if not rows:
            break
        after = rows[0]["tenant"]
        if rows[0]["runnable"]:
            found.append(after)
    return found
