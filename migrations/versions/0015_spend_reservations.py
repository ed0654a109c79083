"""spend_reservations: the worst case of each observer call in flight, so that runs on several
machines together stay under `budget_per_day`

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-25 16:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "spend_reservations",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("owner", sa.String(length=255), nullable=False),
        sa.Column("usd", sa.Double(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_spend_reservations")),
    )


def downgrade() -> None:
    op.drop_table("spend_reservations")
