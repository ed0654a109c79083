"""batches: observer calls sent through the providers' batch APIs, and the verdicts they gave

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-25 13:30:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "batches",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("observer", sa.String(length=64), nullable=False),
        sa.Column("model", sa.String(length=128), nullable=False),
        sa.Column("label", sa.String(length=64), nullable=False),
        sa.Column("provider_id", sa.String(length=255), nullable=True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("provider_state", sa.String(length=64), nullable=True),
        sa.Column("requests", sa.Integer(), nullable=False),
        sa.Column("est_usd", sa.Double(), nullable=True),
        sa.Column("run_id", sa.Integer(), nullable=True),
        sa.Column("submitted_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("polled_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("collected_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_batches_run_id_runs"), ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_batches")),
        sa.UniqueConstraint("label", name=op.f("uq_batches_label")),
    )
    op.create_index(op.f("ix_batches_state"), "batches", ["state"], unique=False)
    op.create_table(
        "batch_requests",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("batch_id", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("custom_id", sa.String(length=64), nullable=False),
        sa.Column("checkpoint_id", sa.Integer(), nullable=False),
        sa.Column("thread_id", sa.Integer(), nullable=False),
        sa.Column("message_native_id", sa.String(length=255), nullable=False),
        sa.Column("prompt_hash", sa.String(length=64), nullable=False),
        sa.Column("input_hash", sa.String(length=64), nullable=False),
        sa.Column("verdict_id", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(
            ["batch_id"],
            ["batches.id"],
            name=op.f("fk_batch_requests_batch_id_batches"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["checkpoint_id"],
            ["checkpoints.id"],
            name=op.f("fk_batch_requests_checkpoint_id_checkpoints"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_batch_requests")),
        sa.UniqueConstraint(
            "batch_id", "custom_id", name=op.f("uq_batch_requests_batch_id_custom_id")
        ),
    )
    op.create_index(
        op.f("ix_batch_requests_checkpoint_id"), "batch_requests", ["checkpoint_id"], unique=False
    )
    with op.batch_alter_table("verdicts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("batch_id", sa.Integer(), nullable=True))
        batch_op.create_index(batch_op.f("ix_verdicts_batch_id"), ["batch_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("verdicts", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_verdicts_batch_id"))
        batch_op.drop_column("batch_id")
    op.drop_index(op.f("ix_batch_requests_checkpoint_id"), table_name="batch_requests")
    op.drop_table("batch_requests")
    op.drop_index(op.f("ix_batches_state"), table_name="batches")
    op.drop_table("batches")
