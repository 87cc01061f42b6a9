"""Auth files for tests: tokens in plain text here, their SHA-256 in the file a server reads.

Beside tests/conftest.py, so every test folder imports this one copy.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Token:
    secret: str
    tenant: str = "default"
    role: str = "client"  # client, worker or admin
    queues: tuple[str, ...] = ("*",)
    roles: tuple[str, ...] = ()  # when given, written as `roles = [...]` instead of `role`
    name: str = ""  # when given, the entry's `name` (else the server names it by its digest)

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        """gRPC call metadata that presents this token."""
        return (("authorization", f"Bearer {self.secret}"),)


def write_auth_file(path: Path, tokens: Iterable[Token]) -> Path:
    entries = []
    for token in tokens:
        digest = hashlib.sha256(token.secret.encode()).hexdigest()
        queues = ", ".join(f'"{q}"' for q in token.queues)
        listed = ", ".join(f'"{r}"' for r in token.roles)
        roles = f"roles = [{listed}]" if token.roles else f'role = "{token.role}"'
        named = f'name = "{token.name}"\n' if token.name else ""
        entries.append(
            f'[[token]]\nsha256 = "{digest}"\ntenant = "{token.tenant}"\n{roles}\nqueues = [{queues}]\n{named}'
        )
    path.write_text("\n".join(entries), encoding="utf-8")
    return path
