"""accounts, tokens, audit and wiki edits

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-21 10:51:11.287328
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = '0003'
down_revision: str | None = '0002'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('account',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sqlmodel.sql.sqltypes.AutoString(length=100), nullable=False),
    sa.Column('role', sqlmodel.sql.sqltypes.AutoString(length=10), nullable=False),
    sa.Column('password_hash', sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('last_login_at', sa.DateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('name')
    )
    op.create_table('api_token',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sqlmodel.sql.sqltypes.AutoString(length=100), nullable=False),
    sa.Column('scope', sqlmodel.sql.sqltypes.AutoString(length=10), nullable=False),
    sa.Column('token_hash', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('prefix', sqlmodel.sql.sqltypes.AutoString(length=20), nullable=False),
    sa.Column('owner', sqlmodel.sql.sqltypes.AutoString(length=100), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('expires_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('revoked_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('last_used_at', sa.DateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('token_hash')
    )
    with op.batch_alter_table('api_token', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_api_token_name'), ['name'], unique=False)

    op.create_table('audit_event',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('actor', sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
    sa.Column('action', sqlmodel.sql.sqltypes.AutoString(length=50), nullable=False),
    sa.Column('target', sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
    sa.Column('detail', sa.Text(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('audit_event', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_audit_event_at'), ['at'], unique=False)

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

    with op.batch_alter_table('change', schema=None) as batch_op:
        batch_op.add_column(sa.Column('actor', sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False, server_default=''))
    # Before accounts existed every write came from ingest or from a revision's author.
    op.execute(
        "UPDATE change SET actor = COALESCE((SELECT revision.author FROM revision "
        "WHERE revision.entry_id = change.entry_id AND revision.number = change.revision), 'ingest')"
    )

    with op.batch_alter_table('entry', schema=None) as batch_op:
        batch_op.add_column(sa.Column('edited_since_ingest', sa.Boolean(), nullable=False, server_default=sa.false()))



def downgrade() -> None:
    with op.batch_alter_table('entry', schema=None) as batch_op:
        batch_op.drop_column('edited_since_ingest')

    with op.batch_alter_table('change', schema=None) as batch_op:
        batch_op.drop_column('actor')

    with op.batch_alter_table('login_failure', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_login_failure_name'))
        batch_op.drop_index(batch_op.f('ix_login_failure_at'))
        batch_op.drop_index(batch_op.f('ix_login_failure_address'))

    op.drop_table('login_failure')
    with op.batch_alter_table('audit_event', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_audit_event_at'))

    op.drop_table('audit_event')
    with op.batch_alter_table('api_token', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_api_token_name'))

    op.drop_table('api_token')
    op.drop_table('account')
