"""labels: a person's word on whether a checkpoint needed a correction, marked on the review
page of `auditor serve` and read by `auditor eval` and `report verdicts`

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-27 05:45:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "labels",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("thread_id", sa.Integer(), nullable=False),
        sa.Column("message_native_id", sa.String(length=255), nullable=False),
        sa.Column("needs_correction", sa.Boolean(), nullable=False),
        sa.Column("verdict_id", sa.Integer(), nullable=True),
        sa.Column("labelled_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["thread_id"],
            ["threads.id"],
            name=op.f("fk_labels_thread_id_threads"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["verdict_id"],
            ["verdicts.id"],
            name=op.f("fk_labels_verdict_id_verdicts"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_labels")),
        sa.UniqueConstraint(
            "thread_id", "message_native_id", name=op.f("uq_labels_thread_id_message_native_id")
        ),
    )
    op.create_index(op.f("ix_labels_verdict_id"), "labels", ["verdict_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_labels_verdict_id"), table_name="labels")
    op.drop_table("labels")
