"""Fault-test fixtures: databases that survive a restart, a migrated MariaDB handle.

Servers with chosen settings come from tests/conftest.py's `servers`.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from fault_support import mariadb_reachable, start_mariadb
from mysql_databases import drop_mysql_database

from jobwire.db.engine import Database
from jobwire.db.migrate import upgrade


@pytest.fixture
def restartable_mysql_url(mysql_server: str) -> Iterator[str]:
    """A fresh MySQL database that survives a server restart during the test.

    Like tests/conftest.py's mysql_url, but its admin engine pings before reuse: after a
    restart the connection that created the database is gone, and DROP must not fail.
    """
    name = f"jobwire_test_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(mysql_server + "/", pool_pre_ping=True)
    with admin.connect() as conn:
        conn.execute(sa.text(f"CREATE DATABASE {name} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"))
    try:
        yield f"{mysql_server}/{name}"
    finally:
        if not mariadb_reachable(mysql_server + "/"):
            start_mariadb(mysql_server + "/")  # never leave the shared server down
        drop_mysql_database(admin, name)
        admin.dispose()


@pytest.fixture
def db(mysql_url: str) -> Iterator[Database]:
    """A migrated MariaDB database handle, for tests that write job_event rows themselves."""
    database = Database(mysql_url)
    upgrade(database)
    yield database
    database.dispose()
