"""webhooks: the addresses admins register, and the queue that delivers events to them

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-03 10:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0012'
down_revision: str | None = '0011'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        'webhook',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('url', sa.Text(), nullable=False),
        sa.Column('events', sa.JSON(), nullable=False),
        sa.Column('body_format', sa.String(length=10), nullable=False),
        sa.Column('secret', sa.Text(), nullable=True),
        sa.Column('threshold', sa.Integer(), nullable=False),
        sa.Column('created_by', sa.String(length=200), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint('id'),
    )
    op.create_table(
        'webhook_delivery',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('hook_id', sa.Integer(), nullable=False),
        sa.Column('event', sa.String(length=40), nullable=False),
        sa.Column('payload', sa.JSON(), nullable=False),
        sa.Column('status', sa.String(length=12), nullable=False),
        sa.Column('attempts', sa.Integer(), nullable=False),
        sa.Column('next_attempt_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('lease_until', sa.DateTime(timezone=True), nullable=True),
        sa.Column('status_code', sa.Integer(), nullable=True),
        sa.Column('error', sa.Text(), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(['hook_id'], ['webhook.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id'),
    )
    op.create_index('ix_webhook_delivery_hook_id', 'webhook_delivery', ['hook_id'])
    op.create_index('ix_webhook_delivery_status', 'webhook_delivery', ['status'])
    op.create_index(
        'ix_webhook_delivery_next_attempt_at', 'webhook_delivery', ['next_attempt_at']
    )


def downgrade() -> None:
    op.drop_table('webhook_delivery')
    op.drop_table('webhook')
