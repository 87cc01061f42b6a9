"""Create or upgrade the schema through Alembic (`python -m jobwire migrate`), or check it is current.

MySQL DDL is not transactional: two servers upgrading one empty database at once (a
jobapi and a worker service starting together) collided on "table already exists". An
upgrade on MySQL holds a named lock for its database, so a second one waits and then
finds the schema current.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy as sa

from jobwire.db.engine import Database

if TYPE_CHECKING:
    from alembic.config import Config

log = logging.getLogger(__name__)

MIGRATIONS = Path(__file__).with_name("migrations")
# The newest revision under migrations/versions, which the code needs: a start compares it
# with the database's without importing Alembic (~150 ms of every process's start);
# tests/unit/test_migration_head.py keeps it Alembic's head.
HEAD = "0020"
LOCK_WAIT_S = 120  # an upgrade of a large table may take this long; a waiting one gives up after


class NotServable(Exception):
    """The database cannot be served as it is: a server stops at start, saying why in one line."""


class SchemaNotCurrent(NotServable):
    """The database's schema is not the one this server needs, and it may not upgrade it."""


class DatabaseUnreachable(NotServable):
    """The database did not let this server in (down, a wrong host or port, user or password,
    a MySQL database not created)."""


def alembic_config(db: Database) -> Config:
    from alembic.config import Config  # Alembic loads only when a schema changes

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["database"] = db
    return config


def current_revision(db: Database) -> str | None:
    """The database's revision, or None before its first migration (no alembic_version yet);
    DatabaseUnreachable when it cannot be reached (the first statement a server sends)."""
    try:
        conn = db.engine.connect()
    except sa.exc.DBAPIError as exc:
        what_to_check = (
            "its host, port, user, password and database name, that the server is up, and that the database"
            " was created (CREATE DATABASE)"
            if db.is_mysql
            else "that the file's folder exists and this process may write there"
        )
        raise DatabaseUnreachable(
            f"cannot reach the database {db.url.render_as_string(hide_password=True)}: {exc.orig};"
            f" check JOBWIRE_DATABASE_URL: {what_to_check}"
        ) from None
    with conn:
        try:
            found = conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalars().all()
        except sa.exc.DBAPIError:  # no such table: never migrated (any other trouble, the upgrade meets it)
            return None
    return found[0] if len(found) == 1 else None


def upgrade(db: Database, revision: str = "head") -> None:
    before = current_revision(db)
    if revision == "head" and before == HEAD:
        return  # current already (every start but the first): no lock taken, no Alembic run
    with _alembic_quiet():
        _upgrade(db, revision)
    after = current_revision(db)
    if after != before:
        log.info("database schema upgraded from revision %s to %s", before or "none (a new database)", after)


def _upgrade(db: Database, revision: str) -> None:
    from alembic import command

    config = alembic_config(db)
    lock = _lock_name(db)
    with db.engine.connect() as conn:
        if (
            lock is not None
            and conn.execute(sa.text("SELECT GET_LOCK(:n, :s)"), {"n": lock, "s": LOCK_WAIT_S}).scalar() != 1
        ):
            raise SchemaNotCurrent(f"another upgrade of this database held its lock for {LOCK_WAIT_S} s")
        conn.commit()  # a named lock is the session's: it outlives the transaction
        try:
            # Committed before the lock is let go: released first, the last revision's
            # alembic_version update was still uncommitted, and an upgrade waiting on the lock
            # read the revision before it and ran that migration again ("Duplicate column").
            with conn.begin():
                config.attributes["connection"] = conn
                command.upgrade(config, revision)
        finally:
            if lock is not None:
                conn.execute(sa.text("SELECT RELEASE_LOCK(:n)"), {"n": lock})
                conn.commit()


@contextmanager
def _alembic_quiet() -> Iterator[None]:
    """Alembic's own INFO lines (a plugin and a revision each: 30 lines before a new
    database's first start says it serves) only when asked for: JOBWIRE_LOG_LEVEL=DEBUG."""
    alembic = logging.getLogger("alembic")
    level = alembic.level
    if not log.isEnabledFor(logging.DEBUG):
        alembic.setLevel(logging.WARNING)
    try:
        yield
    finally:
        alembic.setLevel(level)


def check_current(db: Database) -> None:
    """Raise SchemaNotCurrent unless the database is at this code's head revision."""
    current = current_revision(db)
    if current != HEAD:
        raise SchemaNotCurrent(
            f"the database schema is at revision {current or 'none'} and this server needs {HEAD}: "
            "run `python -m jobwire migrate` (or start with JOBWIRE_MIGRATE=1)"
        )


def _lock_name(db: Database) -> str | None:
    # Per database: upgrades of two databases on one server need not wait for each other.
    return f"jobwire-schema:{db.url.database}"[:64] if db.is_mysql else None
