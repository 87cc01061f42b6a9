"""One gRPC server host: interceptors, keepalive, TLS, health, reflection, graceful stop.

Both services and the embedded all-in-one server are built from this, so they behave
alike: the same error mapping, auth, limits and shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from jobwire.domain.limits import MAX_GRPC_MESSAGE_BYTES
from jobwire.observe import tracing
from jobwire.observe.metrics import MetricsEndpoint
from jobwire.rpc.auth import Authenticator, load_tokens
from jobwire.rpc.handlers import AddToServer, Wrapping, register
from jobwire.rpc.metrics import Metrics

log = logging.getLogger(__name__)

# Keepalive (docs/deployment.md, "Keepalive"). The server pings a connection quiet for 10 s
# and closes it when the ping is not answered within 10 s: a peer gone without a FIN or an
# RST (its host died, the network parted, its process is stopped) is noticed within about
# 20 s of its last word, and its calls end (a worker's Session stops its standing claim).
# grpc-core waits for a ping's answer grpc.http2.ping_timeout_ms (60 s unless set: it
# overrides keepalive_timeout_ms, and a stopped peer took 70 s to drop), so both are set.
# Pings go on while no data flows (max_pings_without_data 0): an idle connection is probed
# too. Clients may ping as often as every 2 s (a worker that wants to notice a dead server as
# fast); more often is a strike, and 5 strikes end the connection with GOAWAY
# "too_many_pings" (jobwire.client.channel pings every 30 s).
SERVER_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.http2.ping_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.http2.min_ping_interval_without_data_ms", 2_000),
    ("grpc.http2.max_ping_strikes", 5),
    ("grpc.max_receive_message_length", MAX_GRPC_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_GRPC_MESSAGE_BYTES),
    ("grpc.max_concurrent_streams", 10_000),
    # grpc.aio accepts new calls one at a time from the event loop, so a burst (thousands of
    # watchers reconnecting after a restart) waits in C-core's pending queue. Past a soft
    # limit (~1,000 by default, hard ~3,000) C-core rejects calls at random with CANCELLED,
    # which clients do not retry: 2,000 streams opened at once lost 1-7% of them (about 1,830 of
    # 2,000 arrived on a 2-core machine). Our own cap (Settings.max_streams) bounds streams instead.
    ("grpc.server.max_pending_requests", 20_000),
    ("grpc.server.max_pending_requests_hard_limit", 40_000),
)
_KEEPALIVE = dict(SERVER_OPTIONS)
# A connection the keepalive closed had received nothing for at least the unanswered ping's
# timeout, less a second of the timers' slack: a call that heard its peer more recently was
# not ended by the keepalive. Not the quiet time plus the timeout: the keepalive timer runs
# from its last ping, not from the peer's last word, so its next ping may leave right after
# that word (a stopped worker's connection was closed 10.1 s after its last frame).
KEEPALIVE_SILENCE_S = _KEEPALIVE["grpc.http2.ping_timeout_ms"] / 1000 - 1
HEALTH_INTERVAL_S = 2.0


def is_loopback(listen: str) -> bool:
    host = listen.rsplit(":", 1)[0].strip("[]")
    if host in ("localhost", ""):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True, kw_only=True)
class Endpoint:
    """Where and how a server listens: what ServerHost needs of the runtime's settings."""

    listen: str
    auth_file: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_client_ca: Path | None = None
    metrics_listen: str | None = None
    share_port: bool = False  # a child of a family: join the port its parent holds
    max_connection_age_s: float = 0.0  # 0: a connection lasts as long as its client keeps it
    max_connection_age_grace_s: float = 0.0


def connection_age_options(endpoint: Endpoint) -> list[tuple[str, int]]:
    """Close each connection after its age, with a grace for the calls on it (none: never).

    A client with one long-lived channel to a dns:/// name (round_robin, jobwire.client.channel)
    keeps the replicas it resolved at first; a GOAWAY makes it connect again, resolve again
    and spread over the replicas there are now. Calls in flight at the GOAWAY keep their
    connection for the grace; a stream still open after it ends UNAVAILABLE ("max connection
    age"), which the client's watch resumes from its last version. grpc adds +-10% jitter to
    the age, so a fleet's connections do not all close at once.
    """
    if endpoint.max_connection_age_s <= 0:
        return []
    return [
        ("grpc.max_connection_age_ms", round(endpoint.max_connection_age_s * 1000)),
        ("grpc.max_connection_age_grace_ms", round(endpoint.max_connection_age_grace_s * 1000)),
    ]


def check_exposure(listen: str, auth_file: Path | None) -> None:
    """Refuse (SystemExit) to serve beyond loopback without authentication.

    Entries call this before they open or migrate a database, so a refused server leaves
    nothing behind; ServerHost calls it again for anyone who builds one directly.
    """
    if auth_file is None and not is_loopback(listen):
        raise SystemExit(
            f"refusing to listen on {listen} without JOBWIRE_AUTH_FILE: "
            "only loopback addresses may serve without authentication"
        )


