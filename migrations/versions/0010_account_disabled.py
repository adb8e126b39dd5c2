"""account disabled: an admin can disable an account, ending its sessions and tokens

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-26 23:50:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0010'
down_revision: str | None = '0009'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('account') as batch:
        batch.add_column(sa.Column('disabled_at', sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('account') as batch:
        batch.drop_column('disabled_at')
