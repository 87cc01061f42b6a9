"""Test databases: each test gets a database of its own, already at the schema's head.

Migrating is the slow part (Alembic's 16 revisions take ~0.6 s on SQLite and 2-4 s on
MariaDB), so each pytest process migrates one template per kind, once, and every test gets a
copy: the SQLite file copied, or on MariaDB the template's tables re-created from their own
`SHOW CREATE TABLE` (foreign keys included, which `CREATE TABLE ... LIKE` would drop) and its
rows (alembic_version) copied. Tests about migrations themselves ask for an empty database.
"""

from __future__ import annotations

import contextlib
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import sqlalchemy as sa

from jobwire.db.engine import Database
from jobwire.db.migrate import upgrade


def _new_name() -> str:
    return f"jobwire_test_{uuid.uuid4().hex[:10]}"


def migrated_sqlite_template(folder: Path) -> Path:
    """A SQLite file at head, written once; WAL checkpointed into it so a copy is whole."""
    path = folder / "template.db"
    db = Database(f"sqlite:///{path}")
    upgrade(db)
    with db.engine.connect() as conn:
        conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    db.dispose()
    return path


def sqlite_copy(template: Path, folder: Path) -> str:
    path = folder / "jobwire.db"
    shutil.copyfile(template, path)
    return f"sqlite:///{path}"


class MysqlTemplate:
    """A MariaDB database migrated once, and what it takes to make a copy of it."""

    def __init__(self, server_url: str) -> None:
        self.server_url = server_url
        self.name = f"jobwire_template_{uuid.uuid4().hex[:10]}"
        self.admin = sa.create_engine(server_url + "/", pool_pre_ping=True)  # survives a server restart
        with self.admin.connect() as conn:
            conn.execute(sa.text(f"CREATE DATABASE {self.name} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"))
        db = Database(f"{server_url}/{self.name}")
        upgrade(db)
        db.dispose()
        with self.admin.connect() as conn:
            tables = (
                conn.execute(
                    sa.text("SELECT table_name FROM information_schema.tables WHERE table_schema = :db"),
                    {"db": self.name},
                )
                .scalars()
                .all()
            )
            self.creates = [conn.exec_driver_sql(f"SHOW CREATE TABLE {self.name}.`{t}`").one()[1] for t in tables]
            self.filled = [
                t for t in tables if conn.exec_driver_sql(f"SELECT 1 FROM {self.name}.`{t}` LIMIT 1").first()
            ]

    def copy(self) -> Iterator[str]:
        """A database at head of its own for one test, dropped after it."""
        name = _new_name()
        with self.admin.begin() as conn:
            conn.execute(sa.text(f"CREATE DATABASE {name} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"))
            conn.exec_driver_sql(f"USE {name}")
            conn.exec_driver_sql("SET SESSION foreign_key_checks = 0")
            for create in self.creates:
                conn.exec_driver_sql(create)
            for table in self.filled:
                conn.exec_driver_sql(f"INSERT INTO `{table}` SELECT * FROM {self.name}.`{table}`")
            conn.exec_driver_sql("SET SESSION foreign_key_checks = 1")
        try:
            yield f"{self.server_url}/{name}"
        finally:
            drop_mysql_database(self.admin, name)

    def close(self) -> None:
        drop_mysql_database(self.admin, self.name)
        self.admin.dispose()


def empty_mysql_database(server_url: str) -> Iterator[str]:
    """A database with no tables, for tests of migrating one."""
    name = _new_name()
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
