"""Per-report analysis (issue #16): where each report's analysis and facts are, for which window, attempts.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-03 22:00:00+00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Plain ADD COLUMNs: a batch rebuild on SQLite would drop the table's AUTOINCREMENT (revision 0002).
    # NULL analysis_path: not analyzed on its own yet (every report ingested before this revision); the
    # run-level step sends such reports to their per-report analysis first.
    op.add_column('reports', sa.Column('analysis_path', sa.String(length=1000), nullable=True))
    op.add_column('reports', sa.Column('analysis_window', sa.String(length=200), nullable=True))
    op.add_column('reports', sa.Column('analysis_attempts', sa.Integer(), nullable=False, server_default='0'))
    op.add_column('reports', sa.Column('analyzed_at', sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('reports', table_kwargs={'sqlite_autoincrement': True}) as batch:
        batch.drop_column('analyzed_at')
        batch.drop_column('analysis_attempts')
        batch.drop_column('analysis_window')
        batch.drop_column('analysis_path')