class ServerHost:
    """A grpc.aio server with jobwire's interceptors, health and reflection."""

    def __init__(self, endpoint: Endpoint, *, ping: Callable[[float], bool]) -> None:
        check_exposure(endpoint.listen, endpoint.auth_file)
        tokens = load_tokens(endpoint.auth_file) if endpoint.auth_file else None
        # how many tenants may call: capacity is shared among them (jobwire.runtime.shares)
        self.tenants = len({p.tenant for p in tokens.values()}) if tokens else 1
        self.endpoint = endpoint
        self.metrics = Metrics()
        self._auth = Authenticator(tokens)
        self._wrapping = Wrapping(self._auth, self.metrics)
        # grpc binds with SO_REUSEPORT unless told not to, and a second server on a taken
        # port would then start silently. Only a family's children share a port (jobwire.runtime.family).
        reuse = ("grpc.so_reuseport", 1 if endpoint.share_port else 0)
        # A span per call only while tracing is on: off, grpc.aio runs no interceptor at all.
        self.server = grpc.aio.server(
            interceptors=tracing.server_interceptors() or None,
            options=[*SERVER_OPTIONS, reuse, *connection_age_options(endpoint)],
        )
        self.health = health.aio.HealthServicer()
        self.add_servicer(health_pb2_grpc.add_HealthServicer_to_server, self.health)
        self._ping = ping
        self._services: list[str] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._stop_hooks: list[Callable[[], None]] = []
        self.port = 0
        self._metrics_endpoint = MetricsEndpoint(self.metrics)
        self.metrics_port: int | None = None

    def add_servicer(self, add: AddToServer, servicer: object, full_name: str | None = None) -> None:
        """Serve `servicer` (`add` is its generated add_*Servicer_to_server), auth, errors and metrics included.

        `full_name` names a jobwire service for health and reflection.
        """
        register(self.server, self._wrapping, add, servicer)
        if full_name is not None:
            self._services.append(full_name)

    def reload_auth(self) -> None:
        """Read the auth file again (SIGHUP), keeping open streams; a bad file keeps the old tokens.

        The tenant count that divides capacity (`tenants`) stays as it was at start.
        """
        if self.endpoint.auth_file is not None:
            self._auth.reload(self.endpoint.auth_file)

    def add_task(self, task: asyncio.Task[None]) -> None:
        """A background task (reaper, change feed) cancelled when the server stops."""
        self._tasks.append(task)

    def add_stop_hook(self, hook: Callable[[], None]) -> None:
        """Called as stop() begins (after health turns NOT_SERVING): e.g. end watch streams."""
        self._stop_hooks.append(hook)

    async def start(self) -> int:
        names = [*self._services, health.SERVICE_NAME, reflection.SERVICE_NAME]
        reflection.enable_server_reflection(names, self.server)
        self.port = self._bind(self.endpoint)
        await self.server.start()
        if self.endpoint.metrics_listen:
            self.metrics_port = self._metrics_endpoint.start(self.endpoint.metrics_listen)
            log.info("jobwire metrics at GET /metrics on port %d", self.metrics_port)
        self._tasks.append(asyncio.create_task(self._watch_health(), name="jobwire-health"))
        log.info("jobwire serving %s on port %d", ", ".join(self._services), self.port)
        return self.port

    def _bind(self, endpoint: Endpoint) -> int:
        try:
            if endpoint.tls_cert and endpoint.tls_key:
                ca = endpoint.tls_client_ca.read_bytes() if endpoint.tls_client_ca else None
                creds = grpc.ssl_server_credentials(
                    [(endpoint.tls_key.read_bytes(), endpoint.tls_cert.read_bytes())],
                    root_certificates=ca,
                    require_client_auth=ca is not None,
                )
                return int(self.server.add_secure_port(endpoint.listen, creds))
            return int(self.server.add_insecure_port(endpoint.listen))
        except RuntimeError:
            # Bound without SO_REUSEPORT (see SERVER_OPTIONS): someone holds the port.
            port = endpoint.listen.rpartition(":")[2]
            raise SystemExit(
                f"jobwire: cannot listen on {endpoint.listen}: port {port} is in use by another program"
                " or another jobwire server"
            ) from None

    async def _watch_health(self) -> None:
        serving: bool | None = None
        while True:
            # A database that answered any statement within the interval is up: no query of its own.
            ok = await asyncio.to_thread(self._ping, HEALTH_INTERVAL_S)
            self.metrics.set_health(serving=ok, database_up=ok)
            if ok != serving:
                serving = ok
                state = health_pb2.HealthCheckResponse.SERVING if ok else health_pb2.HealthCheckResponse.NOT_SERVING
                for name in ("", *self._services):
                    await self.health.set(name, state)
                log.log(logging.INFO if ok else logging.WARNING, "database %s", "reachable" if ok else "unreachable")
            await asyncio.sleep(HEALTH_INTERVAL_S)

    async def stop(self, grace: float = 10.0) -> None:
        """Report NOT_SERVING, stop background work, end streams, wait for calls in flight."""
        await self.health.enter_graceful_shutdown()
        for hook in self._stop_hooks:
            hook()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self.metrics.set_health(serving=False, database_up=False)  # after the health watcher is gone
        await self.server.stop(grace)
        await self._metrics_endpoint.stop()

    async def wait(self) -> None:
        await self.server.wait_for_termination()


def full_names(*descriptors: object) -> Sequence[str]:
    return [d.full_name for d in descriptors]  # type: ignore[attr-defined]
