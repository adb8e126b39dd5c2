"""oidc: an account's OpenID Connect identity, and who set its role (an admin or the provider)

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03 10:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0011'
down_revision: str | None = '0010'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('account') as batch:
        # Every account so far got its role from an admin (or the CLI).
        batch.add_column(
            sa.Column('role_source', sa.String(length=10), nullable=False, server_default='admin')
        )
        batch.add_column(sa.Column('oidc_issuer', sa.String(length=500), nullable=True))
        batch.add_column(sa.Column('oidc_subject', sa.String(length=255), nullable=True))
        batch.create_unique_constraint('uq_account_oidc', ['oidc_issuer', 'oidc_subject'])


def downgrade() -> None:
    with op.batch_alter_table('account') as batch:
        batch.drop_constraint('uq_account_oidc', type_='unique')
        batch.drop_column('oidc_subject')
        batch.drop_column('oidc_issuer')
        batch.drop_column('role_source')
