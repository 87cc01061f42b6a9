"""commit markers: tell a COMMIT whose reply was lost from one that failed

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 15:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "commit_marker",
        sa.Column("id", sa.String(length=24), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
        mysql_engine="InnoDB",
    )


def downgrade() -> None:
    op.drop_table("commit_marker")
