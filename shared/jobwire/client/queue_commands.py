"""jobctl queue: show or set a queue's limits, pause it, resume it (AdminService, role admin)."""

from __future__ import annotations

import argparse

from jobwire.client.commands import EXIT_OK, Context
from jobwire.client.render import queue_line, to_json
from jobwire.v1 import admin_pb2


def cmd_queue_limits(ctx: Context, args: argparse.Namespace) -> int:
    wanted = {"max_running": args.max_running, "rate_per_second": args.rate, "burst": args.burst}
    with ctx.admin() as admin:
        if all(value is None for value in wanted.values()):
            found = admin.queue_limits(args.queue)
        else:
            # The limits given replace the queue's: one left out is none.
            found = admin.set_queue_limits(args.queue, **{k: v or 0 for k, v in wanted.items()})
    return _show(ctx, found)


def cmd_queue_pause(ctx: Context, args: argparse.Namespace) -> int:
    with ctx.admin() as admin:
        return _show(ctx, admin.pause_queue(args.queue))


def cmd_queue_resume(ctx: Context, args: argparse.Namespace) -> int:
    with ctx.admin() as admin:
        return _show(ctx, admin.resume_queue(args.queue))


def _show(ctx: Context, found: admin_pb2.QueueLimitsResponse) -> int:
    if ctx.as_json:
        ctx.emit(to_json(found))
    else:
        ctx.out.print(queue_line(found), markup=False, highlight=False)
    return EXIT_OK
