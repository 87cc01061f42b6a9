"""One way to open a channel to jobwire: target, optional TLS, optional bearer token.

Keepalive settings here match the server's (jobwire.rpc.server) so idle proxies and NATs do
not silently drop long watches and long-polls.

Every channel balances its calls round-robin over every address its target resolves to:
`dns:///jobwire-jobapi-headless:50051` (a Kubernetes headless Service: one address per ready
pod) spreads one client's calls over every replica, where grpc's default (pick_first) would
pin them all to the first. The servers close a connection after its age
(JOBWIRE_MAX_CONNECTION_AGE_SECONDS), which makes the channel resolve the name again and
take in replicas added since.

A bearer token travels as `authorization: Bearer <token>` metadata. With TLS it rides on
call credentials; on a plain-text channel it is added by a client interceptor, because
grpc only lets call credentials onto plain text through `local_channel_credentials`, and
those refuse any peer that is not on this machine (a dev cluster, a sidecar, a pod IP).
"""

from __future__ import annotations

import ipaddress
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import grpc
import grpc.aio

from jobwire.domain.limits import MAX_GRPC_MESSAGE_BYTES

log = logging.getLogger(__name__)

KEEPALIVE_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
)
MESSAGE_LIMIT_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.max_receive_message_length", MAX_GRPC_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_GRPC_MESSAGE_BYTES),
)
# For a reader that may stall (a browser downloading a result through the web gateway): with
# no BDP probing, a stream's receive window stays at HTTP/2's 64 KiB, so what a stalled
# reader's channel holds is that and a chunk, not the megabytes BDP grows it to (200 stalled
# downloads once took a gateway from 280 MB to 5.67 GB).
FIXED_WINDOW_OPTIONS: tuple[tuple[str, int], ...] = (("grpc.http2.bdp_probe", 0),)
# grpc's service config, the documented way to choose a policy (a target with one address
# is balanced over that one).
BALANCING_OPTIONS: tuple[tuple[str, str], ...] = (
    ("grpc.service_config", json.dumps({"loadBalancingConfig": [{"round_robin": {}}]})),
)
AUTHORIZATION = "authorization"
DEFAULT_TARGET = "127.0.0.1:50051"  # the servers' JOBWIRE_LISTEN default


@dataclass(frozen=True, kw_only=True)
class ChannelConfig:
    """Where jobwire is and how to reach it.

    Attributes:
        target: `host:port` (or any grpc target such as `dns:///jobapi:50051`, or
            `ipv4:10.0.0.1:50051,10.0.0.2:50051`); calls go round-robin over every address.
        token: bearer token sent as `authorization: Bearer <token>` on every call.
        tls_ca: CA bundle to trust; TLS is on when set or when `tls` is true.
        tls: use TLS with the system's trust store.
        tls_cert: client certificate for mutual TLS.
        tls_key: client key for mutual TLS.
    """

    target: str
    token: str | None = None
    tls_ca: Path | None = None
    tls: bool = False
    tls_cert: Path | None = None
    tls_key: Path | None = None

    @property
    def uses_tls(self) -> bool:
        return self.tls or self.tls_ca is not None


def config_from_env(env: Mapping[str, str], *, token: str | None = None) -> ChannelConfig:
    """Where jobwire is, as every client reads it: JOBWIRE_TARGET, and JOBWIRE_TLS_CA for TLS.

    The token is the caller's to give: jobctl reads JOBWIRE_TOKEN, the web gateway takes
    each person's own.
    """
    tls_ca = env.get("JOBWIRE_TLS_CA")
    return ChannelConfig(
        target=env.get("JOBWIRE_TARGET") or DEFAULT_TARGET,
        token=token,
        tls_ca=Path(tls_ca) if tls_ca else None,
    )


def bearer_metadata(token: str) -> tuple[tuple[str, str], ...]:
    """The metadata that carries `token`, as the servers' auth interceptor expects it."""
    return ((AUTHORIZATION, f"Bearer {token}"),)


