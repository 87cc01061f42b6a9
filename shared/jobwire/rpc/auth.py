"""Who is calling: bearer tokens from the TOML auth file, checked per service role.

Tokens are stored as SHA-256, so the file holds nothing a thief could replay. Without an
auth file every caller is the anonymous tenant "default" with every role; the server
then refuses to listen beyond loopback (see server.py).
"""

from __future__ import annotations

import contextvars
import hashlib
import hmac
import logging
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jobwire.domain.commands import EVERY_TENANT, Scope
from jobwire.domain.errors import PermissionDenied, Unauthenticated
from jobwire.domain.limits import CONTROL

MAX_NAME_CHARS = 64  # a token's `name`, shown in the evidence trail

log = logging.getLogger(__name__)

ROLES = ("client", "worker", "admin")
SERVICE_ROLES = {
    "jobwire.v1.JobService": "client",
    "jobwire.v1.ScheduleService": "client",
    "jobwire.v1.WorkerService": "worker",
    "jobwire.v1.AdminService": "admin",
    # Operations are jobs seen by a generic long-running-operations client: JobService's callers.
    "google.longrunning.Operations": "client",
}
# What an UNAUTHENTICATED caller is told: what to send next.
_NO_TOKEN = "this server asks every call for a token: send the header authorization: Bearer <token>"
_UNKNOWN_TOKEN = "this token is not in the server's auth file (JOBWIRE_AUTH_FILE): check it, or ask for one"
# Methods a role besides their service's may call: a review is decided, and a failed job
# retried, by a person, through a backend (client) or an operator's console (admin). A
# forced Retry (RetryRequest.force) asks the admin role itself (`Principal.check_role`).
# The console's schedules pages read, pause, resume and delete with an operator's admin
# token too; making a schedule stays a client's, as submitting a job does.
_CLIENT_OR_ADMIN = frozenset({"client", "admin"})
METHOD_ROLES = {
    "jobwire.v1.JobService/Resolve": _CLIENT_OR_ADMIN,
    "jobwire.v1.JobService/Retry": _CLIENT_OR_ADMIN,
    "jobwire.v1.ScheduleService/GetSchedule": _CLIENT_OR_ADMIN,
    "jobwire.v1.ScheduleService/ListSchedules": _CLIENT_OR_ADMIN,
    "jobwire.v1.ScheduleService/ListScheduleJobs": _CLIENT_OR_ADMIN,
    "jobwire.v1.ScheduleService/PauseSchedule": _CLIENT_OR_ADMIN,
    "jobwire.v1.ScheduleService/ResumeSchedule": _CLIENT_OR_ADMIN,
    "jobwire.v1.ScheduleService/DeleteSchedule": _CLIENT_OR_ADMIN,
}


@dataclass(frozen=True, kw_only=True)
class Principal:
    """A caller: its tenant, roles and queues, and the name the evidence trail calls it by."""

    tenant: str
    roles: frozenset[str]
    queues: frozenset[str]
    name: str

    @property
    def scope(self) -> Scope:
        """What this caller may see: its tenant's jobs in its queues (every read and change is scoped by it)."""
        return Scope(tenant=self.tenant, queues=None if "*" in self.queues else self.queues)

    def may_use(self, queue: str) -> bool:
        return "*" in self.queues or queue in self.queues

    def check_queue(self, queue: str) -> None:
        if not self.may_use(queue):
            raise PermissionDenied(
                f"this token may not use queue {queue!r}: its queues are {', '.join(sorted(self.queues))}"
                " (the auth file's queues = [...])"
            )

    def check_role(self, role: str, to: str) -> None:
        """PERMISSION_DENIED unless this caller has `role`; `to` says what it was needed for."""
        if role not in self.roles:
            raise PermissionDenied(f"only a token with the {role} role may {to}")


ANONYMOUS = Principal(tenant="default", roles=frozenset(ROLES), queues=frozenset({"*"}), name="anonymous")
_current: contextvars.ContextVar[Principal] = contextvars.ContextVar("jobwire_principal", default=ANONYMOUS)


def current() -> Principal:
    """The caller of the RPC being served."""
    return _current.get()


