"""guidance files: the CLAUDE.md / AGENTS.md texts an agent was given, with hash and read time

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-25 12:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "guidance_files",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("thread_id", sa.Integer(), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("origin", sa.String(length=16), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("read_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("message_native_id", sa.String(length=255), nullable=True),
        sa.ForeignKeyConstraint(
            ["thread_id"],
            ["threads.id"],
            name=op.f("fk_guidance_files_thread_id_threads"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_guidance_files")),
        sa.UniqueConstraint(
            "thread_id", "path", "sha256", name=op.f("uq_guidance_files_thread_id_path_sha256")
        ),
    )


def downgrade() -> None:
    op.drop_table("guidance_files")
