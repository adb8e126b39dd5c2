"""outcomes: did an entry's fix work for an error

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-26 21:20:00.000000

One row per (error fingerprint, entry, voter): the reports that make an entry's measured rate
("fixed it for 14 of 16") and the notes of what did not work.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0007'
down_revision: str | None = '0006'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        'outcome',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('fingerprint', sa.String(length=16), nullable=False),
        sa.Column('entry_id', sa.String(length=100), nullable=False),
        sa.Column('worked', sa.Boolean(), nullable=False),
        sa.Column('note', sa.Text(), nullable=False),
        sa.Column('voter', sa.String(length=200), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(['entry_id'], ['entry.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('fingerprint', 'entry_id', 'voter'),
    )
    op.create_index('ix_outcome_fingerprint', 'outcome', ['fingerprint'])
    op.create_index('ix_outcome_entry_id', 'outcome', ['entry_id'])
    op.create_index('ix_outcome_created_at', 'outcome', ['created_at'])


def downgrade() -> None:
    op.drop_table('outcome')
