"""jobctl's commands: arguments, and what each one does with JobClient / AdminClient."""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import grpc
from rich.console import Console

from jobwire.client import render, views
from jobwire.client.admin import AdminClient
from jobwire.client.channel import ChannelConfig
from jobwire.client.convert import finding_kind, status_value
from jobwire.client.enums import FindingKind, JobStatus
from jobwire.client.errors import ClientError, FailedPreconditionError, NotFoundError, from_rpc_error
from jobwire.client.job_calls import Timeouts
from jobwire.client.jobs import JobClient
from jobwire.client.live import WatchView
from jobwire.client.retry import RetrySettings, Sleep
from jobwire.domain.view import STATUS_LABELS
from jobwire.v1 import job_pb2

# Error categories a worker may report as retryable (REJECTED, a person's no, never is).
_CATEGORIES = job_pb2.JobError.Category.keys()
RETRYABLE_CATEGORIES = [name for name in _CATEGORIES if name not in ("CATEGORY_UNSPECIFIED", "REJECTED")]
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_CANCELLED = 3
EXIT_REFUSED = 4
EXIT_UNAVAILABLE = 5
EXIT_INTERRUPTED = 130
EXIT_PIPE_CLOSED = 141  # 128 + SIGPIPE, as shells report it
# A watch that cannot reach jobwire says so each time and gives up after this many tries
# in a row (about a minute with the default backoff), instead of retrying silently forever.
WATCH_RECONNECTS = 12
_DELAY = re.compile(r"^(\d+(?:\.\d+)?)([smhd]?)$")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
STATUS_NAMES = (
    "QUEUED",
    "RUNNING",
    "CANCEL_REQUESTED",
    "READY",
    "FAILED",
    "CANCELLED",
    "WAITING",
)
# Inspect's kinds of finding, for --kind: every one the wire knows, so none is left unsaid.
FINDING_KINDS = tuple(kind.name for kind in FindingKind if kind is not FindingKind.KIND_UNSPECIFIED)

# What shell completion offers for --status: the names, then the words of the default locale.
STATUS_CHOICES = (*STATUS_NAMES, *(labels["en"] for labels in STATUS_LABELS.values()))

Handler = Callable[["Context", argparse.Namespace], int]


class UsageError(Exception):
    """Bad input found after parsing (an unreadable file, invalid JSON)."""


@dataclass(frozen=True, kw_only=True)
class Context:
    """What every command needs: where jobwire is, how to print, which locale."""

    config: ChannelConfig
    locale: str
    as_json: bool
    timeout: float
    out: Console
    err: Console
    sleep: Sleep = time.sleep

    def jobs(self) -> JobClient:
        retry = RetrySettings(watch_max_reconnects=WATCH_RECONNECTS)
        return JobClient(self.config, timeout=self.timeout, locale=self.locale, retry=retry, sleep=self.sleep)

    def admin(self) -> AdminClient:
        return AdminClient(self.config, timeout=self.timeout, locale=self.locale)

    def emit(self, value: Any) -> None:
        """Print JSON text as is: no markup, no wrapping, no colour."""
        self.out.print(render.dumps(value), markup=False, highlight=False, soft_wrap=True)


# ---- argument types -------------------------------------------------------------------


