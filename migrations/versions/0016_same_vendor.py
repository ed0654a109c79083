"""verdicts.same_vendor: the observer's model came from the agent's own vendor, allowed by the
user when no other was ready (`--allow-same-vendor`); NULL for verdicts recorded before

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-27 02:50:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A plain ADD COLUMN, not a batch rebuild: the table keeps its triggers (verdict_daily).
    op.add_column("verdicts", sa.Column("same_vendor", sa.Boolean(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("verdicts", schema=None) as batch_op:
        batch_op.drop_column("same_vendor")
