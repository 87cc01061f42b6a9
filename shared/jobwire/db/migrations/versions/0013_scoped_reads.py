"""ListJobs indexes per leading filter; schedule.queue; worker_claim by time, for its purge

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-01 10:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

_LIST_INDEXES = {
    "ix_job_tenant": ["tenant", "id"],
    "ix_job_type": ["tenant", "job_type", "id"],
    "ix_job_status": ["tenant", "status", "id"],
    "ix_job_queue": ["tenant", "queue", "id"],
}


def upgrade() -> None:
    for name, columns in _LIST_INDEXES.items():
        op.create_index(name, "job", columns, unique=False)
    op.create_index("ix_worker_claim_at", "worker_claim", ["claimed_at"], unique=False)
    op.add_column("schedule", sa.Column("queue", sa.String(length=64), nullable=False, server_default="default"))
    _queues_of_schedules()


def _queues_of_schedules() -> None:
    """Each schedule's queue, read from its template (a serialized SubmitRequest; empty: default)."""
    from jobwire.v1 import job_pb2  # the contract the templates were written in

    conn = op.get_bind()
    schedule = sa.table("schedule", sa.column("id"), sa.column("template"), sa.column("queue"))
    for row in conn.execute(sa.select(schedule.c.id, schedule.c.template)).all():
        queue = job_pb2.SubmitRequest.FromString(bytes(row.template)).queue or "default"
        conn.execute(sa.update(schedule).where(schedule.c.id == row.id).values(queue=queue))


def downgrade() -> None:
    op.drop_column("schedule", "queue")
    op.drop_index("ix_worker_claim_at", table_name="worker_claim")
    for name in _LIST_INDEXES:
        op.drop_index(name, table_name="job")
