"""Whose turn it is: the tenants a shared fleet's claims take turns between, queue by queue.

A shared fleet's worker (auth file `tenant = "*"`, jobwire.domain.commands.EVERY_TENANT)
serves its queue names for every tenant. Its claims take jobs round-robin across the
tenants with runnable jobs, then by priority and age inside each tenant, so a tenant that
submits 100,000 jobs does not put another tenant's single job behind them all.

Which tenants have runnable jobs costs a claim no statement of its own:
- news of a runnable job (a submit here, a sibling's relay, the event tail: whatever wakes
  a waiting claim, jobwire.runtime.wakeup) names its tenant (`heard`);
- a claim whose scan of a tenant finds nothing forgets it, unless news of it came after
  the claim read the turns (each key counts its news; `forget` compares the counts);
- before a queue's first shared claim, and every REFRESH_S after, a read of its own lists
  the tenants again with a skip scan on the claim index (one short statement per tenant
  that has jobs at all, outside any claim's transaction), for what no news announced here:
  jobs made before this process started, a tenant forgotten by a scan that raced a submit.
  News covers the rest within a second (the event tail polls at least that often), so the
  listing is a safety net, as often as a waiting claim's own safety poll.
The cursor is per queue and per process: the tenant served last; the next claim starts
after it. Two processes keep their own cursors, so turns are fair within each.

The listing is jobwire.db.runnable_tenants. The claim SELECT itself is the one every claim
runs (jobwire.db.sql.claim), once per tenant visited; a claim visits at most as many tenants with jobs as it wants jobs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Collection
from dataclasses import dataclass, field

REFRESH_S = 30.0


@dataclass
class _Queue:
    # (tenant, job type) -> how much news of it came; a tenant is known while it has a key here.
    news: dict[tuple[str, str], int] = field(default_factory=dict)
    last: str | None = None  # the tenant served last
    refreshed_at: float = float("-inf")


class Turns:
    """Per process: the tenants with runnable jobs per queue, and whose turn is next."""

    def __init__(self) -> None:
        # Listing (`listed`, a read) runs on database threads; news and claims run on the event loop.
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
