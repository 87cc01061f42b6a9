"""The gateway's settings, read once from the environment."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from jobwire.client.channel import ChannelConfig, config_from_env

DEFAULT_LISTEN = "127.0.0.1:8080"
DEFAULT_MAX_STREAMS = 16  # live streams one person holds open: tabs of jobs and job pages
DEFAULT_MAX_WATCHED = 2000  # jobs those streams watch in all (a jobs page watches up to 120)


@dataclass(frozen=True, kw_only=True)
class GatewaySettings:
    """Where the gateway listens and where the job service is.

    Attributes:
        host, port: JOBWIRE_GATEWAY_LISTEN, `host:port` (default 127.0.0.1:8080).
        service: JOBWIRE_TARGET and JOBWIRE_TLS_CA, read as jobctl reads them; no token:
            each person's own rides on their calls.
        origin: JOBWIRE_GATEWAY_ORIGIN, the origin browsers reach the pages at
            (`https://jobs.example.com`) when a proxy in front rewrites the Host header;
            empty: a POST's Origin must name the host the request was sent to.
        max_streams, max_watched: JOBWIRE_GATEWAY_MAX_STREAMS and
            JOBWIRE_GATEWAY_MAX_WATCHED, what one person's live streams may hold (budget.py).
        metrics_listen: JOBWIRE_GATEWAY_METRICS_LISTEN, `host:port` of GET /metrics
            (metrics.py); None: not served.
    """

    host: str = "127.0.0.1"
    port: int = 8080
    service: ChannelConfig
    origin: str = ""
    max_streams: int = DEFAULT_MAX_STREAMS
    max_watched: int = DEFAULT_MAX_WATCHED
    metrics_listen: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> GatewaySettings:
        env = os.environ if env is None else env
        host, port = _host_port("JOBWIRE_GATEWAY_LISTEN", env.get("JOBWIRE_GATEWAY_LISTEN") or DEFAULT_LISTEN)
        metrics = env.get("JOBWIRE_GATEWAY_METRICS_LISTEN") or None
        if metrics:
            _host_port("JOBWIRE_GATEWAY_METRICS_LISTEN", metrics)
        origin = (env.get("JOBWIRE_GATEWAY_ORIGIN") or "").rstrip("/")
        if origin and not (origin.startswith(("http://", "https://")) and "/" not in origin.split("://", 1)[1]):
            raise ValueError("JOBWIRE_GATEWAY_ORIGIN must be scheme://host[:port], such as https://jobs.example.com")
        return cls(
            host=host, port=port, service=config_from_env(env), origin=origin,
            max_streams=_positive(env, "JOBWIRE_GATEWAY_MAX_STREAMS", DEFAULT_MAX_STREAMS),
            max_watched=_positive(env, "JOBWIRE_GATEWAY_MAX_WATCHED", DEFAULT_MAX_WATCHED),
            metrics_listen=metrics,
        )  # fmt: skip


def _host_port(name: str, text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"{name} must be host:port, such as {DEFAULT_LISTEN}")
    return host.strip("[]"), int(port)


def _positive(env: Mapping[str, str], name: str, default: int) -> int:
    text = env.get(name) or str(default)
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"{name} must be a whole number of at least 1")
    return int(text)
