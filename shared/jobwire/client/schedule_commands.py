"""jobctl schedule: create a schedule from submit's job options, show, list, pause, resume, delete."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from rich.table import Table

from jobwire.client import render, views
from jobwire.client.commands import EXIT_OK, Context, job_options, read_payload
from jobwire.client.jobs import JobClient
from jobwire.v1 import schedule_pb2

S = schedule_pb2.Schedule


def cmd_schedule_create(ctx: Context, args: argparse.Namespace) -> int:
    with ctx.jobs() as client:
        template = client.submit_request(args.job_type, read_payload(args), **job_options(args))
        made = client.create_schedule(
            args.schedule_id, template, cron=args.cron, every=args.every, time_zone=args.tz,
            overlap=args.overlap, catch_up=args.catch_up,
        )  # fmt: skip
        _show(ctx, made.raw)
    return EXIT_OK


def _on_one(act: Callable[[JobClient, str], views.Schedule]) -> Callable[[Context, argparse.Namespace], int]:
    """A command that does `act` to the named schedule and shows it afterwards."""

    def handler(ctx: Context, args: argparse.Namespace) -> int:
        with ctx.jobs() as client:
            _show(ctx, act(client, args.schedule_id).raw)
        return EXIT_OK

    return handler


cmd_schedule_get = _on_one(JobClient.get_schedule)
cmd_schedule_pause = _on_one(JobClient.pause_schedule)
cmd_schedule_resume = _on_one(JobClient.resume_schedule)


def cmd_schedule_delete(ctx: Context, args: argparse.Namespace) -> int:
    with ctx.jobs() as client:
        client.delete_schedule(args.schedule_id)
    if ctx.as_json:
        ctx.emit({"deleted": args.schedule_id})
    else:
        ctx.out.print(f"{args.schedule_id} deleted", markup=False, highlight=False)
    return EXIT_OK


def cmd_schedule_list(ctx: Context, args: argparse.Namespace) -> int:
    with ctx.jobs() as client:
        found = [one.raw for one in client.list_schedules(limit=args.limit)]
    if ctx.as_json:
        for one in found:
            ctx.emit(render.to_json(one))
        return EXIT_OK
    table = Table("title", "schedule", "when", "job type", "state", "next fire (UTC)", "last job", box=None)
    for one in found:
        table.add_row(one.template.title or render.DASH, one.schedule_id, when(one), one.template.job_type,
                      _state(one), render.fmt_time(one.next_fire_time), one.last_job_no or render.DASH)  # fmt: skip
    ctx.out.print(table)
    return EXIT_OK


def when(one: schedule_pb2.Schedule) -> str:
    """`cron 0 2 * * * Asia/Shanghai` or `every 30s`."""
    if one.WhichOneof("timing") == "every":
        return f"every {one.every.ToTimedelta().total_seconds():g}s"
    return f"cron {one.cron} {one.time_zone}"


def _state(one: schedule_pb2.Schedule) -> str:
    return "paused" if one.paused else "active"


def _show(ctx: Context, one: schedule_pb2.Schedule) -> None:
    if ctx.as_json:
        ctx.emit(render.to_json(one))
        return
    # The title its jobs are given first, as `jobctl get` shows a job's; none, no line.
    lines = [one.template.title] if one.template.title else []
    lines += [
        f"{one.schedule_id}: {when(one)}, {_state(one)}",
        f"  job: {one.template.job_type} on queue {one.template.queue or 'default'}",
        f"  overlap {S.Overlap.Name(one.overlap)} · catch-up {S.CatchUp.Name(one.catch_up)}"
        f" · skipped (overlap or refused): {one.skipped_firings} · missed: {one.missed_firings}",
        f"  next fire: {render.fmt_time(one.next_fire_time)} · last fire: {render.fmt_time(one.last_fire_time)}"
        f" · last job: {one.last_job_no or '-'}",
    ]
    ctx.out.print("\n".join(lines), markup=False, highlight=False)
