"""signature context: a pattern that must also occur in the paste, for generic messages

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24 00:20:00.000000

`SyntaxError: invalid syntax` or `SystemExit: 2` say too little to claim an error alone; a
signature may now name a context (`async=True` in the code line, argparse's usage line) that the
paste must also hold. Existing signatures have none, so they match as before.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0005'
down_revision: str | None = '0004'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('signature') as batch:
        batch.add_column(sa.Column('context', sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('signature') as batch:
        batch.drop_column('context')
