"""jobctl batch: submit a file of jobs as one batch, show it, watch it drain, cancel the rest."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from jobwire.client import render, views
from jobwire.client.commands import EXIT_OK, Context, UsageError
from jobwire.client.jobs import JobClient
from jobwire.client.live import plain_line

# What a line of a batch file may say: `submit`'s arguments that a file can hold.
LINE_KEYS = frozenset({
    "job_type", "payload", "queue", "priority", "owner", "labels", "locale", "max_attempts", "on_lease_lost",
    "depends_on", "title",
})  # fmt: skip


def read_lines(path: str) -> list[dict[str, Any]]:
    """A batch file: one JSON object per line (blank lines skipped), each a job."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise UsageError(f"cannot read {path}: {error.strerror}") from None
    jobs = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            job = json.loads(line)
        except json.JSONDecodeError as error:
            raise UsageError(f"{path}:{number}: not JSON ({error.msg})") from None
        if not isinstance(job, dict) or "job_type" not in job or not set(job) <= LINE_KEYS:
            keys = ", ".join(sorted(LINE_KEYS))
            raise UsageError(f"{path}:{number}: a job is an object with job_type and any of: {keys}")
        jobs.append(job)
    return jobs


def cmd_batch_submit(ctx: Context, args: argparse.Namespace) -> int:
    lines = read_lines(args.file)
    with ctx.jobs() as client:
        made = client.submit_batch(
            [client.submit_request(**line) for line in lines], idempotency_key=args.idempotency_key
        )
        if ctx.as_json:
            ctx.emit(render.to_json(made.raw))
        else:
            # jobs_omitted: a replay whose jobs no longer fit one reply lists only the first
            made_jobs = len(made.jobs) + made.jobs_omitted
            ctx.out.print(f"{made.batch_id} submitted: {made_jobs} jobs", markup=False, highlight=False)
        if args.watch:
            return _follow(ctx, client, made.batch_id)
    return EXIT_OK


def cmd_batch_get(ctx: Context, args: argparse.Namespace) -> int:
    with ctx.jobs() as client:
        _show(ctx, client.get_batch(args.batch_id))
    return EXIT_OK


def cmd_batch_cancel(ctx: Context, args: argparse.Namespace) -> int:
    with ctx.jobs() as client:
        _show(ctx, client.cancel_batch(args.batch_id))
    return EXIT_OK


def cmd_batch_watch(ctx: Context, args: argparse.Namespace) -> int:
    with ctx.jobs() as client:
        return _follow(ctx, client, args.batch_id)


def _follow(ctx: Context, client: JobClient, batch_id: str) -> int:
    """A line per change, as `jobctl watch` prints one (title first), until every job of the batch has
    ended (watch_batch ends then); then the batch."""
    try:
        for job in client.watch_batch(batch_id):
            if ctx.as_json:
                ctx.emit(render.to_json(job.raw))
            else:
                ctx.out.print(plain_line(job.raw, ctx.locale), markup=False, highlight=False)
    except KeyboardInterrupt:
        ctx.err.print("stopped watching; the batch keeps running", highlight=False)
    _show(ctx, client.get_batch(batch_id))
    return EXIT_OK


def _show(ctx: Context, batch: views.Batch) -> None:
    if ctx.as_json:
        ctx.emit(render.to_json(batch.raw))
        return
    c = batch.counts
    counts = (
        f"queued {c.queued} · running {c.running + c.cancel_requested} · waiting for review {c.waiting}"
        f" · ready {c.ready} · failed {c.failed} · cancelled {c.cancelled}"
    )
    line = f"{batch.batch_id}: {batch.finished}/{batch.total} finished ({batch.progress:.0%}) · {counts}"
    ctx.out.print(line, markup=False, highlight=False)
