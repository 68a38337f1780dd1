"""Accounts hardening: server-side sessions, sign-in failures, token and run owners, disabled users, and
run/report ids that are never reused on SQLite (AUTOINCREMENT).

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-03 19:00:00+00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def _recreate() -> str:
    # SQLite keeps AUTOINCREMENT in the table definition, so the table is rebuilt (env.py turns foreign
    # keys off for migrations: dropping the old `runs` would otherwise cascade-delete every report).
    # PostgreSQL's sequences never hand out an id twice; there only the new columns are added.
    return "always" if op.get_bind().dialect.name == "sqlite" else "auto"


def upgrade() -> None:
    with op.batch_alter_table('users', schema=None) as batch_op:
        batch_op.add_column(sa.Column('is_active', sa.Boolean(), server_default=sa.true(), nullable=False))

    with op.batch_alter_table('api_tokens', schema=None) as batch_op:
        batch_op.add_column(sa.Column('user_id', sa.Integer(), nullable=True))
        batch_op.create_index(batch_op.f('ix_api_tokens_user_id'), ['user_id'], unique=False)
        batch_op.create_foreign_key(batch_op.f('fk_api_tokens_user_id_users'), 'users', ['user_id'], ['id'],
                                    ondelete='CASCADE')

    with op.batch_alter_table('runs', schema=None, recreate=_recreate(),
                              table_kwargs={'sqlite_autoincrement': True}) as batch_op:
        batch_op.add_column(sa.Column('submitter_user_id', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('submitter_token_id', sa.Integer(), nullable=True))
        batch_op.create_foreign_key(batch_op.f('fk_runs_submitter_user_id_users'), 'users',
                                    ['submitter_user_id'], ['id'], ondelete='SET NULL')
        batch_op.create_foreign_key(batch_op.f('fk_runs_submitter_token_id_api_tokens'), 'api_tokens',
                                    ['submitter_token_id'], ['id'], ondelete='SET NULL')

    with op.batch_alter_table('reports', schema=None, recreate=_recreate(),
                              table_kwargs={'sqlite_autoincrement': True}):
        pass

    op.create_table('user_sessions',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('user_id', sa.Integer(), nullable=False),
    sa.Column('token_hash', sa.String(length=64), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('expires_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['user_id'], ['users.id'], name=op.f('fk_user_sessions_user_id_users'),
                            ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_user_sessions')),
    sa.UniqueConstraint('token_hash', name=op.f('uq_user_sessions_token_hash'))
    )
    with op.batch_alter_table('user_sessions', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_user_sessions_user_id'), ['user_id'], unique=False)

    op.create_table('sign_in_failures',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('username', sa.String(length=100), nullable=False),
    sa.Column('address', sa.String(length=64), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_sign_in_failures'))
    )
    with op.batch_alter_table('sign_in_failures', schema=None) as batch_op:
        batch_op.create_index('ix_sign_in_failures_username_created_at', ['username', 'created_at'], unique=False)
        batch_op.create_index('ix_sign_in_failures_address_created_at', ['address', 'created_at'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('sign_in_failures', schema=None) as batch_op:
        batch_op.drop_index('ix_sign_in_failures_address_created_at')
        batch_op.drop_index('ix_sign_in_failures_username_created_at')
    op.drop_table('sign_in_failures')
    with op.batch_alter_table('user_sessions', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_user_sessions_user_id'))
    op.drop_table('user_sessions')

    with op.batch_alter_table('reports', schema=None, recreate=_recreate(),
                              table_kwargs={'sqlite_autoincrement': False}):
        pass
    with op.batch_alter_table('runs', schema=None, recreate=_recreate(),
                              table_kwargs={'sqlite_autoincrement': False}) as batch_op:
        batch_op.drop_constraint(batch_op.f('fk_runs_submitter_token_id_api_tokens'), type_='foreignkey')
        batch_op.drop_constraint(batch_op.f('fk_runs_submitter_user_id_users'), type_='foreignkey')
        batch_op.drop_column('submitter_token_id')
        batch_op.drop_column('submitter_user_id')

    with op.batch_alter_table('api_tokens', schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f('fk_api_tokens_user_id_users'), type_='foreignkey')
        batch_op.drop_index(batch_op.f('ix_api_tokens_user_id'))
        batch_op.drop_column('user_id')

    with op.batch_alter_table('users', schema=None) as batch_op:
        batch_op.drop_column('is_active')
