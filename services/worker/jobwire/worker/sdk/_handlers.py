"""Handlers registered per job type, each with the stage plan it reports against."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from jobwire.domain import limits
from jobwire.domain.stages import StageDef, validate_plan

if TYPE_CHECKING:
    from jobwire.worker.sdk._context import JobContext
    from jobwire.worker.sdk._result import Result

SyncHandler = Callable[["JobContext"], "Result"]
AsyncHandler = Callable[["JobContext"], Awaitable["Result"]]
HandlerFn = SyncHandler | AsyncHandler
F = TypeVar("F", bound=Callable[..., object])


@dataclass(frozen=True, kw_only=True)
class HandlerSpec:
    """One registered handler: its job type, function, stage plan and calling style."""

    job_type: str
    fn: HandlerFn
    stages: tuple[StageDef, ...]
    is_async: bool


def plan_of(stages: Sequence[StageDef | str] | None) -> tuple[StageDef, ...]:
    """A validated stage plan; plain strings are stage codes with default labels."""
    defs = [StageDef(code=s) if isinstance(s, str) else s for s in stages or ()]
    return validate_plan(defs)


class Handlers:
    """The job types a worker runs, each with its handler and stage plan.

    Example:
        registry = Handlers()

        @registry.job("frames", stages=["RENDERING", "PACKAGING", "DELIVERING"])
        def render(ctx: JobContext) -> Result:
            ...

    A handler is a function taking a `JobContext` and returning a `Result`; plain
    functions run in the worker's thread pool, `async def` functions on its event loop.
    """

    def __init__(self) -> None:
        self._specs: dict[str, HandlerSpec] = {}

    def job(self, job_type: str, *, stages: Sequence[StageDef | str] | None = None) -> Callable[[F], F]:
        """Decorator registering a handler for `job_type`.

        Args:
            job_type: The job type this handler runs.
            stages: Its stage plan, first to last; None or empty means the default plan
                PREPARING, PROCESSING, VERIFYING, DELIVERING. Every stage the handler enters
                must be in it: `Worker` refuses a handler whose source names another one,
                and `ctx.stage()` raises UndeclaredStage for it.
        """

        def register(fn: F) -> F:
            self.add(job_type, fn, stages=stages)  # type: ignore[arg-type]
            return fn

        return register

    def add(self, job_type: str, fn: HandlerFn, *, stages: Sequence[StageDef | str] | None = None) -> None:
        """Register `fn` for `job_type` (the non-decorator form of `job`)."""
        limits.name("job_type", job_type)
        if job_type in self._specs:
            raise ValueError(f"a handler for {job_type!r} is already registered")
        self._specs[job_type] = HandlerSpec(
            job_type=job_type,
            fn=fn,
            stages=plan_of(stages),
            is_async=inspect.iscoroutinefunction(fn),
        )

    def include(self, other: Handlers) -> Handlers:
        """Add every handler of `other`; returns self so registries chain."""
        for spec in other:
            self.add(spec.job_type, spec.fn, stages=spec.stages)
        return self

    def get(self, job_type: str) -> HandlerSpec | None:
        return self._specs.get(job_type)

    def __getitem__(self, job_type: str) -> HandlerSpec:
        return self._specs[job_type]

    def __contains__(self, job_type: object) -> bool:
        return job_type in self._specs

    def __iter__(self) -> Iterator[HandlerSpec]:
        return iter(self._specs.values())

    def __len__(self) -> int:
        return len(self._specs)
