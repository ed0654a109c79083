"""injections and claims: delivery of corrections, and leases on observer calls

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-22 00:31:15.445354
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "claims",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column("checkpoint_id", sa.Integer(), nullable=False),
        sa.Column("owner", sa.String(length=255), nullable=False),
        sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["checkpoint_id"],
            ["checkpoints.id"],
            name=op.f("fk_claims_checkpoint_id_checkpoints"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_claims")),
        sa.UniqueConstraint("key", name=op.f("uq_claims_key")),
    )
    with op.batch_alter_table("claims", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_claims_checkpoint_id"), ["checkpoint_id"], unique=False
        )

    op.create_table(
        "injections",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("verdict_id", sa.Integer(), nullable=False),
        sa.Column("thread_id", sa.Integer(), nullable=False),
        sa.Column("injector", sa.String(length=64), nullable=False),
        sa.Column("target", sa.Text(), nullable=True),
        sa.Column("turn_key", sa.String(length=255), nullable=True),
        sa.Column("message_hash", sa.String(length=64), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["thread_id"],
            ["threads.id"],
            name=op.f("fk_injections_thread_id_threads"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["verdict_id"],
            ["verdicts.id"],
            name=op.f("fk_injections_verdict_id_verdicts"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_injections")),
    )
    with op.batch_alter_table("injections", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_injections_thread_id"), ["thread_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_injections_verdict_id"), ["verdict_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("injections", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_injections_verdict_id"))
        batch_op.drop_index(batch_op.f("ix_injections_thread_id"))

    op.drop_table("injections")
    with op.batch_alter_table("claims", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_claims_checkpoint_id"))

    op.drop_table("claims")