def load_tokens(path: Path) -> dict[str, Principal]:
    """sha256 hex -> principal, from the TOML auth file (docs/security.md).

    A worker token with `tenant = "*"` belongs to a shared fleet: its workers serve their
    queues for every tenant, in turns (jobwire.process_state.turns).

    Every entry names its queues: a forgotten `queues` line must not grant every queue, so
    all of them takes `queues = ["*"]`, written on purpose. An entry has `role = "admin"`
    or, for an operator who needs one token for several services, `roles = ["client", "admin"]`.
    An optional `name = "alice"` is what the evidence trail calls the token's holder (who
    forced a retry); without it, the first 8 hex digits of its sha256.
    """
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    tokens: dict[str, Principal] = {}
    for number, entry in enumerate(data.get("token", []), start=1):
        where = f"auth file {path.name}, token {number}"
        missing = [key for key in ("sha256", "tenant", "queues") if key not in entry]
        if "role" not in entry and "roles" not in entry:
            missing.insert(2, "role")
        if missing:
            hint = ' (write queues = ["*"] for every queue)' if "queues" in missing else ""
            raise ValueError(f"{where}: missing {', '.join(missing)}{hint}")
        queues = entry["queues"]
        if not isinstance(queues, list) or not queues or not all(isinstance(q, str) and q for q in queues):
            raise ValueError(f'{where}: queues must be a non-empty list of queue names, or ["*"]')
        tenant, roles = str(entry["tenant"]), _roles(entry, where)
        if not tenant:
            raise ValueError(f"{where}: tenant must not be empty")
        if tenant == EVERY_TENANT and roles != {"worker"}:
            # A shared fleet's workers serve every tenant's queues of their names; nothing else may
            # act for every tenant.
            raise ValueError(f'{where}: tenant = "*" (a shared fleet) is for worker tokens only: role = "worker"')
        digest = str(entry["sha256"]).lower()
        name = entry.get("name", digest[:8])
        if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME_CHARS or CONTROL.search(name):
            raise ValueError(f"{where}: name must be 1 to {MAX_NAME_CHARS} characters of plain text")
        tokens[digest] = Principal(tenant=tenant, roles=roles, queues=frozenset(queues), name=name.strip())
    return tokens


def _roles(entry: Mapping[str, Any], where: str) -> frozenset[str]:
    if "role" in entry and "roles" in entry:
        raise ValueError(f"{where}: write role or roles, not both")
    roles = entry["roles"] if "roles" in entry else [entry["role"]]
    if not isinstance(roles, list) or not roles:
        raise ValueError(f'{where}: roles must be a non-empty list, e.g. ["client", "admin"]')
    unknown = [role for role in roles if role not in ROLES]
    if unknown:
        raise ValueError(f"{where}: unknown role {unknown[0]!r}")
    return frozenset(roles)


class Authenticator:
    """Resolves the caller of each RPC from its bearer token (jobwire.rpc.handlers calls it)."""

    def __init__(self, tokens: Mapping[str, Principal] | None) -> None:
        self._tokens = tokens

    def reload(self, path: Path) -> bool:
        """Read the auth file again (on SIGHUP); a bad file is logged and the tokens in use kept.

        Calls already running, open streams included, keep the caller they were let in as:
        a token is checked when a call starts. The next call sees the new tokens.
        """
        try:
            tokens = load_tokens(path)
        except (OSError, ValueError) as error:  # tomllib's errors are ValueErrors
            log.error("auth file not reloaded, the tokens in use are kept: %s", error)
            return False
        self._tokens = tokens  # one reference swap: a call sees the old or the new map, whole
        log.info("auth file reloaded: %d tokens", len(tokens))
        return True

    def resolve(self, method: str, metadata: Any) -> Principal:
        full_name = method.lstrip("/")
        service = full_name.split("/", 1)[0]
        role = SERVICE_ROLES.get(service)
        if self._tokens is None or role is None:
            return ANONYMOUS
        bearer = next((v for k, v in metadata or () if k == "authorization"), "")
        scheme, _, token = str(bearer).partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise Unauthenticated(_NO_TOKEN)
        digest = hashlib.sha256(token.encode()).hexdigest()
        principal = next((p for h, p in self._tokens.items() if hmac.compare_digest(h, digest)), None)
        if principal is None:
            raise Unauthenticated(_UNKNOWN_TOKEN)
        needed = METHOD_ROLES.get(full_name, frozenset({role}))
        if not principal.roles & needed:
            raise PermissionDenied(
                f"{full_name} needs a token with the {' or '.join(sorted(needed))} role;"
                f" this one has {', '.join(sorted(principal.roles))}"
            )
        return principal


def set_current(principal: Principal) -> None:
    """Make `principal` the caller of the RPC being served (its task's context)."""
    _current.set(principal)
