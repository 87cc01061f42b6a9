"""`jobctl watch`'s display: a live progress line on a terminal, plain lines elsewhere.

The bar is determinate only when the stage's total is known; otherwise it pulses and no
percent is shown, because a guessed percent is a lie.
"""

from __future__ import annotations

from datetime import datetime
from types import TracebackType
from typing import Self

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from jobwire.client import render
from jobwire.client.convert import is_terminal, status_name
from jobwire.v1 import job_pb2

BAR_WIDTH = 30


def progress_bar(job: job_pb2.Job) -> ProgressBar | None:
    """A bar for a running stage: determinate with a known total, pulsing without."""
    p = job.progress
    if not job.stage or p.stage_index <= 0 or is_terminal(job):
        return None
    known = p.HasField("total_units") and p.total_units > 0
    total = float(p.total_units) if known else None
    return ProgressBar(total=total, completed=float(p.processed_units), width=BAR_WIDTH)


class _Ticking:
    """The live line, drawn afresh at each refresh so its elapsed time runs between updates."""

    def __init__(self, job: job_pb2.Job, locale: str) -> None:
        self.job, self.locale = job, locale

    def __rich__(self) -> RenderableType:
        return live_line(self.job, self.locale)


def live_line(job: job_pb2.Job, locale: str, now: datetime | None = None) -> RenderableType:
    """One job's status line for the live display, with the time since its submit."""
    head = Text.assemble(*titled(job), (job.job_no, "bold"), " ", render.status_text(job))
    span = render.elapsed(job, now)
    if span is not None:
        head.append(f"  {render.fmt_elapsed(span)}", style="dim")
    if job.attempt > 1:
        head.append(f"  attempt {job.attempt}/{job.max_attempts}", style="dim")
    row = Table.grid(padding=(0, 1))
    cells: list[RenderableType] = []
    stage = render.stage_text(job, locale) or render.queue_text(job, locale)
    if stage:
        cells.append(Text(stage))
    bar = progress_bar(job)
    if bar is not None:
        cells.append(bar)
    units = render.units_text(job.progress)
    if units and bar is not None:
        cells.append(Text(units))
    pct = render.percent(job.progress)
    if pct is not None and bar is not None:
        cells.append(Text(f"{pct:>3}%"))
    if job.stalled:
        cells.append(Text(render.word("stalled", locale), style="yellow"))
    for _ in cells:
        row.add_column(no_wrap=True)
    if cells:
        row.add_row(*cells)
    return Group(head, row)


def plain_line(job: job_pb2.Job, locale: str) -> str:
    """One job's status as a log line, for pipes and CI logs."""
    label = job.display.status_label or status_name(job.status)
    summary = render.progress_summary(job, locale)
    title = f"{job.title}  " if job.title else ""
    return f"{title}{job.job_no} {label}" + (f" · {summary}" if summary else "")


def titled(job: job_pb2.Job) -> tuple[tuple[str, str], ...]:
    """The job's title, first on its line, when it has one."""
    return ((job.title, "bold"), ("  ", "")) if job.title else ()


class WatchView:
    """Shows each update of a watched job; prints the outcome at the end.

    On a terminal: a live line with a bar. Elsewhere: one line per visible change. With
    `as_json`: one JSON object per update (NDJSON), for scripts.
    """

    def __init__(self, console: Console, *, locale: str, as_json: bool = False) -> None:
        self.console = console
        self.locale = locale
        self.as_json = as_json
        self._live: Live | None = None
        self._last_line = ""
        self._shown_end = False  # a plain line already named the terminal status

    def __enter__(self) -> Self:
        if self.console.is_terminal and not self.as_json:
            self._live = Live(console=self.console, refresh_per_second=8, transient=True)
            self._live.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def update(self, job: job_pb2.Job) -> None:
        if self.as_json:
            self._print(render.dumps(render.to_json(job)))
        elif self._live is not None:
            self._live.update(_Ticking(job, self.locale), refresh=True)
        else:
            line = plain_line(job, self.locale)
            if line != self._last_line:  # pure version bumps would repeat the same text
                self._print(line)
                self._last_line = line
                self._shown_end = is_terminal(job)

    def finish(self, job: job_pb2.Job) -> None:
        """Print the outcome: the result (uri, size, sha256) or the error and its category."""
        if self.as_json:
            return
        if not self._shown_end:  # the live line vanished on stop, or nothing was new
            self.console.print(Text.assemble(*titled(job), (job.job_no, "bold"), " ", render.status_text(job)))
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold")
        grid.add_column(overflow="fold")  # a long uri wraps; it is never cut
        span = render.elapsed(job)
        if span is not None and is_terminal(job):  # submit to end, by the server's clock
            grid.add_row("elapsed", render.fmt_elapsed(span))
        for key, value in render.outcome_rows(job):
            grid.add_row(key, value)
        if grid.row_count:
            self.console.print(grid)

    def _print(self, text: str) -> None:
        self.console.print(text, markup=False, highlight=False, soft_wrap=True)
