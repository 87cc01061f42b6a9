"""A job's title, its input's digest, and the handler's evidence in its trail

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-03 10:00:00

Jobs made before this revision have no title (empty, as a job submitted without one); their
input's size and sha256 are computed here from the payloads they kept, a chunk of jobs at a
time, so every job shows what it was given.
"""

from __future__ import annotations

import hashlib

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

_CHUNK = 100  # jobs read per statement: payloads are up to 1 MiB each, so at most 100 MiB held


def upgrade() -> None:
    op.add_column("job", sa.Column("title", sa.String(length=200), nullable=False, server_default=""))
    op.add_column("job", sa.Column("input_size", sa.BigInteger(), nullable=False, server_default="0"))
    op.add_column("job", sa.Column("input_sha256", sa.String(length=64), nullable=False, server_default=""))
    op.add_column("job", sa.Column("recorded_attempt", sa.Integer(), nullable=False, server_default="0"))
    op.add_column("job", sa.Column("recorded_entries", sa.Integer(), nullable=False, server_default="0"))
    op.add_column("job_event", sa.Column("entry_key", sa.String(length=64), nullable=True))
    op.add_column("job_event", sa.Column("size_bytes", sa.BigInteger(), nullable=True))
    op.add_column("job_event", sa.Column("sha256", sa.String(length=64), nullable=True))
    _digest_inputs()


def _digest_inputs() -> None:
    conn = op.get_bind()
    job = sa.table("job", sa.column("id"), sa.column("payload"), sa.column("input_size"), sa.column("input_sha256"))
    after = 0
    while True:
        rows = conn.execute(
            sa.select(job.c.id, job.c.payload).where(job.c.id > after).order_by(job.c.id).limit(_CHUNK)
        ).all()
        if not rows:
            return
        conn.execute(
            sa.update(job).where(job.c.id == sa.bindparam("b_id")),
            [
                {"b_id": id_, "input_size": len(payload), "input_sha256": hashlib.sha256(payload).hexdigest()}
                for id_, payload in rows
            ],
        )
        after = rows[-1][0]


def downgrade() -> None:
    with op.batch_alter_table("job_event") as batch:
        batch.drop_column("sha256")
        batch.drop_column("size_bytes")
        batch.drop_column("entry_key")
    with op.batch_alter_table("job") as batch:
        batch.drop_column("recorded_entries")
        batch.drop_column("recorded_attempt")
        batch.drop_column("input_sha256")
        batch.drop_column("input_size")
        batch.drop_column("title")
