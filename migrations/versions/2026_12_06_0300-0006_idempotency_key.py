"""Idempotent uploads (issue #45): the run an upload with an Idempotency-Key created, found again on retry.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-06 03:00:00+00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A plain ADD COLUMN and a separate unique index: a batch rebuild on SQLite would drop the table's
    # AUTOINCREMENT (revision 0002). NULLs (uploads without a key) never collide.
    op.add_column('runs', sa.Column('idempotency_key', sa.String(length=64), nullable=True))
    op.create_index('ix_runs_idempotency_key', 'runs', ['idempotency_key'], unique=True)


def downgrade() -> None:
    op.drop_index('ix_runs_idempotency_key', table_name='runs')
    with op.batch_alter_table('runs', table_kwargs={'sqlite_autoincrement': True}) as batch:
        batch.drop_column('idempotency_key')
