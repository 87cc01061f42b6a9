"""batches and dependencies: job_batch and job.batch_id, job_dependency, a job's waiting count, and the claim index skipping waiting jobs

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02 09:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

_TIMESTAMP = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mariadb").with_variant(mysql.DATETIME(fsp=6), "mysql")
_CLAIM = ["tenant", "queue", "status", sa.literal_column("priority DESC"), "id"]
_CLAIM_WAITING = ["tenant", "queue", "status", "waiting_on", sa.literal_column("priority DESC"), "id"]


def upgrade() -> None:
    # Jobs made before depend on nothing: waiting_on 0, runnable as they were.
    op.add_column("job", sa.Column("depends_on", sa.Text(), nullable=True))
    op.add_column("job", sa.Column("waiting_on", sa.Integer(), server_default="0", nullable=False))
    op.create_table(
        "job_dependency",
        sa.Column("job_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("depends_on_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.PrimaryKeyConstraint("job_id", "depends_on_id"),
        mysql_engine="InnoDB",
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
    )
    op.create_index("ix_job_dependency_on", "job_dependency", ["depends_on_id"], unique=False)
    op.create_index("ix_job_waiting", "job", ["status", "waiting_on"], unique=False)
    op.add_column("job", sa.Column("batch_id", sa.String(length=24), nullable=True))
    op.create_index("ix_job_batch", "job", ["batch_id", "status"], unique=False)
    op.create_table(
        "job_batch",
        sa.Column("batch_id", sa.String(length=24), nullable=False),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("idempotency_key", sa.String(length=128), nullable=True),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("total", sa.Integer(), nullable=False),
        sa.Column("created_at", _TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("batch_id"),
        sa.UniqueConstraint("tenant", "idempotency_key", name="uq_job_batch_idempotency"),
        mysql_engine="InnoDB",
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
    )
    # The claim index gains waiting_on before its sort columns (see tables.py).
    op.drop_index("ix_job_claim", table_name="job")
    op.create_index("ix_job_claim", "job", _CLAIM_WAITING, unique=False)


def downgrade() -> None:
    op.drop_index("ix_job_claim", table_name="job")
    op.create_index("ix_job_claim", "job", _CLAIM, unique=False)
    op.drop_table("job_batch")
    op.drop_index("ix_job_batch", table_name="job")
    op.drop_index("ix_job_waiting", table_name="job")
    op.drop_index("ix_job_dependency_on", table_name="job_dependency")
    op.drop_table("job_dependency")
    with op.batch_alter_table("job") as batch:  # SQLite drops columns by copying the table
        batch.drop_column("batch_id")
        batch.drop_column("waiting_on")
        batch.drop_column("depends_on")
