"""ListJobs indexes for a filter with a status: owner, job type, assignee and queue, each + status

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-04 09:00:00

Each (tenant, <filter>, status, id) serves the pair's WHERE and ORDER BY id DESC, so a page of
owner + READY, or of a token of one queue asking for QUEUED jobs, reads only its own rows
(jobwire.db.job_pages); before, one filter's index led and the status was checked row by row.
"""

from __future__ import annotations

from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

_PAIRS = {
    "ix_job_owner_status": ["tenant", "owner", "status", "id"],
    "ix_job_type_status": ["tenant", "job_type", "status", "id"],
    "ix_job_assignee_status": ["tenant", "review_assignee", "status", "id"],
    "ix_job_queue_status": ["tenant", "queue", "status", "id"],
}


def upgrade() -> None:
    for name, columns in _PAIRS.items():
        op.create_index(name, "job", columns, unique=False)


def downgrade() -> None:
    for name in _PAIRS:
        op.drop_index(name, table_name="job")
