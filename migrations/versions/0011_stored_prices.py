"""stored prices: the price table's thresholds and per-token rates kept for reports

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-25 13:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "price_state",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("thresholds", sa.Text(), nullable=False),
        sa.Column("next_change", sa.String(length=10), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_price_state")),
    )
    op.create_table(
        "price_rates",
        sa.Column("model", sa.String(length=128), nullable=False),
        sa.Column("provider", sa.String(length=64), nullable=False),
        sa.Column("band", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("input", sa.Text(), nullable=True),
        sa.Column("output", sa.Text(), nullable=True),
        sa.Column("cache_read", sa.Text(), nullable=True),
        sa.Column("cache_write", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("model", "provider", "band", name=op.f("pk_price_rates")),
    )


def downgrade() -> None:
    op.drop_table("price_rates")
    op.drop_table("price_state")
