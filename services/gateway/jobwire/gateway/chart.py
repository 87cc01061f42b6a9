"""A queue's last hour by the minute, as the points of an SVG the server draws.

No script and no library: the page carries the <svg> (templates/_chart.html), and these are
only its numbers. The vertical scale runs from 0 to the busiest minute of the three series,
rounded up to a number that reads well, so the lines of one chart compare with each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from jobwire.v1 import admin_pb2

WIDTH, HEIGHT = 600, 150
LEFT, RIGHT, TOP, BOTTOM = 40, 8, 10, 22  # room for the axis labels
SERIES = ("submitted", "finished", "failed")


@dataclass(frozen=True)
class Line:
    series: str  # submitted, finished or failed: its class (colour) and its label
    points: str  # "x,y x,y ...", one per minute, oldest first
    total: int


@dataclass(frozen=True)
class Chart:
    lines: tuple[Line, ...]
    top: int  # the value at the top of the scale
    minutes: int
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    right: int = WIDTH - RIGHT
    top_y: int = TOP
    bottom_y: int = HEIGHT - BOTTOM


def nice_top(peak: int) -> int:
    """The smallest of 1, 2, 5, 10, 20, 50, ... at or above `peak` (at least 1)."""
    step = 1
    while True:
        for factor in (1, 2, 5):
            if step * factor >= peak:
                return step * factor
        step *= 10


def chart(minutes: Sequence[admin_pb2.QueueMinute]) -> Chart:
    values = {name: [getattr(m, name) for m in minutes] for name in SERIES}
    top = nice_top(max((v for series in values.values() for v in series), default=0))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    last = max(len(minutes) - 1, 1)

    def point(i: int, value: int) -> str:
        return f"{LEFT + plot_w * i / last:.1f},{TOP + plot_h * (1 - value / top):.1f}"

    lines = tuple(
        Line(name, " ".join(point(i, v) for i, v in enumerate(values[name])), sum(values[name])) for name in SERIES
    )
    return Chart(lines=lines, top=top, minutes=len(minutes))
