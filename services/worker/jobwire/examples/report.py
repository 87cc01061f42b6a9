"""``report``: wait on an external report engine of unknown duration, then render its data.

Nobody knows how long the engine takes or how many records it returns, so every stage
reports records seen so far with no total: users see stages and "N done", never a percent.

Payload (JSON, all optional): ``seconds`` the engine runs (default: 2 to 6, unknown to
the handler), ``timeout_s`` (default 60: TIMEOUT, retryable), ``fail`` (the engine exits
with an error: DEPENDENCY_FAILED, retryable).
"""

from __future__ import annotations

import csv
import html
import random
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

from jobwire.worker.sdk import DependencyFailed, Handlers, InputInvalid, JobContext, Result, StageDef, TimedOut

handlers = Handlers()
POLL_S = 0.2
STAGES = [
    StageDef(code="QUERYING", labels={"en": "Waiting for the report service", "zh-CN": "正在等待报表服务"}),
    StageDef(code="RENDERING", labels={"en": "Rendering the report", "zh-CN": "正在生成报表"}),
    StageDef(code="DELIVERING", labels={"en": "Delivering result", "zh-CN": "正在提交结果"}, cancellable=False),
]

# The "external service": a separate process that streams records for a while.
ENGINE = """
import random, sys, time
out, seconds, fail = sys.argv[1], float(sys.argv[2]), sys.argv[3] == "1"
regions = ["north", "south", "east", "west"]
end = time.monotonic() + seconds
with open(out, "w", buffering=1) as f:
    f.write("region,amount_cents\\n")
    while time.monotonic() < end:
        f.write(f"{random.choice(regions)},{random.randint(100, 99_999)}\\n")
        time.sleep(random.uniform(0.001, 0.02))
sys.exit(3 if fail else 0)
"""


@handlers.job("report", stages=STAGES)
def build_report(ctx: JobContext) -> Result:
    seconds, timeout_s, fail = _params(ctx)
    raw = ctx.tmp_dir / "raw.csv"
    records = _query(ctx, raw, seconds, timeout_s, fail)
    ctx.stage("RENDERING")
    page = _render(ctx, raw)
    return Result.from_file(page, content_type="text/html", summary=f"sales report of {records} records")


def _params(ctx: JobContext) -> tuple[float, float, bool]:
    params = ctx.json()
    if not isinstance(params, dict):
        raise InputInvalid("the payload must be a JSON object")
    try:
        seconds = float(params.get("seconds", random.uniform(2, 6)))
        timeout_s = float(params.get("timeout_s", 60))
    except (TypeError, ValueError) as exc:
        raise InputInvalid("seconds and timeout_s must be numbers") from exc
    if not 0 <= seconds <= 3600 or timeout_s <= 0:
        raise InputInvalid("seconds must be 0 to 3600 and timeout_s positive")
    return seconds, timeout_s, bool(params.get("fail", False))


def _query(ctx: JobContext, raw: Path, seconds: float, timeout_s: float, fail: bool) -> int:
    """Run the engine, reporting records received so far (no total) until it exits."""
    args = [sys.executable, "-c", ENGINE, str(raw), str(seconds), "1" if fail else "0"]
    engine = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    started = time.monotonic()
    try:
        while engine.poll() is None:
            if time.monotonic() - started > timeout_s:
                raise TimedOut("the report service did not answer in time")
            ctx.progress(_records(raw))
            ctx.sleep(POLL_S)  # a safe point: cancel or shutdown stops the engine below
    finally:
        if engine.poll() is None:
            engine.kill()
            engine.wait()
    if engine.returncode != 0:
        raise DependencyFailed("the report service failed")
    records = _records(raw)
    ctx.progress(records)
    return records


def _records(raw: Path) -> int:
    try:
        with raw.open("rb") as handle:
            return max(0, sum(1 for line in handle if line.endswith(b"\n")) - 1)
    except FileNotFoundError:
        return 0


def _render(ctx: JobContext, raw: Path) -> Path:
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    with raw.open(newline="") as handle:
        for done, record in enumerate(csv.DictReader(handle), start=1):
            entry = totals[record["region"]]
            entry[0] += 1
            entry[1] += int(record["amount_cents"])
            if done % 500 == 0:
                ctx.check()
                ctx.progress(done)
    rows = "".join(
        f"<tr><td>{html.escape(region)}</td><td>{n}</td><td>{cents / 100:,.2f}</td></tr>"
        for region, (n, cents) in sorted(totals.items())
    )
    page = ctx.tmp_dir / "report.html"
    page.write_text(
        "<!doctype html><meta charset=utf-8><title>Sales report</title>"
        f"<h1>Sales report</h1><table><tr><th>Region</th><th>Records</th><th>Amount</th></tr>{rows}</table>\n"
    )
    ctx.progress(sum(n for n, _ in totals.values()))
    return page
