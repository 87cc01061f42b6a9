"""Wire messages <-> domain values that both ends of the worker protocol read the same way.

The worker service decodes the stage plan a worker claims with and encodes the plan a lease
carries; the worker SDK does the reverse. Both convert here, so the two ends cannot drift.
Stands on jobwire.domain and jobwire.v1 only: the SDK may not import the server's rpc layer.
"""

from __future__ import annotations

from collections.abc import Iterable

from jobwire.domain.stages import StageDef
from jobwire.v1 import worker_pb2


def stages_from_proto(defs: Iterable[worker_pb2.StageDef]) -> tuple[StageDef, ...]:
    return tuple(StageDef(code=d.code, labels=dict(d.labels), cancellable=d.cancellable) for d in defs)


def stages_to_proto(plan: Iterable[StageDef]) -> list[worker_pb2.StageDef]:
    return [worker_pb2.StageDef(code=s.code, labels=dict(s.labels), cancellable=s.cancellable) for s in plan]
