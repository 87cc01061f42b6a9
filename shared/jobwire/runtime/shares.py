"""Per-tenant shares of a server's capacity: watch streams and the jobs they watch, transfers, claims.

One tenant's burst must not lock the others out (with three streams allowed, one tenant's
three WatchJobs made another's WatchStatus fail). A tenant may hold at most
capacity / min(tenants, 4) of it: half with two tenants, a quarter from four on, so a few
busy tenants still leave room. A server with one tenant (no auth file,
or an auth file naming one) gives it everything.

A holder takes as many units as it weighs: a stream of 1,000 watched jobs takes 1,000
units of the job-watch share, where a WatchStatus takes one.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Iterator

from jobwire.domain.errors import ResourceExhausted

MAX_SHARES = 4


class TenantShares:
    def __init__(self, capacity: int, tenants: int) -> None:
        self.capacity = capacity
        self.per_tenant = max(1, capacity // max(1, min(tenants, MAX_SHARES)))
        self._held: Counter[str] = Counter()
        self._total = 0

    @property
    def total(self) -> int:
        return self._total

    def held(self, tenant: str) -> int:
        return self._held[tenant]

    def take(
        self, tenant: str, full: Callable[[], ResourceExhausted] = ResourceExhausted, weight: int = 1
    ) -> Callable[[], None]:
        """`weight` units for `tenant`, and the call that gives them back (once); `full()` when they do not fit."""
        if self._total + weight > self.capacity or self._held[tenant] + weight > self.per_tenant:
            raise full()
        self._held[tenant] += weight
        self._total += weight
        given_back = False

        def give_back() -> None:
            nonlocal given_back
            if given_back:
                return
            given_back = True
            self._total -= weight
            self._held[tenant] -= weight
            if not self._held[tenant]:
                del self._held[tenant]

        return give_back

    @contextlib.contextmanager
    def hold(
        self, tenant: str, full: Callable[[], ResourceExhausted] = ResourceExhausted, weight: int = 1
    ) -> Iterator[None]:
        """`weight` units for `tenant` while the block runs; `full()` is raised when they do not fit."""
        give_back = self.take(tenant, full, weight)
        try:
            yield
        finally:
            give_back()
