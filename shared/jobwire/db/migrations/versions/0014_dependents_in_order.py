"""ix_job_dependency_on lists a job's dependents in id order: chunks of them read from a cursor

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-01 16:00:00
"""

from __future__ import annotations

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # InnoDB's index already ends with the primary key (job_id); SQLite's ends with a rowid,
    # so a range "after this dependent" would sort every edge of the dependency each time.
    op.drop_index("ix_job_dependency_on", table_name="job_dependency")
    op.create_index("ix_job_dependency_on", "job_dependency", ["depends_on_id", "job_id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_job_dependency_on", table_name="job_dependency")
    op.create_index("ix_job_dependency_on", "job_dependency", ["depends_on_id"], unique=False)
