"""queue_limits: a queue's concurrency limit, token bucket and pause, shared by every replica

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-30 22:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

Timestamp = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def upgrade() -> None:
    op.create_table(
        "queue_limits",
        sa.Column("tenant", sa.String(64), primary_key=True),
        sa.Column("queue", sa.String(64), primary_key=True),
        sa.Column("max_running", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("rate_per_second", sa.Float(), nullable=False, server_default="0"),
        sa.Column("burst", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("paused", sa.Boolean(), nullable=False, server_default="0"),
        sa.Column("tokens", sa.Float(), nullable=False, server_default="0"),
        sa.Column("refilled_at", Timestamp, nullable=False),
        mysql_engine="InnoDB",
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
    )


def downgrade() -> None:
    op.drop_table("queue_limits")
