"""A job's title, its input's digest, and the handler's evidence in its trail

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-03 10:00:00

Jobs made before this revision have no title (empty, as a job submitted without one).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("job", sa.Column("title", sa.String(length=200), nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("job") as batch:
        batch.drop_column("title")
