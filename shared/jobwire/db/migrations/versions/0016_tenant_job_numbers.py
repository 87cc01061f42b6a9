"""Job numbers per tenant: UNIQUE(job_no, tenant) and a day counter per tenant

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-02 10:00:00

Numbers already given stay as they are. Each tenant's sequence for the counter's two latest
days goes on after the one sequence those days had, so no new number repeats one of the
tenant's jobs; numbers are only ever given for the current UTC day, so older days never
need it, and a tenant's later days, like every tenant new since, start at 001.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

_CLAIM = ["tenant", "queue", "status", "waiting_on", sa.literal_column("priority DESC"), "id"]
_OLD_COUNTER = "job_day_counter_shared"
_CARRIED_DAYS = 2


def upgrade() -> None:
    with op.batch_alter_table("job") as batch:  # SQLite drops a constraint by copying the table
        batch.drop_constraint("uq_job_job_no", type_="unique")
        batch.create_unique_constraint("uq_job_tenant_job_no", ["job_no", "tenant"])
    _claim_index_sorted_again()
    op.rename_table("job_day_counter", _OLD_COUNTER)
    _counter_table(tenant=True)
    _carry_sequences()
    op.drop_table(_OLD_COUNTER)


def _claim_index_sorted_again() -> None:
    """SQLite's copy of the table reflects the claim index without its DESC: made again as declared."""
    if op.get_bind().dialect.name == "sqlite":
        op.drop_index("ix_job_claim", table_name="job")
        op.create_index("ix_job_claim", "job", _CLAIM, unique=False)


def _counter_table(*, tenant: bool) -> None:
    keys = ["tenant", "day"] if tenant else ["day"]
    op.create_table(
        "job_day_counter",
        *([sa.Column("tenant", sa.String(length=64), nullable=False)] if tenant else []),
        sa.Column("day", sa.String(length=8), nullable=False),
        sa.Column("last_seq", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint(*keys),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
        mysql_engine="InnoDB",
    )


def _carry_sequences() -> None:
    """Every tenant with jobs goes on, on the latest days, from where the shared sequence stood."""
    conn = op.get_bind()
    old = sa.table(_OLD_COUNTER, sa.column("day"), sa.column("last_seq"))
    new = sa.table("job_day_counter", sa.column("tenant"), sa.column("day"), sa.column("last_seq"))
    job = sa.table("job", sa.column("tenant"))
    days = conn.execute(sa.select(old.c.day, old.c.last_seq).order_by(old.c.day.desc()).limit(_CARRIED_DAYS)).all()
    tenants = conn.execute(sa.select(job.c.tenant).distinct()).scalars().all()
    rows = [{"tenant": tenant, "day": day, "last_seq": last} for tenant in tenants for day, last in days]
    if rows:
        conn.execute(sa.insert(new), rows)


def downgrade() -> None:
    # Fails while two tenants' jobs share a number: one number named one job before this revision.
    with op.batch_alter_table("job") as batch:
        batch.drop_constraint("uq_job_tenant_job_no", type_="unique")
        batch.create_unique_constraint("uq_job_job_no", ["job_no"])
    _claim_index_sorted_again()
    op.rename_table("job_day_counter", _OLD_COUNTER)
    _counter_table(tenant=False)
    conn = op.get_bind()
    old = sa.table(_OLD_COUNTER, sa.column("day"), sa.column("last_seq"))
    new = sa.table("job_day_counter", sa.column("day"), sa.column("last_seq"))
    # The shared sequence goes on after every tenant's: no number is given twice.
    highest = sa.select(old.c.day, sa.func.max(old.c.last_seq)).group_by(old.c.day)
    conn.execute(sa.insert(new).from_select(["day", "last_seq"], highest))
    op.drop_table(_OLD_COUNTER)
