"""lease keys: a job's tokens are signed, so late calls of real leases differ from forged ones

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30 15:50:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Jobs made before keep NULL: their late calls are refused without evidence.
    op.add_column("job", sa.Column("lease_key", sa.String(length=32), nullable=True))


def downgrade() -> None:
    op.drop_column("job", "lease_key")
