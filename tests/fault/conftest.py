"""Fault-test fixtures: databases that survive a restart, a migrated MariaDB handle.

Servers with chosen settings come from tests/conftest.py's `servers`.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from databases import MysqlTemplate
from fault_support import mariadb_reachable, start_mariadb

from jobwire.db.engine import Database
from jobwire.db.migrate import upgrade


@pytest.fixture
def restartable_mysql_url(mysql_template: MysqlTemplate) -> Iterator[str]:
    """A database of this test's own (as tests/conftest.py's mysql_url) that a restart of the
    server during the test cannot strand: its removal starts the server again if it is down."""
    copy = mysql_template.copy()
    url = next(copy)
    try:
        yield url
    finally:
        if not mariadb_reachable(mysql_template.server_url + "/"):
            start_mariadb(mysql_template.server_url + "/")  # never leave the shared server down
        next(copy, None)


@pytest.fixture
def db(mysql_url: str) -> Iterator[Database]:
    """A migrated MariaDB database handle, for tests that write job_event rows themselves."""
    database = Database(mysql_url)
    upgrade(database)
    yield database
    database.dispose()
