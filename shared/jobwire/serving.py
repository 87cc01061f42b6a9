"""What every jobwire server process is made of: one store, one DB thread pool, one host.

Services add themselves to a Runtime (`add_jobapi(rt)`, `add_worker_service(rt)`); the
entry points choose which, so the embedded server and the split services share one path.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import uvloop

from jobwire import family, reaping
from jobwire.db.feed import FeedReader
from jobwire.db.store import JobStore, Work, open_store
from jobwire.rpc.auth import load_tokens
from jobwire.rpc.batching import Batcher
from jobwire.rpc.blocking import Blocking
from jobwire.rpc.config import Settings
from jobwire.rpc.serve import configure_logging, serve_until_signalled
from jobwire.rpc.server import ServerHost
from jobwire.rpc.wakeup import Wakeup
from jobwire.tail import EventTail

T = TypeVar("T")
# Write transactions in flight at once: two, so one batch is built while the other waits
# on the database; more calls wait for the next batch instead (group commit).
COMMIT_LANES = 2
MAX_BATCH = 256  # calls per transaction: bounds its locks and its statement size


@dataclass
class Runtime:
    settings: Settings
    store: JobStore
    blocking: Blocking
    commits: Batcher[Work, Any]  # every write: submits, claims and changes share transactions
    wakeup: Wakeup
    tail: EventTail  # the one reader of job_event, for watch streams and waiting claims
    host: ServerHost

    async def stop(self, grace: float = 5.0) -> None:
        await self.host.stop(grace)
        await self.commits.shutdown()
        self.blocking.shutdown()
        await self.store.db.close()


def open_runtime(settings: Settings) -> Runtime:
    store = open_store(
        settings.database_url, pool_size=settings.db_pool_size, job_prefix=settings.job_prefix, migrate=settings.migrate
    )
    rt = Runtime(
        settings=settings,
        store=store,
        blocking=Blocking(settings.db_pool_size),
        commits=Batcher(store.apply, lanes=COMMIT_LANES, max_items=MAX_BATCH),
        wakeup=Wakeup(),
        tail=EventTail(FeedReader(store.db), settings.feed_poll_seconds),
        host=ServerHost(settings, ping=store.db.ping),
    )
    rt.host.add_task(asyncio.get_running_loop().create_task(rt.tail.run(), name="jobwire-event-tail"))
    relay = family.sibling_relay(lambda tenant, queue, job_type: rt.wakeup.notify(tenant, queue, job_type, relay=False))
    if relay is not None:
        rt.wakeup.relay = relay
        rt.host.add_stop_hook(relay.close)
    if family.keeps_house():
        reaping.start(rt)  # the lease reaper and retention, stopped with the host
    return rt


AddService = Callable[[Runtime], None]


def server_flags(parser: argparse.ArgumentParser) -> None:
    """The flags every server accepts; each overrides its JOBWIRE_* variable."""
    parser.add_argument("--listen", help="host:port (JOBWIRE_LISTEN, default 127.0.0.1:50051)")
    parser.add_argument("--database-url", help="JOBWIRE_DATABASE_URL, default sqlite:///var/jobwire.db")
    parser.add_argument("--auth-file", type=Path, help="JOBWIRE_AUTH_FILE: TOML bearer tokens")
    parser.add_argument("--metrics-listen", help="JOBWIRE_METRICS_LISTEN: host:port for /metrics")
    parser.add_argument(
        "--processes", type=int, help="JOBWIRE_PROCESSES: serving processes on the one port (default: the cores)"
    )


def settings_from(args: argparse.Namespace) -> Settings:
    """Settings from the environment and the flags; a bad one ends the process with its reason."""
    names = ("listen", "database_url", "auth_file", "metrics_listen", "processes")
    flags = {name: getattr(args, name, None) for name in names}
    try:
        settings = Settings.from_env(**{k: v for k, v in flags.items() if v})
        if settings.auth_file is not None:
            load_tokens(settings.auth_file)  # a bad auth file stops the parent, not each child in turn
    except (ValueError, OSError) as exc:
        raise SystemExit(f"jobwire: {exc}") from None
    return settings


async def serve(settings: Settings, *services: AddService) -> None:
    """Host `services` until SIGTERM or SIGINT; prints the bound port for launchers and tests."""
    rt = open_runtime(settings)  # inside the loop: grpc.aio servers bind to the running loop
    for add in services:
        add(rt)
    await serve_until_signalled(
        rt,
        on_ready=lambda port: print(f"{family.READY}{port}", flush=True),
        parent=family.parent_pid(),
    )


def run_server(prog: str, *services: AddService, argv: Sequence[str] | None = None) -> None:
    """The whole of a server's `main`: flags, settings, logging, serve."""
    parser = argparse.ArgumentParser(prog=prog, description=f"jobwire: {prog}")
    server_flags(parser)
    serve_processes(settings_from(parser.parse_args(argv)), *services)


def serve_processes(settings: Settings, *services: AddService) -> None:
    """Serve in this process, or as the parent of `settings.processes` (jobwire.family)."""
    configure_logging()
    child = family.child_settings(settings)
    if child is not None:
        run_loop(serve(child, *services))
    elif settings.processes > 1:
        raise SystemExit(family.run(settings))
    else:
        run_loop(serve(settings, *services))


def run_loop(main: Coroutine[Any, Any, T]) -> T:
    """Run a server's `main` on uvloop: a tenth less CPU per call than asyncio's own loop,
    measured with ReportStage under load (1.45 -> 1.33 ms of server CPU per report)."""
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)