def label_arg(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def status_arg(text: str) -> int:
    """A status by name (QUEUED) or by the word a person sees for it in any locale (Queued, 正在处理), any case."""
    try:
        return int(status_value(text))
    except ValueError:
        names = ", ".join(STATUS_NAMES)
        raise argparse.ArgumentTypeError(f"unknown status {text!r} ({names}, or a label such as Queued)") from None


def kind_arg(text: str) -> int:
    try:
        return int(finding_kind(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"unknown finding kind {text!r} ({', '.join(FINDING_KINDS)})") from None


def count_arg(text: str) -> int:
    """A whole number, 0 or more (--limit)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative: {text!r}")
    return value


def duration_arg(text: str) -> timedelta:
    """A span of time: 90, 90s, 5m, 2h, 1d."""
    delay = _DELAY.match(text.strip())
    if delay is None:
        raise argparse.ArgumentTypeError(f"not a duration such as 90s, 5m, 2h: {text!r}")
    return timedelta(seconds=float(delay.group(1)) * _UNIT_S[delay.group(2)])


def when_arg(text: str) -> datetime:
    """An ISO 8601 moment (naive means UTC), or a delay from now: 90, 90s, 5m, 2h, 1d."""
    if _DELAY.match(text.strip()):
        return datetime.now(UTC) + duration_arg(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a time or delay: {text!r}") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def read_payload(args: argparse.Namespace) -> bytes:
    """--payload must be JSON (checked here, sent as typed); --payload-file is sent as is."""
    if args.payload is not None:
        try:
            json.loads(args.payload)
        except json.JSONDecodeError as error:
            raise UsageError(f"--payload is not valid JSON: {error}") from None
        return bytes(args.payload.encode("utf-8"))
    if args.payload_file is not None:
        if str(args.payload_file) == "-":
            return sys.stdin.buffer.read()
        try:
            return Path(args.payload_file).read_bytes()
        except OSError as error:
            raise UsageError(f"cannot read {args.payload_file}: {error.strerror}") from None
    return b""


# ---- job commands ---------------------------------------------------------------------


def cmd_submit(ctx: Context, args: argparse.Namespace) -> int:
    payload = read_payload(args)
    with ctx.jobs() as client:
        job, created = client.submit(
            args.job_type,
            payload,
            idempotency_key=args.idempotency_key,
            run_after=args.run_after,
            depends_on=args.depends_on,
            **job_options(args),
        )
        if ctx.as_json:
            ctx.emit({"job": render.to_json(job.raw), "created": created})
        else:
            verb = "submitted" if created else "already submitted (same idempotency key)"
            ctx.out.print(f"{job.job_no} {verb}", markup=False, highlight=False)
            ctx.out.print(render.job_details(job.raw, ctx.locale))
        if args.watch:
            return follow(ctx, client, job.job_no, 0)
    return EXIT_OK


def job_options(args: argparse.Namespace) -> dict[str, Any]:
    """`submit`'s arguments from the job options jobctl submit and schedule create share (cli.job_options)."""
    return {
        "queue": args.queue, "priority": args.priority, "max_attempts": args.max_attempts,
        "on_lease_lost": args.on_lease_lost, "timeouts": _timeouts(args), "owner": args.owner,
        "labels": dict(args.label), "title": args.title,
    }  # fmt: skip


def _timeouts(args: argparse.Namespace) -> Timeouts | None:
    limits = (args.attempt_timeout, args.job_timeout, args.stage_timeout, args.on_no_progress)
    if all(value is None for value in limits):
        return None  # the server's defaults
    return Timeouts(
        attempt=args.attempt_timeout, job=args.job_timeout, stage=args.stage_timeout,
        on_no_progress=args.on_no_progress or "INSPECT",
    )  # fmt: skip


def cmd_get(ctx: Context, args: argparse.Namespace) -> int:
    with ctx.jobs() as client:
        show_job(ctx, client.get(args.job_no))
    return EXIT_OK


def cmd_result(ctx: Context, args: argparse.Namespace) -> int:
    """The bytes as they arrive; to a file only once whole (a failed fetch leaves no partial FILE)."""
    with ctx.jobs() as client:
        if args.output is None:
            last = b""
            try:
                for data in client.result_chunks(args.job_no):
                    sys.stdout.buffer.write(data)
                    last = data[-1:] or last
            finally:  # what follows (the prompt, an error) on a line of its own; a pipe gets the bytes exactly
                if sys.stdout.isatty() and last not in (b"", b"\n"):
                    sys.stdout.buffer.write(b"\n")
                sys.stdout.buffer.flush()
            return EXIT_OK
        partial = args.output.with_name(args.output.name + ".part")
        try:
            with partial.open("wb") as out:
                client.result_to(args.job_no, out)
            partial.replace(args.output)
        finally:
            partial.unlink(missing_ok=True)
    return EXIT_OK


def cmd_cancel(ctx: Context, args: argparse.Namespace) -> int:
    with ctx.jobs() as client:
        show_job(ctx, client.cancel(args.job_no))
    return EXIT_OK


def cmd_retry(ctx: Context, args: argparse.Namespace) -> int:
    filters = [f"--{name}" for name in ("type", "owner", "queue", "category") if getattr(args, name)]
    if args.job_no is not None and (filters or args.dry_run):
        ctx.err.print(f"jobctl: {' '.join(filters + (['--dry-run'] if args.dry_run else []))} go with --failed")
        return EXIT_USAGE
    if args.force and args.job_no is None:
        ctx.err.print("jobctl: --force goes with one JOB_NO, not --failed: a forced retry is decided job by job")
        return EXIT_USAGE
    with ctx.jobs() as client:
        if args.job_no is not None:
            show_job(ctx, client.retry(args.job_no, force=args.force))
            return EXIT_OK
        return _retry_failed(ctx, client, args)


def _retry_failed(ctx: Context, client: JobClient, args: argparse.Namespace) -> int:
    """Every FAILED, retryable job the filters match, queued again one by one (after an outage,
    say). Listed first, then retried: a job that changed meanwhile (retried by someone else,
    deleted) is counted and skipped, never an error."""
    listed = client.list_jobs(
        owner=args.owner, statuses=[job_pb2.Job.FAILED], job_type=args.type, page_size=500, limit=None
    )
    due = [
        job
        for job in listed
        if job.error is not None
        and job.error.retryable
        and (not args.queue or job.queue == args.queue)
        and (not args.category or job.error.category.name == args.category)
    ][: args.limit]
    retried, skipped = [], []
    for job in due:
        if args.dry_run:
            retried.append(job)
            continue
        try:
            retried.append(client.retry(job.job_no))
        except (FailedPreconditionError, NotFoundError):
            skipped.append(job.job_no)  # retried, deleted or changed since it was listed
    if ctx.as_json:
        ctx.emit({"retried": [j.job_no for j in retried], "skipped": skipped, "dry_run": args.dry_run})
        return EXIT_OK
    if retried:
        ctx.out.print(render.jobs_table([job.raw for job in retried], ctx.locale))
    verb = "would retry" if args.dry_run else "retried"
    changed = f"; {len(skipped)} changed since they were listed" if skipped else ""
    ctx.out.print(f"{verb} {len(retried)} FAILED, retryable job(s){changed}")
    return EXIT_OK


def cmd_resolve(ctx: Context, args: argparse.Namespace) -> int:
    with ctx.jobs() as client:
        show_job(ctx, client.resolve(args.job_no, args.decision, note=args.note))
    return EXIT_OK


def cmd_watch(ctx: Context, args: argparse.Namespace) -> int:
    with ctx.jobs() as client:
        return follow(ctx, client, args.job_no, args.after_version)


def follow(ctx: Context, client: JobClient, job_no: str, after_version: int) -> int:
    """Show a job live until it ends; the exit code says how it ended."""
    last: views.Job | None = None
    view = WatchView(ctx.out, locale=ctx.locale, as_json=ctx.as_json)
    try:
        with view:
            for job in client.watch(job_no, max(0, after_version), on_reconnect=_say_reconnecting(ctx)):
                view.update(job.raw)
                last = job
    except KeyboardInterrupt:
        ctx.err.print(f"stopped watching; {job_no} keeps running", highlight=False)
        return EXIT_INTERRUPTED
    if last is None:  # resumed at the terminal version: nothing new to show
        last = client.get(job_no)
    view.finish(last.raw)
    return exit_code(last)


def _say_reconnecting(ctx: Context) -> Callable[[int, float, BaseException | None], None]:
    def say(failures: int, delay: float, cause: BaseException | None) -> None:
        why = "the stream ended"
        if isinstance(cause, ClientError):
            why = str(cause)
        elif isinstance(cause, grpc.RpcError):
            why = str(from_rpc_error(cause))
        ctx.err.print(
            f"lost jobwire at {ctx.config.target} ({why}); reconnecting in {delay:.1f} s "
            f"(try {failures} of {WATCH_RECONNECTS})",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )

    return say


def exit_code(job: views.Job) -> int:
    """0 READY, 1 FAILED, 3 CANCELLED (2 is argparse's usage error)."""
    if job.status == JobStatus.FAILED:
        return EXIT_FAILED
    if job.status == JobStatus.CANCELLED:
        return EXIT_CANCELLED
    return EXIT_OK


def cmd_list(ctx: Context, args: argparse.Namespace) -> int:
    with ctx.jobs() as client:
        jobs = list(
            client.list_jobs(
                owner=args.owner,
                statuses=args.status,
                job_type=args.type,
                queue=args.queue,
                assignee=args.assignee,
                page_size=min(args.limit, 500),
                limit=args.limit,
            )
        )
    if ctx.as_json:
        ctx.emit([render.to_json(job.raw) for job in jobs])
    else:
        ctx.out.print(render.jobs_table([job.raw for job in jobs], ctx.locale))
    return EXIT_OK


def show_job(ctx: Context, job: views.Job) -> None:
    if ctx.as_json:
        ctx.emit(render.to_json(job.raw))
    else:
        ctx.out.print(render.job_details(job.raw, ctx.locale))
