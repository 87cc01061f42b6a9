"""worker_claim: when a worker last claimed for each queue and job type (NO_WORKER)

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02 10:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

_TIMESTAMP = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mariadb").with_variant(mysql.DATETIME(fsp=6), "mysql")


def upgrade() -> None:
    # Starts empty: until each worker's next claim, its kinds read as never claimed for.
    op.create_table(
        "worker_claim",
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("queue", sa.String(length=64), nullable=False),
        sa.Column("job_type", sa.String(length=64), nullable=False),
        sa.Column("claimed_at", _TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("tenant", "queue", "job_type"),
        mysql_engine="InnoDB",
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
    )


def downgrade() -> None:
    op.drop_table("worker_claim")
