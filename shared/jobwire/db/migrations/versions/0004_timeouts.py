"""timeouts: a job's time limits, the deadlines the sweeps look for, and when progress last moved

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 09:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_TIMESTAMP = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mariadb").with_variant(mysql.DATETIME(fsp=6), "mysql")
_INDEXES = {
    "ix_job_attempt_deadline": ["status", "attempt_deadline"],
    "ix_job_deadline": ["status", "job_deadline"],
    "ix_job_no_progress": ["status", "no_progress", "progress_deadline"],
}


def upgrade() -> None:
    # Jobs made before have no limits: NULL deadlines, never found by a sweep.
    op.add_column("job", sa.Column("attempt_timeout_s", sa.Float(), nullable=True))
    op.add_column("job", sa.Column("job_timeout_s", sa.Float(), nullable=True))
    op.add_column("job", sa.Column("stage_timeout_s", sa.Float(), nullable=True))
    op.add_column("job", sa.Column("on_no_progress", sa.String(length=16), server_default="INSPECT", nullable=False))
    op.add_column("job", sa.Column("job_deadline", _TIMESTAMP, nullable=True))
    op.add_column("job", sa.Column("attempt_deadline", _TIMESTAMP, nullable=True))
    op.add_column("job", sa.Column("progress_at", _TIMESTAMP, nullable=True))
    op.add_column("job", sa.Column("progress_deadline", _TIMESTAMP, nullable=True))
    op.add_column("job", sa.Column("no_progress", sa.Boolean(), server_default="0", nullable=False))
    for name, columns in _INDEXES.items():
        op.create_index(name, "job", columns, unique=False)


def downgrade() -> None:
    for name in _INDEXES:
        op.drop_index(name, table_name="job")
    with op.batch_alter_table("job") as batch:  # SQLite drops columns by copying the table
        for column in ("no_progress", "progress_deadline", "progress_at", "attempt_deadline", "job_deadline",
                       "on_no_progress", "stage_timeout_s", "job_timeout_s", "attempt_timeout_s"):  # fmt: skip
            batch.drop_column(column)
