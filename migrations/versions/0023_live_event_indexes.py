"""indexes for what a live event recounts: running runs, a thread's file edits and models

A live worker's every audit starts a run, and each start looks for runs left `running` by a
killed process (`mark_interrupted`): without an index that read the whole `runs` table, which
grows by one row an audit. Each event's ingest brings the thread's aggregates up to date
(`refresh_threads`): its file edits were counted by reading each of its calls' rows, its models
by reading each of its usage rows. Over a long session these three grew with every event.

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-27 20:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_runs_running",
        "runs",
        ["id"],
        unique=False,
        sqlite_where=sa.text("status = 'running'"),
        postgresql_where=sa.text("status = 'running'"),
    )
    op.create_index(
        "ix_tool_calls_thread_id_is_file_edit", "tool_calls", ["thread_id", "is_file_edit"]
    )
    op.create_index("ix_token_usage_thread_id_model", "token_usage", ["thread_id", "model"])


def downgrade() -> None:
    op.drop_index("ix_token_usage_thread_id_model", table_name="token_usage")
    op.drop_index("ix_tool_calls_thread_id_is_file_edit", table_name="tool_calls")
    op.drop_index("ix_runs_running", table_name="runs")
