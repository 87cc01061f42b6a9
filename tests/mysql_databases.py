"""Databases of their own on the shared MariaDB server, one per test, and their removal."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator

import sqlalchemy as sa


def fresh_mysql_database(server_url: str) -> Iterator[str]:
    name = f"jobwire_test_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(server_url + "/", pool_pre_ping=True)  # survives a server restart
    with admin.connect() as conn:
        conn.execute(sa.text(f"CREATE DATABASE {name} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"))
    try:
        yield f"{server_url}/{name}"
    finally:
        drop_mysql_database(admin, name)
        admin.dispose()


def drop_mysql_database(admin: sa.Engine, name: str) -> None:
    """DROP a test's database, first ending the sessions still using it.

    A server a test left open (or one whose transaction a restart cut) holds a metadata lock
    that DROP would wait on until the test's timeout.
    """
    with admin.connect() as conn:
        sessions = (
            conn.execute(
                sa.text("SELECT id FROM information_schema.processlist WHERE db = :db AND id <> CONNECTION_ID()"),
                {"db": name},
            )
            .scalars()
            .all()
        )
        for session in sessions:
            with contextlib.suppress(sa.exc.OperationalError):  # it ended on its own meanwhile
                conn.execute(sa.text(f"KILL {int(session)}"))
        conn.execute(sa.text(f"DROP DATABASE IF EXISTS {name}"))
