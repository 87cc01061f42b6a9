"""schedules: jobs submitted from a template on a cron or a fixed period

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-30 23:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

_TIMESTAMP = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mariadb").with_variant(mysql.DATETIME(fsp=6), "mysql")
_BLOB = sa.LargeBinary().with_variant(mysql.MEDIUMBLOB(), "mysql", "mariadb")
_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "schedule",
        sa.Column("id", _ID, autoincrement=True, nullable=False),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("schedule_id", sa.String(length=64), nullable=False),
        sa.Column("cron", sa.String(length=200), nullable=True),
        sa.Column("every_s", sa.Float(), nullable=True),
        sa.Column("time_zone", sa.String(length=64), nullable=False),
        sa.Column("template", _BLOB, nullable=False),
        sa.Column("overlap", sa.String(length=8), nullable=False),
        sa.Column("catch_up", sa.String(length=8), nullable=False),
        sa.Column("paused", sa.Boolean(), server_default="0", nullable=False),
        sa.Column("next_fire_at", _TIMESTAMP, nullable=True),
        sa.Column("last_fire_at", _TIMESTAMP, nullable=True),
        sa.Column("last_job_no", sa.String(length=40), nullable=True),
        sa.Column("skipped_firings", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("created_at", _TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("tenant", "schedule_id", name="uq_schedule_id"),
        mysql_engine="InnoDB",
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
    )
    op.create_index("ix_schedule_due", "schedule", ["next_fire_at"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_schedule_due", table_name="schedule")
    op.drop_table("schedule")
