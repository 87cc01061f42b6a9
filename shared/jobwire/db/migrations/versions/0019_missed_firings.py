"""Missed firings: a schedule counts the fire times no job was made for

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-01 21:10:00

Beside skipped_firings (overlap SKIP), what the schedule page shows: fire times passed while
no server ran, and firings whose submit was refused. Counted from this revision on.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("schedule", sa.Column("missed_firings", sa.BigInteger(), nullable=False, server_default="0"))


def downgrade() -> None:
    op.drop_column("schedule", "missed_firings")
