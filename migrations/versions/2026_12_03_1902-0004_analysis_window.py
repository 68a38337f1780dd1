"""The analysis window of a run (issue #11): which part of each report the rules judged.

Revision ID: 0004
Revises: 0001
Create Date: 2026-12-03 19:02:00+00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0004'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # NULL: the default window (steady), as for every run analyzed before the column existed.
    # A plain ADD COLUMN: a batch rebuild on SQLite would drop the table's AUTOINCREMENT (revision 0002).
    op.add_column('runs', sa.Column('analysis_window', sa.String(length=200), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('runs', table_kwargs={'sqlite_autoincrement': True}) as batch:
        batch.drop_column('analysis_window')
