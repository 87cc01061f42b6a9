"""Progress is a fact: it never goes back and shows a percent only with a known total."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from jobwire.domain.errors import InvalidArgument, ProgressRegression, TotalChanged
from jobwire.domain.stages import StageDef, index_of


@dataclass(frozen=True, kw_only=True)
class Progress:
    stage_index: int  # 1-based; 0 before the first claim
    stage_count: int
    processed_units: int = 0
    total_units: int | None = None

    @property
    def percent(self) -> int | None:
        if self.total_units is None or self.total_units <= 0:
            return None
        return min(100, self.processed_units * 100 // self.total_units)


def moved(before: Progress, after: Progress) -> bool:
    """Progress moved: a new stage, or new units in the stage (a total learned or a heartbeat is no progress)."""
    return after.stage_index != before.stage_index or after.processed_units != before.processed_units


def apply_report(
    plan: Sequence[StageDef],
    current: Progress,
    stage: str,
    processed: int,
    total: int | None,
) -> Progress:
    """The progress after a worker's report, or an error that leaves the job as it was."""
    if processed < 0:
        raise InvalidArgument("processed_units", "must not be negative")
    if total is not None and total < 0:
        raise InvalidArgument("total_units", "must not be negative")
    index = index_of(plan, stage)
    if index < current.stage_index:
        raise ProgressRegression(f"stage {stage} is behind the current stage")
    if index > current.stage_index:
        effective_total = total
    else:
        if processed < current.processed_units:
            raise ProgressRegression("processed_units went back")
        effective_total = _keep_total(current.total_units, total)
    if effective_total is not None and processed > effective_total:
        raise InvalidArgument("processed_units", "must not exceed total_units")
    return Progress(
        stage_index=index,
        stage_count=len(plan),
        processed_units=processed,
        total_units=effective_total,
    )


def _keep_total(known: int | None, reported: int | None) -> int | None:
    # The total may become known once per stage; after that it is fixed.
    if known is None or reported is None:
        return known if reported is None else reported
    if known != reported:
        raise TotalChanged(f"the stage total is {known}, not {reported}")
    return known
