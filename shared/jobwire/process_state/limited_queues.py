"""The queues this process has seen with limits (jobwire.db.queue_limits enforces them)."""

from __future__ import annotations

from collections.abc import Iterable


class LimitedQueues:
    """The queues this process has seen with limits: its claims lock their limits before they scan.

    Learned from the claims themselves: each candidate row says whether its queue has
    limits (the claim SELECT's `limited`), so knowing costs no statement. A queue that
    turns out limited is locked after its scan and its candidates trimmed, so nothing
    leases past a limit this process did not know of yet.
    """

    def __init__(self) -> None:
        self._known: set[tuple[str, str]] = set()

    def of(self, tenant: str, queues: Iterable[str]) -> list[str]:
        return sorted(q for q in set(queues) if (tenant, q) in self._known)

    def known(self, tenant: str, queue: str) -> bool:
        return (tenant, queue) in self._known

    def learn(self, tenant: str, queue: str, limited: bool) -> None:
        if limited:
            self._known.add((tenant, queue))
        else:
            self._known.discard((tenant, queue))
