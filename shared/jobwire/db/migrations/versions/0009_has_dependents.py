"""job.has_dependents: an ending reads its dependents only when some job depends on it

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-30 22:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("job", sa.Column("has_dependents", sa.Boolean(), nullable=False, server_default="0"))
    # Jobs already named in a depends_on keep being followed up when they end.
    op.execute(
        "UPDATE job SET has_dependents = TRUE"
        " WHERE id IN (SELECT depends_on_id FROM (SELECT DISTINCT depends_on_id FROM job_dependency) AS d)"
    )


def downgrade() -> None:
    op.drop_column("job", "has_dependents")
