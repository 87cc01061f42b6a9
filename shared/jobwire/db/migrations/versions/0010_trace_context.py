"""the trace context of the Submit that made a job, handed to its worker with the lease

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-04 09:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Jobs made before, or without tracing, have none: NULL, and their leases carry no traceparent.
    op.add_column("job", sa.Column("trace_context", sa.String(length=128), nullable=True))


def downgrade() -> None:
    op.drop_column("job", "trace_context")
