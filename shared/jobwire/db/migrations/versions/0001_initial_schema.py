"""initial schema

Revision ID: 0001
Revises: 
Create Date: 2026-11-29 11:22:11.301975
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql
revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('artifact',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('job_id', sa.BigInteger(), nullable=False),
    sa.Column('uri', sa.String(length=2048), nullable=False),
    sa.Column('size_bytes', sa.BigInteger(), nullable=False),
    sa.Column('sha256', sa.String(length=64), nullable=False),
    sa.Column('content_type', sa.String(length=255), nullable=False),
    sa.Column('summary', sa.Text(), nullable=False),
    sa.Column('created_at', sa.DateTime().with_variant(mysql.DATETIME(fsp=6), 'mariadb').with_variant(mysql.DATETIME(fsp=6), 'mysql'), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('job_id', name='uq_artifact_job'),
    mysql_charset='utf8mb4',
    mysql_collate='utf8mb4_bin',
    mysql_engine='InnoDB'
    )
    op.create_table('job',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('tenant', sa.String(length=64), nullable=False),
    sa.Column('job_no', sa.String(length=40), nullable=False),
    sa.Column('job_type', sa.String(length=64), nullable=False),
    sa.Column('queue', sa.String(length=64), nullable=False),
    sa.Column('owner', sa.String(length=128), server_default='', nullable=False),
    sa.Column('labels', sa.Text(), nullable=False),
    sa.Column('locale', sa.String(length=35), server_default='en', nullable=False),
    sa.Column('payload', sa.LargeBinary().with_variant(mysql.MEDIUMBLOB(), 'mariadb').with_variant(mysql.MEDIUMBLOB(), 'mysql'), nullable=False),
    sa.Column('fingerprint', sa.String(length=64), nullable=False),
    sa.Column('idempotency_key', sa.String(length=128), nullable=True),
    sa.Column('priority', sa.Integer(), server_default='0', nullable=False),
    sa.Column('status', sa.String(length=20), nullable=False),
    sa.Column('stage', sa.String(length=32), nullable=True),
    sa.Column('stage_index', sa.Integer(), server_default='0', nullable=False),
    sa.Column('stage_count', sa.Integer(), server_default='0', nullable=False),
    sa.Column('stages', sa.Text(), nullable=True),
    sa.Column('processed_units', sa.BigInteger(), server_default='0', nullable=False),
    sa.Column('total_units', sa.BigInteger(), nullable=True),
    sa.Column('checkpoint', sa.LargeBinary().with_variant(mysql.MEDIUMBLOB(), 'mariadb').with_variant(mysql.MEDIUMBLOB(), 'mysql'), nullable=True),
    sa.Column('attempt', sa.Integer(), server_default='0', nullable=False),
    sa.Column('attempt_base', sa.Integer(), server_default='0', nullable=False),
    sa.Column('max_attempts', sa.Integer(), nullable=False),
    sa.Column('initial_backoff_s', sa.Float(), nullable=False),
    sa.Column('max_backoff_s', sa.Float(), nullable=False),
    sa.Column('backoff_multiplier', sa.Float(), nullable=False),
    sa.Column('on_lease_lost', sa.String(length=16), nullable=False),
    sa.Column('worker_id', sa.String(length=128), nullable=True),
    sa.Column('worker_token', sa.String(length=80), nullable=True),
    sa.Column('lease_epoch', sa.BigInteger(), server_default='0', nullable=False),
    sa.Column('lease_seconds', sa.Float(), nullable=True),
    sa.Column('lease_expires_at', sa.DateTime().with_variant(mysql.DATETIME(fsp=6), 'mariadb').with_variant(mysql.DATETIME(fsp=6), 'mysql'), nullable=True),
    sa.Column('heartbeat_at', sa.DateTime().with_variant(mysql.DATETIME(fsp=6), 'mariadb').with_variant(mysql.DATETIME(fsp=6), 'mysql'), nullable=True),
    sa.Column('stalled', sa.Boolean(), server_default='0', nullable=False),
    sa.Column('ended_token', sa.String(length=80), nullable=True),
    sa.Column('ended_kind', sa.String(length=20), nullable=True),
    sa.Column('error_category', sa.String(length=32), nullable=True),
    sa.Column('error_stage', sa.String(length=32), nullable=True),
    sa.Column('error_message', sa.Text(), nullable=True),
    sa.Column('error_retryable', sa.Boolean(), nullable=True),
    sa.Column('error_detail', sa.Text().with_variant(mysql.MEDIUMTEXT(), 'mariadb').with_variant(mysql.MEDIUMTEXT(), 'mysql'), nullable=True),
    sa.Column('created_at', sa.DateTime().with_variant(mysql.DATETIME(fsp=6), 'mariadb').with_variant(mysql.DATETIME(fsp=6), 'mysql'), nullable=False),
    sa.Column('updated_at', sa.DateTime().with_variant(mysql.DATETIME(fsp=6), 'mariadb').with_variant(mysql.DATETIME(fsp=6), 'mysql'), nullable=False),
    sa.Column('started_at', sa.DateTime().with_variant(mysql.DATETIME(fsp=6), 'mariadb').with_variant(mysql.DATETIME(fsp=6), 'mysql'), nullable=True),
    sa.Column('finished_at', sa.DateTime().with_variant(mysql.DATETIME(fsp=6), 'mariadb').with_variant(mysql.DATETIME(fsp=6), 'mysql'), nullable=True),
    sa.Column('run_after', sa.DateTime().with_variant(mysql.DATETIME(fsp=6), 'mariadb').with_variant(mysql.DATETIME(fsp=6), 'mysql'), nullable=False),
    sa.Column('version', sa.BigInteger(), server_default='1', nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('job_no', name='uq_job_job_no'),
    sa.UniqueConstraint('tenant', 'idempotency_key', name='uq_job_idempotency'),
    mysql_charset='utf8mb4',
    mysql_collate='utf8mb4_bin',
    mysql_engine='InnoDB'
    )
    op.create_index('ix_job_claim', 'job', ['tenant', 'queue', 'status', sa.literal_column('priority DESC'), 'id'], unique=False)
    op.create_index('ix_job_finished', 'job', ['status', 'finished_at'], unique=False)
    op.create_index('ix_job_lease', 'job', ['status', 'lease_expires_at'], unique=False)
    op.create_index('ix_job_owner', 'job', ['tenant', 'owner', 'id'], unique=False)
    op.create_table('job_day_counter',
    sa.Column('day', sa.String(length=8), nullable=False),
    sa.Column('last_seq', sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint('day'),
    mysql_charset='utf8mb4',
    mysql_collate='utf8mb4_bin',
    mysql_engine='InnoDB'
    )
    op.create_table('job_event',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('job_id', sa.BigInteger(), nullable=False),
    sa.Column('tenant', sa.String(length=64), nullable=False),
    sa.Column('job_no', sa.String(length=40), nullable=False),
    sa.Column('version', sa.BigInteger(), nullable=False),
    sa.Column('kind', sa.String(length=40), nullable=False),
    sa.Column('visible', sa.Boolean(), nullable=False),
    sa.Column('from_status', sa.String(length=20), nullable=True),
    sa.Column('to_status', sa.String(length=20), nullable=True),
    sa.Column('stage', sa.String(length=32), nullable=True),
    sa.Column('processed_units', sa.BigInteger(), nullable=True),
    sa.Column('total_units', sa.BigInteger(), nullable=True),
    sa.Column('worker_id', sa.String(length=128), nullable=True),
    sa.Column('attempt', sa.Integer(), nullable=True),
    sa.Column('detail', sa.Text().with_variant(mysql.MEDIUMTEXT(), 'mariadb').with_variant(mysql.MEDIUMTEXT(), 'mysql'), nullable=True),
    sa.Column('snapshot', sa.Text().with_variant(mysql.MEDIUMTEXT(), 'mariadb').with_variant(mysql.MEDIUMTEXT(), 'mysql'), nullable=True),
    sa.Column('created_at', sa.DateTime().with_variant(mysql.DATETIME(fsp=6), 'mariadb').with_variant(mysql.DATETIME(fsp=6), 'mysql'), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    mysql_charset='utf8mb4',
    mysql_collate='utf8mb4_bin',
    mysql_engine='InnoDB'
    )
    op.create_index('ix_job_event_job', 'job_event', ['job_id', 'version'], unique=False)
    op.create_table('worker',
    sa.Column('tenant', sa.String(length=64), nullable=False),
    sa.Column('worker_id', sa.String(length=128), nullable=False),
    sa.Column('queues', sa.Text(), nullable=False),
    sa.Column('job_types', sa.Text(), nullable=False),
    sa.Column('last_seen_at', sa.DateTime().with_variant(mysql.DATETIME(fsp=6), 'mariadb').with_variant(mysql.DATETIME(fsp=6), 'mysql'), nullable=False),
    sa.PrimaryKeyConstraint('tenant', 'worker_id'),
    mysql_charset='utf8mb4',
    mysql_collate='utf8mb4_bin',
    mysql_engine='InnoDB'
    )


def downgrade() -> None:
    op.drop_table('worker')
    op.drop_index('ix_job_event_job', table_name='job_event')
    op.drop_table('job_event')
    op.drop_table('job_day_counter')
    op.drop_index('ix_job_owner', table_name='job')
    op.drop_index('ix_job_lease', table_name='job')
    op.drop_index('ix_job_finished', table_name='job')
    op.drop_index('ix_job_claim', table_name='job')
    op.drop_table('job')
    op.drop_table('artifact')
