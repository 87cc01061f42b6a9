# PYTHON_ARGCOMPLETE_OK (argcomplete's global completion looks for this line)
"""jobctl: submit, read, watch, cancel, retry, resolve and schedule jobs; inspect, requeue, list workers, limit queues.

Usage: jobctl [--target HOST:PORT] [--token T] [--locale L] [--json] COMMAND ...

Exit codes:
    0   success; for `watch` (and `submit --watch`): the job ended READY
    1   the watched job ended FAILED
    2   usage error (bad arguments, invalid JSON, unreadable payload file)
    3   the watched job ended CANCELLED
    4   the server refused the request (NOT_FOUND, FAILED_PRECONDITION, ...)
    5   jobwire unreachable or too slow (UNAVAILABLE, DEADLINE_EXCEEDED): try again later
    130 interrupted (Ctrl-C); a watched job keeps running
    141 the output pipe closed early (`jobctl list | head`)

Shell completion (bash, zsh): eval "$(register-python-argcomplete jobctl)"
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TypeAlias

import argcomplete
import grpc
from rich.console import Console

from jobwire.client import admin_commands as a
from jobwire.client import batch_commands as b
from jobwire.client import commands as c
from jobwire.client import queue_commands as q
from jobwire.client import schedule_commands as s
from jobwire.client.channel import DEFAULT_TARGET, ChannelConfig, config_from_env
from jobwire.client.errors import ClientError
from jobwire.observe.version import add_version_flag

PIPED_WIDTH = 200
_SubParsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
_TRANSIENT = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED}


def _global_options(
    parser: argparse.ArgumentParser, env: Mapping[str, str], *, top: bool, call_timeout: bool = True
) -> None:
    # Subcommands accept the same options (`jobctl watch X --json`); there they default to
    # SUPPRESS so they only override what was given before the command name. Submit has a
    # `--timeout` of its own (`call_timeout=False`): the attempt's time limit.
    def default(value: object) -> object:
        return value if top else argparse.SUPPRESS

    from_env = config_from_env(env)
    add = parser.add_argument
    add(
        "--target",
        default=default(from_env.target),
        help=f"jobapi address (env JOBWIRE_TARGET; default {DEFAULT_TARGET})",
    )
    add(
        "--token",
        default=default(env.get("JOBWIRE_TOKEN")),
        help="bearer token (env JOBWIRE_TOKEN)",
    )
    add(
        "--locale",
        default=default(env.get("JOBWIRE_LOCALE", "en")),
        help="labels in en or zh-CN (env JOBWIRE_LOCALE; default en)",
    )
    add(
        "--json",
        action="store_true",
        default=default(False),
        help="machine-readable output (watch: one JSON object per update)",
    )
    if call_timeout:
        add("--timeout", type=float, default=default(30.0), help="seconds per call (default 30)")
    add("--tls", action="store_true", default=default(False), help="use TLS")
    add(
        "--tls-ca",
        type=Path,
        default=default(from_env.tls_ca),
        help="CA bundle to trust; implies --tls (env JOBWIRE_TLS_CA)",
    )


def job_options(p: argparse.ArgumentParser) -> None:
    """The options that describe a job: `jobctl submit`'s, and the template of `jobctl schedule create`."""
    p.add_argument("job_type", help="the handler to run, e.g. transcode")
    payload = p.add_mutually_exclusive_group()
    payload.add_argument("--payload", help="JSON payload text")
    payload.add_argument("--payload-file", help="payload file sent as is ('-' = stdin)")
    p.add_argument("--queue", default="", help="queue (default: default)")
    p.add_argument("--priority", type=int, default=0, help="higher runs first")
    p.add_argument("--owner", default="")
    p.add_argument("--title", default="", help="what a person reads as the job's name (at most 200 characters)")
    p.add_argument("--label", type=c.label_arg, action="append", default=[], metavar="KEY=VALUE", help="repeatable")
    p.add_argument("--max-attempts", type=int, default=0, help="0: the server's default")
    p.add_argument("--on-lease-lost", type=str.upper, choices=["INSPECT", "RETRY"])
    p.add_argument(
        "--timeout", dest="attempt_timeout", type=c.duration_arg, metavar="ATTEMPT",
        help="time limit of one attempt: 90s, 5m, 2h (0: none, not even the server's default)",
    )  # fmt: skip
    p.add_argument("--job-timeout", type=c.duration_arg, metavar="LIMIT", help="time limit of the whole job")
    p.add_argument("--stage-timeout", type=c.duration_arg, metavar="LIMIT", help="longest time without progress")
    p.add_argument("--on-no-progress", type=str.upper, choices=["INSPECT", "FAIL"], help="FAIL needs --stage-timeout")


