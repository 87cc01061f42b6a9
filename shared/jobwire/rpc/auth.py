"""Who is calling: bearer tokens from the TOML auth file, checked per service role.

Tokens are stored as SHA-256, so the file holds nothing a thief could replay. Without an
auth file every caller is the anonymous tenant "default" with every role; the server
then refuses to listen beyond loopback (see server.py).
"""

from __future__ import annotations

import contextvars
import hashlib
import hmac
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jobwire.domain.errors import PermissionDenied, Unauthenticated

ROLES = ("client", "worker", "admin")
SERVICE_ROLES = {
    "jobwire.v1.JobService": "client",
    "jobwire.v1.ScheduleService": "client",
    "jobwire.v1.WorkerService": "worker",
    "jobwire.v1.AdminService": "admin",
    # Operations are jobs seen by a generic long-running-operations client: JobService's callers.
    "google.longrunning.Operations": "client",
}
# Methods a role besides their service's may call: a review is decided by a person, through
# a backend (client) or an operator's console (admin).
METHOD_ROLES = {
    "jobwire.v1.JobService/Resolve": frozenset({"client", "admin"}),
}


@dataclass(frozen=True, kw_only=True)
class Principal:
    tenant: str
    roles: frozenset[str]
    queues: frozenset[str]

    def may_use(self, queue: str) -> bool:
        return "*" in self.queues or queue in self.queues

    def check_queue(self, queue: str) -> None:
        if not self.may_use(queue):
            raise PermissionDenied(f"this token may not use queue {queue!r}")


ANONYMOUS = Principal(tenant="default", roles=frozenset(ROLES), queues=frozenset({"*"}))
_current: contextvars.ContextVar[Principal] = contextvars.ContextVar("jobwire_principal", default=ANONYMOUS)


def current() -> Principal:
    """The caller of the RPC being served."""
    return _current.get()


def load_tokens(path: Path) -> dict[str, Principal]:
    """sha256 hex -> principal, from the TOML auth file (DESIGN.md §7).

    Every entry names its queues: a forgotten `queues` line must not grant every queue, so
    all of them takes `queues = ["*"]`, written on purpose.
    """
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    tokens: dict[str, Principal] = {}
    for number, entry in enumerate(data.get("token", []), start=1):
        where = f"auth file {path.name}, token {number}"
        missing = [key for key in ("sha256", "tenant", "role", "queues") if key not in entry]
        if missing:
            hint = ' (write queues = ["*"] for every queue)' if "queues" in missing else ""
            raise ValueError(f"{where}: missing {', '.join(missing)}{hint}")
        role, queues = entry["role"], entry["queues"]
        if role not in ROLES:
            raise ValueError(f"{where}: unknown role {role!r}")
        if not isinstance(queues, list) or not queues or not all(isinstance(q, str) and q for q in queues):
            raise ValueError(f'{where}: queues must be a non-empty list of queue names, or ["*"]')
        tokens[str(entry["sha256"]).lower()] = Principal(
            tenant=str(entry["tenant"]), roles=frozenset({role}), queues=frozenset(queues)
        )
    return tokens


class Authenticator:
    """Resolves the caller of each RPC from its bearer token (jobwire.rpc.handlers calls it)."""

    def __init__(self, tokens: Mapping[str, Principal] | None) -> None:
        self._tokens = tokens

    def resolve(self, method: str, metadata: Any) -> Principal:
        full_name = method.lstrip("/")
        service = full_name.split("/", 1)[0]
        role = SERVICE_ROLES.get(service)
        if self._tokens is None or role is None:
            return ANONYMOUS
        bearer = next((v for k, v in metadata or () if k == "authorization"), "")
        scheme, _, token = str(bearer).partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise Unauthenticated()
        digest = hashlib.sha256(token.encode()).hexdigest()
        principal = next((p for h, p in self._tokens.items() if hmac.compare_digest(h, digest)), None)
        if principal is None:
            raise Unauthenticated()
        if not principal.roles & METHOD_ROLES.get(full_name, frozenset({role})):
            raise PermissionDenied(f"this token is not allowed to call {full_name}")
        return principal


def set_current(principal: Principal) -> None:
    """Make `principal` the caller of the RPC being served (its task's context)."""
    _current.set(principal)
