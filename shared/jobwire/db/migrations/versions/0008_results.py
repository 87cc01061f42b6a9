"""results the server keeps: an artifact's inline bytes or the key of its upload in the result store

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-03 09:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_BLOB = sa.LargeBinary().with_variant(mysql.MEDIUMBLOB(), "mysql", "mariadb")


def upgrade() -> None:
    # Results made before are the worker's own URLs: neither column set.
    op.add_column("artifact", sa.Column("inline_data", _BLOB, nullable=True))
    op.add_column("artifact", sa.Column("stored_key", sa.String(length=200), nullable=True))
    op.create_index("ix_artifact_stored_key", "artifact", ["stored_key"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_artifact_stored_key", table_name="artifact")
    op.drop_column("artifact", "stored_key")
    op.drop_column("artifact", "inline_data")
