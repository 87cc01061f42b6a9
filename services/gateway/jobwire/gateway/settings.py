"""The gateway's settings, read once from the environment."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from jobwire.client.channel import ChannelConfig, config_from_env

DEFAULT_LISTEN = "127.0.0.1:8080"


@dataclass(frozen=True, kw_only=True)
class GatewaySettings:
    """Where the gateway listens and where the job service is.

    Attributes:
        host, port: JOBWIRE_GATEWAY_LISTEN, `host:port` (default 127.0.0.1:8080).
        service: JOBWIRE_TARGET and JOBWIRE_TLS_CA, read as jobctl reads them; no token:
            each person's own rides on their calls.
    """

    host: str = "127.0.0.1"
    port: int = 8080
    service: ChannelConfig

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> GatewaySettings:
        env = os.environ if env is None else env
        host, _, port = (env.get("JOBWIRE_GATEWAY_LISTEN") or DEFAULT_LISTEN).rpartition(":")
        if not host or not port.isdigit():
            raise ValueError("JOBWIRE_GATEWAY_LISTEN must be host:port, such as 127.0.0.1:8080")
        return cls(host=host.strip("[]"), port=int(port), service=config_from_env(env))
