"""What every jobwire server process is made of: one store, one DB thread pool, one host.

Services add themselves to a Runtime (`add_jobapi(rt)`, `add_worker_service(rt)`); the
entry points choose which, so the embedded server and the split services share one path.
"""

from __future__ import annotations

from dataclasses import dataclass

from jobwire import reaping
from jobwire.db.store import JobStore, open_store
from jobwire.rpc.blocking import Blocking
from jobwire.rpc.config import Settings
from jobwire.rpc.server import ServerHost
from jobwire.rpc.wakeup import Wakeup


@dataclass
class Runtime:
    settings: Settings
    store: JobStore
    blocking: Blocking
    wakeup: Wakeup
    host: ServerHost

    async def stop(self, grace: float = 5.0) -> None:
        await self.host.stop(grace)
        self.blocking.shutdown()
        self.store.db.dispose()


def open_runtime(settings: Settings) -> Runtime:
    store = open_store(settings.database_url, pool_size=settings.db_pool_size, job_prefix=settings.job_prefix)
    rt = Runtime(
        settings=settings,
        store=store,
        blocking=Blocking(settings.db_pool_size),
        wakeup=Wakeup(),
        host=ServerHost(settings, ping=store.db.ping),
    )
    reaping.start(rt)  # the lease reaper and retention, stopped with the host
    return rt
