"""source files keyed by source (machine) and path: the same path on two machines is two files;
claims on a whole thread (several `auditor run` workers share threads), with no checkpoint

Rows already there are this machine's (its host name, the default source of `auditor ingest`).

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-25 13:40:00
"""

import socket

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # On SQLite a table rebuild (batch): auditor.db turns foreign keys off for migrations, so
    # dropping the old table does not set the rows that point at it to NULL.
    with op.batch_alter_table("source_files", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("source", sa.String(length=255), server_default="", nullable=False)
        )
        batch_op.drop_constraint("uq_source_files_path", type_="unique")
        batch_op.create_unique_constraint("uq_source_files_source_path", ["source", "path"])
    op.execute(
        sa.text("UPDATE source_files SET source = :host").bindparams(host=socket.gethostname())
    )
    with op.batch_alter_table("claims", schema=None) as batch_op:
        batch_op.alter_column("checkpoint_id", existing_type=sa.Integer(), nullable=True)


def downgrade() -> None:
    op.execute("DELETE FROM claims WHERE checkpoint_id IS NULL")
    with op.batch_alter_table("claims", schema=None) as batch_op:
        batch_op.alter_column("checkpoint_id", existing_type=sa.Integer(), nullable=False)
    with op.batch_alter_table("source_files", schema=None) as batch_op:
        batch_op.drop_constraint("uq_source_files_source_path", type_="unique")
        batch_op.create_unique_constraint("uq_source_files_path", ["path"])
        batch_op.drop_column("source")
