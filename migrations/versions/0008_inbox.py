"""inbox: the errors nothing matched, redacted and clustered (PITFALLS_INBOX)

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-26 21:40:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0008'
down_revision: str | None = '0007'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        'inbox_cluster',
        sa.Column('fingerprint', sa.String(length=16), nullable=False),
        sa.Column('exception', sa.String(length=200), nullable=False),
        sa.Column('message', sa.Text(), nullable=False),
        sa.Column('count', sa.Integer(), nullable=False),
        sa.Column('first_seen', sa.DateTime(timezone=True), nullable=False),
        sa.Column('last_seen', sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint('fingerprint'),
    )
    op.create_index('ix_inbox_cluster_last_seen', 'inbox_cluster', ['last_seen'])
    op.create_table(
        'inbox_example',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('fingerprint', sa.String(length=16), nullable=False),
        sa.Column('message', sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ['fingerprint'], ['inbox_cluster.fingerprint'], ondelete='CASCADE'
        ),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('fingerprint', 'message'),
    )
    op.create_index('ix_inbox_example_fingerprint', 'inbox_example', ['fingerprint'])


def downgrade() -> None:
    op.drop_table('inbox_example')
    op.drop_table('inbox_cluster')
