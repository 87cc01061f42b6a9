"""`python -m jobwire.gateway`: serve the pages on JOBWIRE_GATEWAY_LISTEN.

Once it listens it prints `jobwire gateway serving on http://HOST:PORT` (the port it got,
for a port 0), as `jobwire serve` prints its port, so a launcher (`make run`) can say where
the pages are. A port another program holds is refused in words with exit code 3
(`PORT_TAKEN`), never shared. With JOBWIRE_GATEWAY_METRICS_LISTEN it also serves GET /metrics
there and says on which port, first.
"""

from __future__ import annotations

import argparse
import errno
import socket
import sys
from collections.abc import Sequence

import uvicorn

from jobwire.gateway.app import build_app
from jobwire.gateway.settings import GatewaySettings
from jobwire.observe.metrics import MetricsEndpoint
from jobwire.observe.version import add_version_flag

PORT_TAKEN = 3
BACKLOG = 2048  # uvicorn's own
# A page's live stream never ends by itself, so a drain without a limit would wait for every
# open tab to close; past this the streams are cut and the browsers reconnect (to a new gateway).
SHUTDOWN_GRACE_S = 5


def listen(host: str, port: int) -> socket.socket:
    """A listening socket on `host:port` (port 0: any free one), as uvicorn would bind it."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    try:
        # SO_REUSEADDR lets a restart bind past old connections in TIME_WAIT; on Linux it
        # never lets two listeners share a port (SO_REUSEPORT would; it is not set).
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(BACKLOG)  # from here a browser waits in the backlog rather than being refused
    except OSError:
        sock.close()
        raise
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m jobwire.gateway",
        description="Serve the jobwire web pages on JOBWIRE_GATEWAY_LISTEN for the job service at JOBWIRE_TARGET.",
    )
    add_version_flag(parser, "jobwire-gateway")
    parser.parse_args(argv)
    try:
        settings = GatewaySettings.from_env()
    except ValueError as error:
        print(f"jobwire-gateway: {error}", file=sys.stderr)
        return 2
    try:
        sock = listen(settings.host, settings.port)
    except OSError as error:
        return _refused("JOBWIRE_GATEWAY_LISTEN", f"{settings.host}:{settings.port}", error)
    app = build_app(settings)
    endpoint = MetricsEndpoint(app.state.metrics)
    if settings.metrics_listen:
        try:
            metrics_port = endpoint.start(settings.metrics_listen)
        except OSError as error:
            sock.close()
            return _refused("JOBWIRE_GATEWAY_METRICS_LISTEN", settings.metrics_listen, error)
        print(f"jobwire gateway metrics at GET /metrics on port {metrics_port}", flush=True)
    print(f"jobwire gateway serving on {url_of(sock)}", flush=True)
    config = uvicorn.Config(
        app, host=settings.host, port=settings.port, log_level="info", timeout_graceful_shutdown=SHUTDOWN_GRACE_S
    )
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        endpoint.close()
    return 0


def _refused(variable: str, address: str, error: OSError) -> int:
    """Why `address` cannot be listened on, in words; the exit code that says so."""
    taken = error.errno == errno.EADDRINUSE
    why = "another program is listening there" if taken else error.strerror or str(error)
    print(f"jobwire-gateway: cannot listen on {address}: {why}; set {variable} to another host:port", file=sys.stderr)
    return PORT_TAKEN if taken else 2


if __name__ == "__main__":
    sys.exit(main())
