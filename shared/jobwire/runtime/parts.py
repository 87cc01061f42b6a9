"""What every jobwire server process is made of: one store, one DB thread pool, one host.

Services add themselves to a Runtime (`add_jobapi(rt)`, `add_worker_service(rt)`); the
entry points (jobwire.runtime.serving) choose which, so the embedded server and the split
services share one path.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from jobwire.db.feed import FeedReader
from jobwire.db.store import JobStore, Work, open_store
from jobwire.rpc.batching import Batcher
from jobwire.rpc.server import Endpoint, ServerHost, check_exposure
from jobwire.runtime import family, housekeeping, leadership, lease_uploads, settling
from jobwire.runtime.blocking import Blocking
from jobwire.runtime.result_store import FILE_THREADS, ResultStore
from jobwire.runtime.settings import Settings
from jobwire.runtime.tail import EventTail
from jobwire.runtime.transfers import Transfers
from jobwire.runtime.wakeup import Wakeup

# Write transactions in flight at once: two, so one batch is built while the other waits
# on the database; more calls wait for the next batch instead (group commit).
COMMIT_LANES = 2
MAX_BATCH = 256  # calls per transaction: bounds its locks and its statement size


@dataclass
class Runtime:
    settings: Settings
    store: JobStore
    blocking: Blocking
    results: ResultStore  # uploaded results (UploadResult, GetResult)
    transfers: Transfers  # their downloads and uploads in flight, per tenant share
    commits: Batcher[Work, Any]  # every write: submits, claims and changes share transactions
    wakeup: Wakeup
    tail: EventTail  # the one reader of job_event, for watch streams and waiting claims
    host: ServerHost
    relay: family.SiblingRelay | None = None  # to the family's other processes, when in one

    def news(self) -> None:
        """A change a worker's Session waits to hear of (a cancel, a requeue) committed here:
        this process's event tail and its siblings' poll now, not at their next poll (50 ms)."""
        self.tail.wake()
        if self.relay is not None:
            self.relay.news()

    def lead(self, chores: str, duty: leadership.Duty) -> None:
        """Run `duty` in the one process of all replicas that holds the lease `chores`
        (jobwire.runtime.leadership); stopped, and the lease given up, with the host."""
        if family.stands_for_chores():
            self.host.add_task(leadership.lead(
                chores, duty, store=self.store, blocking=self.blocking, metrics=self.host.metrics,
                lease_s=self.settings.chore_lease_seconds,
            ))  # fmt: skip

    async def stop(self, grace: float = 5.0) -> None:
        await self.host.stop(grace)
        await self.commits.shutdown()
        self.blocking.shutdown()
        self.results.blocking.shutdown()
        await self.store.db.close()


def open_runtime(settings: Settings) -> Runtime:
    check_exposure(settings.listen, settings.auth_file)  # before the database is touched
    store = open_store(
        settings.database_url, pool_size=settings.db_pool_size, job_prefix=settings.job_prefix, migrate=settings.migrate
    )
    blocking = Blocking(settings.db_pool_size)
    host = ServerHost(endpoint(settings), ping=store.db.ping)
    rt = Runtime(
        settings=settings,
        store=store,
        blocking=blocking,
        results=ResultStore(settings.result_store_url, Blocking(FILE_THREADS, "jobwire-files")),
        transfers=Transfers(settings.max_transfers, host.tenants, settings.stream_idle_seconds),
        commits=Batcher(store.apply, lanes=COMMIT_LANES, max_items=MAX_BATCH),
        wakeup=Wakeup(),
        tail=EventTail(FeedReader(store.db), settings.feed_poll_seconds, on_loop=not store.db.is_mysql),
        host=host,
    )
    store.observe = rt.host.metrics.jobs.moved  # every committed move, counted once (jobwire.db.store)
    rt.wakeup.heard = store.turns.heard  # which tenants have work, for a shared fleet's turns
    rt.host.add_task(asyncio.get_running_loop().create_task(rt.tail.run(), name="jobwire-event-tail"))
    rt.host.add_task(settling.start(store))  # what this process's endings leave of their dependents
    rt.host.add_task(lease_uploads.start(store, rt.results))  # the uploads of the leases they end
    relay = family.sibling_relay(
        lambda tenant, queue, job_type: rt.wakeup.notify(tenant, queue, job_type, relay=False), on_news=rt.tail.wake
    )
    if relay is not None:
        rt.wakeup.relay = rt.relay = relay
        rt.host.add_stop_hook(relay.close)
    keeper = housekeeping.keeper(store, rt.blocking, settings, rt.host.metrics.jobs, rt.results)
    if keeper is not None:
        rt.lead("housekeeping", keeper.run)
    return rt


AddService = Callable[[Runtime], None]


def endpoint(settings: Settings) -> Endpoint:
    return Endpoint(
        listen=settings.listen, auth_file=settings.auth_file, tls_cert=settings.tls_cert, tls_key=settings.tls_key,
        tls_client_ca=settings.tls_client_ca, metrics_listen=settings.metrics_listen, share_port=settings.share_port,
        max_connection_age_s=settings.max_connection_age_seconds,
        max_connection_age_grace_s=settings.max_connection_age_grace_seconds,
    )  # fmt: skip
