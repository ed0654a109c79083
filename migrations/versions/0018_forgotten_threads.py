"""forgotten_threads: tombstones of the threads `auditor forget` removed, so that ingest does
not bring them back (unless `ingest --include-forgotten`)

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-27 04:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "forgotten_threads",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("agent", sa.String(length=32), nullable=False),
        sa.Column("native_id", sa.String(length=255), nullable=False),
        sa.Column("files", sa.JSON(), nullable=True),
        sa.Column("forgotten_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_forgotten_threads")),
        sa.UniqueConstraint(
            "agent", "native_id", name=op.f("uq_forgotten_threads_agent_native_id")
        ),
    )


def downgrade() -> None:
    op.drop_table("forgotten_threads")