def _job_commands(sub: _SubParsers, common: argparse.ArgumentParser, job_common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("submit", parents=[job_common], help="submit a job")
    job_options(p)
    p.add_argument("--idempotency-key", default="", help="same key, same job")
    p.add_argument(
        "--run-after", type=c.when_arg, metavar="WHEN", help="ISO time (UTC if naive) or a delay: 90s, 5m, 2h"
    )
    p.add_argument(
        "--depends-on", action="append", default=[], metavar="JOB_NO",
        help="repeatable: runs once each of these is READY; cancelled if one fails or is cancelled",
    )  # fmt: skip
    p.add_argument("--watch", action="store_true", help="then watch it until it ends")
    p.set_defaults(handler=c.cmd_submit)
    _on_one(sub, common, "job_no", [
        ("get", c.cmd_get, "show a job"),
        ("cancel", c.cmd_cancel, "ask a job to stop"),
    ])  # fmt: skip
    p = sub.add_parser("retry", parents=[common], help="queue a FAILED, retryable job again, or all such jobs")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("job_no", nargs="?")
    which.add_argument(
        "--failed", action="store_true", help="every FAILED, retryable job of yours the options below match"
    )
    p.add_argument("--type", default="", help="with --failed: of this job type")
    p.add_argument("--owner", default="", help="with --failed: of this owner")
    p.add_argument("--queue", default="", help="with --failed: in this queue")
    p.add_argument(
        "--category", type=str.upper, choices=c.RETRYABLE_CATEGORIES, help="with --failed: that failed this way"
    )
    p.add_argument("--limit", type=c.count_arg, default=1000, help="with --failed: at most this many (default 1000)")
    p.add_argument("--dry-run", action="store_true", help="with --failed: list them, retry none")
    p.add_argument(
        "--force", action="store_true",
        help="with JOB_NO: retry it even though its error is not retryable (admin role; the trail names you)",
    )  # fmt: skip
    p.set_defaults(handler=c.cmd_retry)
    p = sub.add_parser("resolve", parents=[common], help="decide on a job WAITING for review")
    p.add_argument("job_no")
    p.add_argument(
        "decision", type=str.upper, choices=["APPROVE", "REJECT"], help="approve runs it again; reject fails it"
    )
    p.add_argument("--note", default="", help="what the reviewer says (a rejected job's user reads it)")
    p.set_defaults(handler=c.cmd_resolve)
    p = sub.add_parser("result", parents=[common], help="a READY job's result the server keeps, to stdout or a file")
    p.add_argument("job_no")
    p.add_argument("-o", "--output", type=Path, metavar="FILE", help="write it to FILE instead of stdout")
    p.set_defaults(handler=c.cmd_result)
    p = sub.add_parser("watch", parents=[common], help="follow a job live until it ends")
    p.add_argument("job_no")
    p.add_argument("--after-version", type=int, default=0, help="resume after this version")
    p.set_defaults(handler=c.cmd_watch)
    p = sub.add_parser("list", parents=[common], help="list jobs")
    p.add_argument("--owner", default="")
    status = p.add_argument(
        "--status", type=c.status_arg, action="append", default=[],
        help="repeatable: a name (QUEUED, RUNNING, ...) or the word shown for it (Queued, 排队中, ...), any case",
    )  # fmt: skip
    status.completer = lambda **_: c.STATUS_CHOICES  # type: ignore[attr-defined]  # argcomplete filters by prefix
    p.add_argument("--type", default="", help="job type")
    p.add_argument("--queue", default="", help="only this queue's jobs")
    p.add_argument("--assignee", default="", help="jobs handed to this reviewer (with --status WAITING: still waiting)")
    p.add_argument("--limit", type=c.count_arg, default=50, help="at most this many (default 50)")
    p.set_defaults(handler=c.cmd_list)


def _batch_commands(sub: _SubParsers, common: argparse.ArgumentParser) -> None:
    batch = sub.add_parser("batch", help="jobs made together: submit FILE | get | watch | cancel")
    commands = batch.add_subparsers(dest="batch_command", required=True, metavar="COMMAND")
    p = commands.add_parser("submit", parents=[common], help="submit a file of jobs (JSON lines) as one batch")
    p.add_argument("file", help='one job a line: {"job_type": "frames", "payload": {...}, "depends_on": [...]}')
    p.add_argument("--idempotency-key", default="", help="same key, same batch")
    p.add_argument("--watch", action="store_true", help="then watch it until every job ended")
    p.set_defaults(handler=b.cmd_batch_submit)
    _on_one(commands, common, "batch_id", [
        ("get", b.cmd_batch_get, "counts by status and progress"),
        ("watch", b.cmd_batch_watch, "every job's changes until all ended"),
        ("cancel", b.cmd_batch_cancel, "cancel every unfinished job"),
    ])  # fmt: skip


def _schedule_commands(sub: _SubParsers, common: argparse.ArgumentParser, job_common: argparse.ArgumentParser) -> None:
    schedule = sub.add_parser(
        "schedule", help="jobs on a cron or a period: create | get | list | pause | resume | delete"
    )
    commands = schedule.add_subparsers(dest="schedule_command", required=True, metavar="COMMAND")
    p = commands.add_parser("create", parents=[job_common], help="fire a job from these options on a cron or a period")
    p.add_argument("schedule_id", help="unique in your tenant")
    job_options(p)
    timing = p.add_mutually_exclusive_group(required=True)
    timing.add_argument("--cron", help='5 fields: minute hour day month weekday, e.g. "0 2 * * *"')
    timing.add_argument("--every", type=c.duration_arg, metavar="PERIOD", help="a period of at least 1s: 30s, 5m, 2h")
    p.add_argument("--tz", default="", help="IANA time zone the cron is read in, e.g. Asia/Shanghai (default UTC)")
    p.add_argument("--overlap", type=str.upper, choices=["SKIP", "ALLOW"], default="SKIP",
                   help="SKIP (default): no firing while the previous job is unfinished")  # fmt: skip
    p.add_argument("--catch-up", type=str.upper, choices=["NONE", "ONE"], default="NONE",
                   help="after firings missed while no server ran: NONE (default) or ONE job for them")  # fmt: skip
    p.set_defaults(handler=s.cmd_schedule_create)
    p = commands.add_parser("list", parents=[common], help="your schedules")
    p.add_argument("--limit", type=c.count_arg, default=None, help="at most this many")
    p.set_defaults(handler=s.cmd_schedule_list)
    _on_one(commands, common, "schedule_id", [
        ("get", s.cmd_schedule_get, "show a schedule"),
        ("pause", s.cmd_schedule_pause, "stop firing until resumed"),
        ("resume", s.cmd_schedule_resume, "fire again from the next fire time after now"),
        ("delete", s.cmd_schedule_delete, "remove it (its jobs stay)"),
    ])  # fmt: skip


Handler: TypeAlias = Callable[[c.Context, argparse.Namespace], int]


def _on_one(
    sub: _SubParsers, common: argparse.ArgumentParser, arg: str, commands: list[tuple[str, Handler, str]]
) -> None:
    """Commands that each take one name (`arg`) and nothing of their own."""
    for name, handler, text in commands:
        p = sub.add_parser(name, parents=[common], help=text)
        p.add_argument(arg)
        p.set_defaults(handler=handler)


def _admin_commands(sub: _SubParsers, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("inspect", parents=[common], help="stalled leases, jobs without progress, broken invariants")
    p.add_argument("--queue", default="")
    p.add_argument(
        "--kind",
        type=c.kind_arg,
        action="append",
        default=[],
        help=f"repeatable: {', '.join(c.FINDING_KINDS)}",
    )
    p.add_argument("--stalled-after", type=float, metavar="SECONDS", help="only leases expired at least this long ago")
    p.set_defaults(handler=a.cmd_inspect)
    p = sub.add_parser("events", parents=[common], help="a job's evidence trail")
    p.add_argument("job_no")
    p.add_argument("--limit", type=c.count_arg, default=None, help="at most this many, the oldest first")
    p.add_argument("--all", action="store_true", help="every progress report (a table keeps a run's first and last)")
    p.set_defaults(handler=a.cmd_events)
    p = sub.add_parser("checkpoint", parents=[common], help="a job's latest checkpoint (admin)")
    p.add_argument("job_no")
    p.add_argument("-o", "--output", type=Path, help="write its bytes to this file")
    p.set_defaults(handler=a.cmd_checkpoint)
    p = sub.add_parser("requeue", parents=[common], help="requeue a stalled job")
    p.add_argument("job_no")
    p.add_argument("--reason", required=True, help="why, for the evidence trail")
    p.set_defaults(handler=a.cmd_requeue)
    p = sub.add_parser("workers", parents=[common], help="known workers")
    p.add_argument("--queue", default="")
    p.set_defaults(handler=a.cmd_workers)
    p = sub.add_parser("health", parents=[common], help="is the server serving? (grpc.health.v1; exit 0 SERVING)")
    p.add_argument(
        "--service", default="", help="one service's health, e.g. jobwire.v1.JobService (default: the server's)"
    )
    p.set_defaults(handler=a.cmd_health)


def _queue_commands(sub: _SubParsers, common: argparse.ArgumentParser) -> None:
    queue = sub.add_parser("queue", help="a queue's flow control: limits | pause | resume")
    commands = queue.add_subparsers(dest="queue_command", required=True, metavar="COMMAND")
    p = commands.add_parser(
        "limits", parents=[common], help="show a queue's limits; with any option, replace them (one left out: none)"
    )
    p.add_argument("queue")
    p.add_argument("--max-running", type=c.count_arg, metavar="N", help="jobs of the queue running at once")
    p.add_argument("--rate", type=float, metavar="PER_SECOND", help="jobs started per second")
    p.add_argument("--burst", type=c.count_arg, metavar="N", help="jobs that may start at once after a quiet spell")
    p.set_defaults(handler=q.cmd_queue_limits)
    for name, handler, text in (
        ("pause", q.cmd_queue_pause, "lease nothing from the queue until resumed; running jobs go on"),
        ("resume", q.cmd_queue_resume, "lease from the queue again"),
    ):
        p = commands.add_parser(name, parents=[common], help=text)
        p.add_argument("queue")
        p.set_defaults(handler=handler)


def build_parser(env: Mapping[str, str] | None = None) -> argparse.ArgumentParser:
    """The jobctl argument parser; `env` supplies the JOBWIRE_* defaults."""
    env = os.environ if env is None else env
    parser = argparse.ArgumentParser(
        prog="jobctl",
        description="Talk to jobwire: submit and watch jobs, inspect and requeue.",
        epilog="Exit codes:" + (__doc__ or "").split("Exit codes:", 1)[-1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_version_flag(parser, "jobwire-shared")
    _global_options(parser, env, top=True)
    common = argparse.ArgumentParser(add_help=False)
    _global_options(common, env, top=False)
    # On submit and schedule create `--timeout` is the job's attempt limit; the per-call one
    # goes before the command.
    job_common = argparse.ArgumentParser(add_help=False)
    _global_options(job_common, env, top=False, call_timeout=False)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _job_commands(sub, common, job_common)
    _batch_commands(sub, common)
    _schedule_commands(sub, common, job_common)
    _admin_commands(sub, common)
    _queue_commands(sub, common)
    return parser


def _innermost(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the (sub)command `args` were parsed for: `jobctl schedule pause`'s, not jobctl's."""
    while True:
        commands = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        chosen = commands.choices.get(getattr(args, commands.dest, "")) if commands is not None else None
        if chosen is None:
            return parser
        parser = chosen


def make_context(args: argparse.Namespace, out: Console, err: Console) -> c.Context:
    if args.tls_ca is not None and not os.access(args.tls_ca, os.R_OK):
        # Read only when the channel opens; a missing file is the caller's mistake, not the server's.
        raise c.UsageError(f"cannot read the CA bundle {args.tls_ca} (--tls-ca / JOBWIRE_TLS_CA)")
    config = ChannelConfig(target=args.target, token=args.token or None, tls=args.tls, tls_ca=args.tls_ca)
    return c.Context(
        config=config,
        locale=args.locale,
        as_json=args.json,
        timeout=args.timeout,
        out=out,
        err=err,
    )


def report_error(err: Console, error: ClientError, target: str, job_no: str | None = None) -> int:
    """Print `error: <CODE> <REASON>: message`, then what to do about it where that is known,
    and return the exit code for it. `job_no`: the job the command named, if one."""
    _say(err, f"error: {error}")
    for field, description in error.violations:
        if f"{field}: {description}" not in error.message:  # the message often says it already
            _say(err, f"  {field}: {description}")
    if error.code == grpc.StatusCode.UNAVAILABLE and error.reason is None:
        _say(err, f"  is jobwire running at {target}?")
    elif error.reason == "JOB_NOT_FOUND" and job_no:
        _say(err, f"  no job {job_no} that this token can see: numbers are per tenant, and a token sees its queues'")
    elif error.code == grpc.StatusCode.UNAUTHENTICATED:
        _say(err, "  pass --token, or set JOBWIRE_TOKEN, to a token of the server's auth file")
    return c.EXIT_UNAVAILABLE if error.code in _TRANSIENT else c.EXIT_REFUSED


def _say(console: Console, text: str) -> None:
    console.print(text, markup=False, highlight=False, soft_wrap=True)


def run(
    argv: Sequence[str],
    *,
    out: Console,
    err: Console,
    env: Mapping[str, str] | None = None,
) -> int:
    """Run one jobctl command and return its exit code; never raises for user errors."""
    try:
        parser = build_parser(env)
        args, extra = parser.parse_known_args(argv)
        if extra:  # refused by the command's own parser, whose usage shows the options it has
            _innermost(parser, args).error(f"unrecognized arguments: {' '.join(extra)}")
    except SystemExit as stop:  # argparse already printed the usage or the help
        return stop.code if isinstance(stop.code, int) else c.EXIT_USAGE
    try:
        ctx = make_context(args, out, err)
        code: int = args.handler(ctx, args)
    except ClientError as error:
        return report_error(err, error, args.target, getattr(args, "job_no", None))
    except c.UsageError as error:
        _say(err, f"error: {error}")
        return c.EXIT_USAGE
    except KeyboardInterrupt:
        _say(err, "interrupted")
        return c.EXIT_INTERRUPTED
    except BrokenPipeError:
        raise  # the reader left (`jobctl list | head`): main() handles it quietly
    except Exception as error:
        if os.environ.get("JOBCTL_DEBUG"):
            raise
        _say(err, f"error: INTERNAL {type(error).__name__}: {error}")
        return c.EXIT_REFUSED
    return code


class _Console(Console):
    def on_broken_pipe(self) -> None:
        # rich's own answer is SystemExit(1), the code of a FAILED job: let main() say 141.
        raise BrokenPipeError


def main(argv: Sequence[str] | None = None) -> int:
    """The `jobctl` console script."""
    args = sys.argv[1:] if argv is None else argv
    # Under the shell's completion hook (_ARGCOMPLETE set) this prints the candidates and
    # exits; otherwise it returns at once.
    argcomplete.autocomplete(build_parser())
    # Piped output (a file, grep, a CI log) gets long lines rather than rich's 80 columns,
    # so a table row stays one line; COLUMNS still wins when set.
    piped = not sys.stdout.isatty() and "COLUMNS" not in os.environ
    out = _Console(highlight=False, width=PIPED_WIDTH if piped else None)
    try:
        return run(args, out=out, err=Console(stderr=True, highlight=False))
    except BrokenPipeError:
        # Point stdout at /dev/null so the interpreter's final flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return c.EXIT_PIPE_CLOSED


if __name__ == "__main__":
    sys.exit(main())
