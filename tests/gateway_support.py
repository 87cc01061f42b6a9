"""The web gateway served by a real uvicorn on a port-0 socket, in a thread, for any test folder.

Beside tests/conftest.py (like served.py), so the service tests and the browser test start
it the one way. The thread has its own event loop, so a test's loop (and an in-process
jobwire server on it) keeps running while the gateway answers.
"""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import httpx
import uvicorn
from auth_files import Token

from jobwire.client import ChannelConfig
from jobwire.gateway.app import build_app
from jobwire.gateway.session import CSRF_COOKIE
from jobwire.gateway.settings import GatewaySettings


@contextmanager
def running_gateway(target: str, timeout: float = 10.0, **settings: Any) -> Iterator[str]:
    """A gateway in front of the job service at `target` (with GatewaySettings overrides); yields its base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    app = build_app(GatewaySettings(service=ChannelConfig(target=target), **settings))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off", timeout_graceful_shutdown=1))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True, name="gateway")
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise AssertionError("the gateway did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout)
        sock.close()


def visible_actions(html: str) -> set[str]:
    """The job page's actions a person can see (cancel, retry, download): not `hidden`."""
    found = re.findall(r"<(?:form|a)\b([^>]*)\bdata-action=\"(\w+)\"([^>]*)>", html)
    return {name for before, name, after in found if " hidden" not in before + after}


def hidden_rows(html: str) -> set[str]:
    """The job page's optional rows (result, why it failed) not shown: `hidden`."""
    found = re.findall(r"<div data-optional=\"(\w+)\"([^>]*)>", html)
    return {name for name, rest in found if " hidden" in rest}


def browser(gateway: str, **headers: str) -> httpx.AsyncClient:
    """A client that sends what a browser on the gateway's own pages sends: their Origin."""
    return httpx.AsyncClient(base_url=gateway, headers={"Origin": gateway, **headers}, timeout=10)


async def sign_in(client: httpx.AsyncClient, secret: str) -> httpx.Response:
    """The sign-in form (its CSRF cookie), then its POST, as a browser sends it (with Origin)."""
    form = await client.get("/signin")
    assert form.status_code == 200
    return await client.post("/signin", data={"token": secret, "csrf": client.cookies[CSRF_COOKIE]})


@asynccontextmanager
async def signed_in(gateway: str, token: Token, **headers: str) -> AsyncIterator[httpx.AsyncClient]:
    """A browser signed in with `token` (its session and CSRF cookies set)."""
    async with browser(gateway, **headers) as client:
        reply = await sign_in(client, token.secret)
        assert reply.status_code == 303, reply.text
        yield client
