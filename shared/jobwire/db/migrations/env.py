"""Alembic environment: migrations run on a connection jobwire hands in (see migrate.py)."""

from __future__ import annotations

from alembic import context

from jobwire.db.tables import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata, compare_type=True)
with context.begin_transaction():
    context.run_migrations()
