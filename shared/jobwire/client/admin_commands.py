"""jobctl's operator commands (the admin role): inspect, events, checkpoint, requeue, workers;
and health, which any caller may ask (grpc.health.v1 takes no token)."""

from __future__ import annotations

import argparse
from itertools import chain

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from jobwire.client import convert, render
from jobwire.client.commands import EXIT_OK, EXIT_UNAVAILABLE, Context, show_job
from jobwire.client.errors import from_rpc_error


def cmd_inspect(ctx: Context, args: argparse.Namespace) -> int:
    with ctx.admin() as admin:
        findings = admin.inspect(stalled_after=args.stalled_after, queue=args.queue, kinds=args.kind)
    if ctx.as_json:
        ctx.emit([render.to_json(f.raw) for f in findings])
    elif not findings:
        ctx.out.print("no findings: no stalled leases, no jobs without progress, no broken invariants")
    else:
        ctx.out.print(render.findings_table(f.raw for f in findings))
    return EXIT_OK


def cmd_events(ctx: Context, args: argparse.Namespace) -> int:
    with ctx.admin() as admin:
        pages = admin.list_event_pages(args.job_no)
        first = next(pages)  # ListEvents answers with a page (its title on each) or raises
        events = list(convert.at_most(chain.from_iterable(page.events for page in chain([first], pages)), args.limit))
    if ctx.as_json:
        ctx.emit([render.to_json(e.raw) for e in events])
        return EXIT_OK
    if first.title:  # the trail's heading, as on the evidence page
        ctx.out.print(first.title, markup=False, highlight=False)
    trail = [e.raw for e in events]
    ctx.out.print(render.events_table(trail if args.all else render.fold_progress(trail)))
    return EXIT_OK


def cmd_checkpoint(ctx: Context, args: argparse.Namespace) -> int:
    with ctx.admin() as admin:
        saved = admin.checkpoint(args.job_no)
    if args.output is not None:
        args.output.write_bytes(saved.data)
    if ctx.as_json:
        ctx.emit(render.to_json(saved.raw))
    else:
        lines = render.checkpoint_lines(saved.raw)
        for line in lines[:1] if args.output is not None else lines:
            ctx.out.print(line, markup=False, highlight=False, soft_wrap=True)
    return EXIT_OK


def cmd_requeue(ctx: Context, args: argparse.Namespace) -> int:
    with ctx.admin() as admin:
        show_job(ctx, admin.requeue(args.job_no, reason=args.reason))
    return EXIT_OK


def cmd_workers(ctx: Context, args: argparse.Namespace) -> int:
    with ctx.admin() as admin:
        workers = list(admin.list_workers(queue=args.queue))
    if ctx.as_json:
        # proto3 JSON leaves a false bool out; a script reading it should not have to know that
        ctx.emit([{**render.to_json(w.raw), "live": w.live, "shared_fleet": w.shared_fleet} for w in workers])
    else:
        ctx.out.print(render.workers_table(w.raw for w in workers))
    return EXIT_OK


def cmd_health(ctx: Context, args: argparse.Namespace) -> int:
    """grpc.health.v1's answer, as a probe or a person asks it, no token needed: SERVING exits
    0, NOT_SERVING (a server whose database is unreachable) 5, no answer 5 as any call's,
    an unknown --service 4 (NOT_FOUND)."""
    with ctx.jobs() as client:
        try:
            reply = health_pb2_grpc.HealthStub(client.channel).Check(
                health_pb2.HealthCheckRequest(service=args.service), timeout=ctx.timeout
            )
        except grpc.RpcError as error:
            raise from_rpc_error(error) from None
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    if ctx.as_json:
        ctx.emit({"status": status})
    else:
        ctx.out.print(f"{ctx.config.target}: {status}", markup=False, highlight=False)
    return EXIT_OK if reply.status == health_pb2.HealthCheckResponse.SERVING else EXIT_UNAVAILABLE
