"""app secret: the session key in the database, shared by every replica

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-26 21:00:00.000000

Replicas on one PostgreSQL server share no data dir, so a key kept in `<data dir>/secret_key`
differed per replica and a login on one was unknown to the other. Without PITFALLS_SECRET_KEY,
the key now lives in this table; a data dir's existing key file is taken over on first start,
so nobody is logged out by the upgrade.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0006'
down_revision: str | None = '0005'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        'app_secret',
        sa.Column('name', sa.String(length=50), nullable=False),
        sa.Column('value', sa.Text(), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint('name'),
    )


def downgrade() -> None:
    op.drop_table('app_secret')
