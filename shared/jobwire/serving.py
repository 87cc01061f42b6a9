"""What every jobwire server process is made of: one store, one DB thread pool, one host.

Services add themselves to a Runtime (`add_jobapi(rt)`, `add_worker_service(rt)`); the
entry points choose which, so the embedded server and the split services share one path.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from jobwire import reaping
from jobwire.db.changes import Outcome
from jobwire.db.store import Call, JobStore, open_store
from jobwire.db.submit import NewJob
from jobwire.domain.errors import JobwireError
from jobwire.domain.job import JobRecord
from jobwire.rpc.batching import Batcher
from jobwire.rpc.blocking import Blocking
from jobwire.rpc.config import Settings
from jobwire.rpc.serve import configure_logging, serve_until_signalled
from jobwire.rpc.server import ServerHost
from jobwire.rpc.wakeup import Wakeup

# Transactions in flight at once for state changes: two, so one batch is built while the
# other waits on the database; more calls wait for the next batch instead (group commit).
COMMIT_LANES = 2
MAX_BATCH = 256  # operations per transaction: bounds its locks and its statement size


@dataclass
class Runtime:
    settings: Settings
    store: JobStore
    blocking: Blocking
    commits: Batcher[Call, list[Outcome]]  # every state change of an existing job
    submits: Batcher[NewJob, tuple[JobRecord, bool] | JobwireError]
    wakeup: Wakeup
    host: ServerHost

    async def stop(self, grace: float = 5.0) -> None:
        await self.host.stop(grace)
        self.commits.shutdown()
        self.submits.shutdown()
        self.blocking.shutdown()
        self.store.db.dispose()


def open_runtime(settings: Settings) -> Runtime:
    store = open_store(settings.database_url, pool_size=settings.db_pool_size, job_prefix=settings.job_prefix)
    rt = Runtime(
        settings=settings,
        store=store,
        blocking=Blocking(settings.db_pool_size),
        commits=Batcher(store.apply, lanes=COMMIT_LANES, max_items=MAX_BATCH, name="jobwire-commit"),
        submits=Batcher(store.submit_many, lanes=COMMIT_LANES, max_items=MAX_BATCH, name="jobwire-submit"),
        wakeup=Wakeup(),
        host=ServerHost(settings, ping=store.db.ping),
    )
    reaping.start(rt)  # the lease reaper and retention, stopped with the host
    return rt


AddService = Callable[[Runtime], None]


def server_flags(parser: argparse.ArgumentParser) -> None:
    """The flags every server accepts; each overrides its JOBWIRE_* variable."""
    parser.add_argument("--listen", help="host:port (JOBWIRE_LISTEN, default 127.0.0.1:50051)")
    parser.add_argument("--database-url", help="JOBWIRE_DATABASE_URL, default sqlite:///var/jobwire.db")
    parser.add_argument("--auth-file", type=Path, help="JOBWIRE_AUTH_FILE: TOML bearer tokens")
    parser.add_argument("--metrics-listen", help="JOBWIRE_METRICS_LISTEN: host:port for /metrics")


def settings_from(args: argparse.Namespace) -> Settings:
    """Settings from the environment and the flags; a bad one ends the process with its reason."""
    flags = {name: getattr(args, name, None) for name in ("listen", "database_url", "auth_file", "metrics_listen")}
    try:
        return Settings.from_env(**{k: v for k, v in flags.items() if v})
    except ValueError as exc:
        raise SystemExit(f"jobwire: {exc}") from None


async def serve(settings: Settings, *services: AddService) -> None:
    """Host `services` until SIGTERM or SIGINT; prints the bound port for launchers and tests."""
    rt = open_runtime(settings)  # inside the loop: grpc.aio servers bind to the running loop
    for add in services:
        add(rt)
    await serve_until_signalled(rt, on_ready=lambda port: print(f"jobwire serving on port {port}", flush=True))


def run_server(prog: str, *services: AddService, argv: Sequence[str] | None = None) -> None:
    """The whole of a server's `main`: flags, settings, logging, serve."""
    parser = argparse.ArgumentParser(prog=prog, description=f"jobwire: {prog}")
    server_flags(parser)
    settings = settings_from(parser.parse_args(argv))
    configure_logging()
    asyncio.run(serve(settings, *services))
