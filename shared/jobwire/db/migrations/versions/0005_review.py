"""review: who must review a WAITING job, what they should look at, and what was decided

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02 09:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_COLUMNS = ("review_assignee", "review_items", "review_decision", "review_note", "review_by")


def upgrade() -> None:
    # Jobs made before were never reviewed: every column NULL.
    op.add_column("job", sa.Column("review_assignee", sa.String(length=128), nullable=True))
    op.add_column("job", sa.Column("review_items", sa.Text(), nullable=True))
    op.add_column("job", sa.Column("review_decision", sa.String(length=16), nullable=True))
    op.add_column("job", sa.Column("review_note", sa.Text(), nullable=True))
    op.add_column("job", sa.Column("review_by", sa.String(length=128), nullable=True))
    op.create_index("ix_job_assignee", "job", ["tenant", "review_assignee", "id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_job_assignee", table_name="job")
    with op.batch_alter_table("job") as batch:  # SQLite drops columns by copying the table
        for column in reversed(_COLUMNS):
            batch.drop_column(column)