def is_loopback(target: str) -> bool:
    """True when `target` names this machine (so plain text never leaves it)."""
    host = _host_of(target)
    if host in ("localhost", "") or target.startswith("unix:"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _host_of(target: str) -> str:
    for scheme in ("dns:///", "ipv4:", "ipv6:", "dns:"):
        target = target.removeprefix(scheme)
    if target.startswith("["):  # [::1]:50051
        return target[1 : target.find("]")]
    if target.count(":") == 1:  # host:port
        return target.split(":", 1)[0]
    return target  # a bare host, or a bare IPv6 address


def _tls_credentials(config: ChannelConfig) -> grpc.ChannelCredentials:
    root = config.tls_ca.read_bytes() if config.tls_ca else None
    key = config.tls_key.read_bytes() if config.tls_key else None
    cert = config.tls_cert.read_bytes() if config.tls_cert else None
    creds = grpc.ssl_channel_credentials(root, key, cert)
    if config.token:
        creds = grpc.composite_channel_credentials(creds, grpc.access_token_call_credentials(config.token))
    return creds


def _warn_plaintext(config: ChannelConfig) -> None:
    if config.token and not is_loopback(config.target):
        log.warning(
            "sending a bearer token without TLS to %s; anyone on the path can read it",
            config.target,
        )


def _options(extra: Sequence[tuple[str, int]] = ()) -> list[tuple[str, int | str]]:
    """The defaults above, each of them replaced by an `extra` option of the same name."""
    chosen: dict[str, int | str] = dict([*KEEPALIVE_OPTIONS, *MESSAGE_LIMIT_OPTIONS, *BALANCING_OPTIONS])
    chosen.update(extra)
    return list(chosen.items())


def sync_channel(config: ChannelConfig) -> grpc.Channel:
    """A blocking channel for `config` (JobClient, AdminClient, jobctl)."""
    if config.uses_tls:
        return grpc.secure_channel(config.target, _tls_credentials(config), options=_options())
    channel = grpc.insecure_channel(config.target, options=_options())
    if not config.token:
        return channel
    _warn_plaintext(config)
    return grpc.intercept_channel(channel, _SyncBearer(config.token))


def aio_channel(config: ChannelConfig, options: Sequence[tuple[str, int]] = ()) -> grpc.aio.Channel:
    """An asyncio channel for `config` (the worker runtime, the web gateway), with extra grpc `options`
    (which replace the defaults of their names: the worker's shorter keepalive)."""
    if config.uses_tls:
        return grpc.aio.secure_channel(config.target, _tls_credentials(config), options=_options(options))
    interceptors: list[grpc.aio.ClientInterceptor] = []
    if config.token:
        _warn_plaintext(config)
        interceptors = list(_aio_bearer(config.token))
    return grpc.aio.insecure_channel(config.target, options=_options(options), interceptors=interceptors or None)


class _CallDetails(NamedTuple):
    # grpc.ClientCallDetails is an abstract interface; a NamedTuple with its fields fits it.
    method: str
    timeout: float | None
    metadata: Sequence[tuple[str, str | bytes]] | None
    credentials: grpc.CallCredentials | None
    wait_for_ready: bool | None
    compression: grpc.Compression | None


# grpc ships no type stubs, so its base classes are Any to mypy: hence the ignores below.
class _SyncBearer(
    grpc.UnaryUnaryClientInterceptor,  # type: ignore[misc]
    grpc.UnaryStreamClientInterceptor,  # type: ignore[misc]
    grpc.StreamUnaryClientInterceptor,  # type: ignore[misc]
    grpc.StreamStreamClientInterceptor,  # type: ignore[misc]
):
    def __init__(self, token: str) -> None:
        self._metadata = bearer_metadata(token)

    def _details(self, details: grpc.ClientCallDetails) -> _CallDetails:
        metadata = [*(details.metadata or ()), *self._metadata]
        return _CallDetails(
            details.method,
            details.timeout,
            metadata,
            details.credentials,
            getattr(details, "wait_for_ready", None),
            getattr(details, "compression", None),
        )

    def intercept_unary_unary(self, continuation: Callable[..., Any], details: Any, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation: Callable[..., Any], details: Any, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_stream_unary(self, continuation: Callable[..., Any], details: Any, requests: Any) -> Any:
        return continuation(self._details(details), requests)

    def intercept_stream_stream(self, continuation: Callable[..., Any], details: Any, requests: Any) -> Any:
        return continuation(self._details(details), requests)


def _aio_details(details: grpc.aio.ClientCallDetails, token: str) -> grpc.aio.ClientCallDetails:
    metadata = grpc.aio.Metadata(*(details.metadata or ()), *bearer_metadata(token))
    return grpc.aio.ClientCallDetails(
        details.method,
        details.timeout,
        metadata,
        details.credentials,
        details.wait_for_ready,
    )


def _aio_bearer(token: str) -> tuple[grpc.aio.ClientInterceptor, ...]:
    # grpc.aio wants one interceptor object per call shape, unlike the sync API.
    class UnaryUnary(grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[misc]
        async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
            return await continuation(_aio_details(details, token), request)

    class UnaryStream(grpc.aio.UnaryStreamClientInterceptor):  # type: ignore[misc]
        async def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
            return await continuation(_aio_details(details, token), request)

    class StreamUnary(grpc.aio.StreamUnaryClientInterceptor):  # type: ignore[misc]
        async def intercept_stream_unary(self, continuation: Any, details: Any, requests: Any) -> Any:
            return await continuation(_aio_details(details, token), requests)

    class StreamStream(grpc.aio.StreamStreamClientInterceptor):  # type: ignore[misc]
        async def intercept_stream_stream(self, continuation: Any, details: Any, requests: Any) -> Any:
            return await continuation(_aio_details(details, token), requests)

    return (UnaryUnary(), UnaryStream(), StreamUnary(), StreamStream())
