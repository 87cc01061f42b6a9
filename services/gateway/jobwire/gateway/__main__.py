"""`python -m jobwire.gateway`: serve the pages on JOBWIRE_GATEWAY_LISTEN."""

from __future__ import annotations

import sys

import uvicorn

from jobwire.gateway.app import build_app
from jobwire.gateway.settings import GatewaySettings


def main() -> int:
    try:
        settings = GatewaySettings.from_env()
    except ValueError as error:
        print(f"jobwire-gateway: {error}", file=sys.stderr)
        return 2
    uvicorn.run(build_app(settings), host=settings.host, port=settings.port, log_level="info")
    return 0


if __name__ == "__main__":
    sys.exit(main())
