"""search_fts fed in bulk: no trigger on insert into search_texts (SQLite)

FTS5 writes out its pending terms at every savepoint, and a trigger runs in one per row, so
the insert trigger made one index segment per message. `auditor.store.search` now feeds the
index itself, in one statement per group of rows; the delete and update triggers stay.

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-27 06:00:00
"""

from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TRIGGER IF EXISTS search_texts_ai")


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute(
            "CREATE TRIGGER search_texts_ai AFTER INSERT ON search_texts BEGIN "
            "INSERT INTO search_fts(rowid, body) VALUES (new.message_id, new.body); END"
        )
