"""schedule_tenant and schedule_run: a per-tenant lock for the schedule cap, and when the schedule loops ran

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-01 17:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

_TIMESTAMP = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mariadb").with_variant(mysql.DATETIME(fsp=6), "mysql")
_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_MYSQL = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin"}


def upgrade() -> None:
    op.create_table(
        "schedule_tenant",
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint("tenant"),
        **_MYSQL,
    )
    op.create_table(
        "schedule_run",
        sa.Column("id", _ID, autoincrement=True, nullable=False),
        sa.Column("started_at", _TIMESTAMP, nullable=False),
        sa.Column("last_at", _TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("id"),
        **_MYSQL,
    )


def downgrade() -> None:
    op.drop_table("schedule_run")
    op.drop_table("schedule_tenant")
