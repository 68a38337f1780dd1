"""Initial schema: jobs, runs, reports, findings, run_summaries, api_tokens, users.

Revision ID: 0001
Revises:
Create Date: 2026-12-02 11:44:11.265829+00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = '0001'
down_revision = None
branch_labels = None
depends_on = None

# JSONB on PostgreSQL, JSON elsewhere (matches app.models.base.JSONType).
JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table('api_tokens',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=100), nullable=False),
    sa.Column('scope', sa.String(length=10), nullable=False),
    sa.Column('token_hash', sa.String(length=64), nullable=False),
    sa.Column('prefix', sa.String(length=12), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('last_used_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('revoked_at', sa.DateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_api_tokens')),
    sa.UniqueConstraint('token_hash', name=op.f('uq_api_tokens_token_hash'))
    )
    op.create_table('jobs',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_jobs')),
    sa.UniqueConstraint('name', name=op.f('uq_jobs_name'))
    )
    op.create_table('users',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('username', sa.String(length=100), nullable=False),
    sa.Column('password_hash', sa.String(length=300), nullable=False),
    sa.Column('is_admin', sa.Boolean(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_users')),
    sa.UniqueConstraint('username', name=op.f('uq_users_username'))
    )
    op.create_table('runs',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('job_id', sa.Integer(), nullable=False),
    sa.Column('tags', JSON, nullable=False),
    sa.Column('git_sha', sa.String(length=64), nullable=True),
    sa.Column('cluster', sa.String(length=200), nullable=True),
    sa.Column('submitter', sa.String(length=200), nullable=True),
    sa.Column('source', sa.String(length=10), nullable=False),
    sa.Column('status', sa.String(length=20), nullable=False),
    sa.Column('analysis_status', sa.String(length=20), nullable=True),
    sa.Column('analyzed_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('analysis_attempts', sa.Integer(), nullable=False),
    sa.Column('analysis_lease_owner', sa.String(length=200), nullable=True),
    sa.Column('analysis_lease_expires_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('rule_statuses', JSON, nullable=False),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('deleted_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], name=op.f('fk_runs_job_id_jobs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_runs'))
    )
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.create_index('ix_runs_created_at', ['created_at'], unique=False)
        batch_op.create_index('ix_runs_job_id_created_at', ['job_id', 'created_at'], unique=False)
        batch_op.create_index('ix_runs_status', ['status'], unique=False)
        batch_op.create_index(batch_op.f('ix_runs_submitter'), ['submitter'], unique=False)

    op.create_table('reports',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('run_id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=500), nullable=False),
    sa.Column('kind', sa.String(length=10), nullable=False),
    sa.Column('rank', sa.Integer(), nullable=True),
    sa.Column('host', sa.String(length=200), nullable=True),
    sa.Column('sha256', sa.String(length=64), nullable=False),
    sa.Column('size_bytes', sa.BigInteger(), nullable=False),
    sa.Column('status', sa.String(length=20), nullable=False),
    sa.Column('error_code', sa.String(length=50), nullable=True),
    sa.Column('error_message', sa.Text(), nullable=True),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('lease_owner', sa.String(length=200), nullable=True),
    sa.Column('lease_expires_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('progress', JSON, nullable=False),
    sa.Column('counts', JSON, nullable=False),
    sa.Column('tool_version', sa.String(length=100), nullable=True),
    sa.Column('schema_version', sa.Integer(), nullable=True),
    sa.Column('info', JSON, nullable=False),
    sa.Column('upload_path', sa.String(length=1000), nullable=False),
    sa.Column('trace_path', sa.String(length=1000), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], name=op.f('fk_reports_run_id_runs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_reports')),
    sa.UniqueConstraint('run_id', 'sha256', name=op.f('uq_reports_run_id_sha256'))
    )
    with op.batch_alter_table('reports', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_reports_run_id'), ['run_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_reports_sha256'), ['sha256'], unique=False)
        batch_op.create_index('ix_reports_status_lease_expires_at', ['status', 'lease_expires_at'], unique=False)

    op.create_table('findings',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('run_id', sa.Integer(), nullable=False),
    sa.Column('report_id', sa.Integer(), nullable=True),
    sa.Column('position', sa.Integer(), nullable=False),
    sa.Column('rule_id', sa.String(length=20), nullable=False),
    sa.Column('severity', sa.String(length=10), nullable=False),
    sa.Column('title', sa.Text(), nullable=False),
    sa.Column('message', sa.Text(), nullable=False),
    sa.Column('impact_ns', sa.BigInteger(), nullable=False),
    sa.Column('impact_pct', sa.Float(), nullable=True),
    sa.Column('advice', sa.Text(), nullable=False),
    sa.Column('evidence', JSON, nullable=False),
    sa.Column('evidence_total', sa.Integer(), nullable=False),
    sa.Column('report', sa.String(length=500), nullable=True),
    sa.Column('rank', sa.Integer(), nullable=True),
    sa.Column('extra', JSON, nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['report_id'], ['reports.id'], name=op.f('fk_findings_report_id_reports'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], name=op.f('fk_findings_run_id_runs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_findings'))
    )
    with op.batch_alter_table('findings', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_findings_report_id'), ['report_id'], unique=False)
        batch_op.create_index('ix_findings_run_id_impact_ns', ['run_id', 'impact_ns'], unique=False)

    op.create_table('run_summaries',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('run_id', sa.Integer(), nullable=False),
    sa.Column('report_id', sa.Integer(), nullable=True),
    sa.Column('data', JSON, nullable=False),
    sa.Column('span_ns', sa.BigInteger(), nullable=True),
    sa.Column('compute_ns', sa.BigInteger(), nullable=True),
    sa.Column('comm_exposed_ns', sa.BigInteger(), nullable=True),
    sa.Column('memory_only_ns', sa.BigInteger(), nullable=True),
    sa.Column('idle_ns', sa.BigInteger(), nullable=True),
    sa.Column('goodput_pct', sa.Float(), nullable=True),
    sa.Column('finding_count', sa.Integer(), nullable=False),
    sa.Column('top_impact_ns', sa.BigInteger(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['report_id'], ['reports.id'], name=op.f('fk_run_summaries_report_id_reports'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], name=op.f('fk_run_summaries_run_id_runs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_run_summaries')),
    sa.UniqueConstraint('run_id', 'report_id', name=op.f('uq_run_summaries_run_id_report_id'))
    )
    with op.batch_alter_table('run_summaries', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_run_summaries_run_id'), ['run_id'], unique=False)




def downgrade() -> None:
    with op.batch_alter_table('run_summaries', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_run_summaries_run_id'))

    op.drop_table('run_summaries')
    with op.batch_alter_table('findings', schema=None) as batch_op:
        batch_op.drop_index('ix_findings_run_id_impact_ns')
        batch_op.drop_index(batch_op.f('ix_findings_report_id'))

    op.drop_table('findings')
    with op.batch_alter_table('reports', schema=None) as batch_op:
        batch_op.drop_index('ix_reports_status_lease_expires_at')
        batch_op.drop_index(batch_op.f('ix_reports_sha256'))
        batch_op.drop_index(batch_op.f('ix_reports_run_id'))

    op.drop_table('reports')
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_runs_submitter'))
        batch_op.drop_index('ix_runs_status')
        batch_op.drop_index('ix_runs_job_id_created_at')
        batch_op.drop_index('ix_runs_created_at')

    op.drop_table('runs')
    op.drop_table('users')
    op.drop_table('jobs')
    op.drop_table('api_tokens')

