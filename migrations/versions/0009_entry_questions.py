"""entry questions: the questions an entry answers, in readers' words (searchable)

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-26 23:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0009'
down_revision: str | None = '0008'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('entry') as batch:
        batch.add_column(sa.Column('questions', sa.JSON(), nullable=False, server_default='[]'))


def downgrade() -> None:
    with op.batch_alter_table('entry') as batch:
        batch.drop_column('questions')
