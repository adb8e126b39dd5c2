"""login sessions kept server-side; login attempts counted per (name, address) pair and address

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24 09:12:40.118203

A session row per browser login lets logout end a copied cookie. The throttle keeps one counter
row per (name, address) pair and one per address, updated with compare-and-set so that every
process shares the count; it replaces login_failure, whose counts (at most a day old) are dropped.
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = '0004'
down_revision: str | None = '0003'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('login_session',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('key_hash', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('user_id', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('expires_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['user_id'], ['account.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('key_hash')
    )
    with op.batch_alter_table('login_session', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_login_session_expires_at'), ['expires_at'], unique=False)
        batch_op.create_index(batch_op.f('ix_login_session_user_id'), ['user_id'], unique=False)

    op.create_table('login_throttle',
    sa.Column('kind', sqlmodel.sql.sqltypes.AutoString(length=10), nullable=False),
    sa.Column('name', sqlmodel.sql.sqltypes.AutoString(length=100), nullable=False),
    sa.Column('address', sqlmodel.sql.sqltypes.AutoString(length=100), nullable=False),
    sa.Column('failures', sa.Integer(), nullable=False),
    sa.Column('first_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('last_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('kind', 'name', 'address')
    )
    with op.batch_alter_table('login_throttle', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_login_throttle_last_at'), ['last_at'], unique=False)

    with op.batch_alter_table('login_failure', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_login_failure_name'))
        batch_op.drop_index(batch_op.f('ix_login_failure_at'))
        batch_op.drop_index(batch_op.f('ix_login_failure_address'))

    op.drop_table('login_failure')


def downgrade() -> None:
    op.create_table('login_failure',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sqlmodel.sql.sqltypes.AutoString(length=100), nullable=False),
    sa.Column('address', sqlmodel.sql.sqltypes.AutoString(length=100), nullable=False),
    sa.Column('at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('login_failure', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_login_failure_address'), ['address'], unique=False)
        batch_op.create_index(batch_op.f('ix_login_failure_at'), ['at'], unique=False)
        batch_op.create_index(batch_op.f('ix_login_failure_name'), ['name'], unique=False)

    with op.batch_alter_table('login_throttle', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_login_throttle_last_at'))

    op.drop_table('login_throttle')
    with op.batch_alter_table('login_session', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_login_session_user_id'))
        batch_op.drop_index(batch_op.f('ix_login_session_expires_at'))

    op.drop_table('login_session')
