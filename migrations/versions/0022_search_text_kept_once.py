"""search text kept once on SQLite: an FTS5 index that keeps no text of its own

SQLite's full-text index had `search_texts` as its external content: each message's searchable
text (its text blocks and tool results) was kept there a second time beside its blocks, a
third of a store's size, written and read back by every ingest. The index now keeps no text
(`content=''`): ingest gives it the text, and a message's words are taken out of it with the
text made again from its blocks (see `auditor.store.search`). The messages a store holds are
indexed here from their blocks, as ingest indexes them. PostgreSQL keeps `search_texts` and
its GIN index, which needs the text in a column.

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-27 15:00:00
"""

import json

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

CHUNK = 2000


def _searchable(blocks) -> str:
    """A message's searchable text, as `auditor.store.search.searchable` makes it (kept here as
    it is at this revision)."""
    parts = []
    for b in blocks or []:
        if b.get("kind") in ("text", "tool_result") and b.get("text"):
            parts.append(b["text"])
    return "\n".join(parts)


def _texts(conn, sql: str):
    """(message id, searchable text) of every message, in chunks."""
    last = 0
    while True:
        rows = conn.exec_driver_sql(sql, (last, CHUNK)).all()
        if not rows:
            return
        yield [(mid, _searchable(json.loads(blocks) if blocks else None)) for mid, blocks in rows]
        last = rows[-1][0]


def upgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    conn = op.get_bind()
    for trigger in ("search_texts_ai", "search_texts_ad", "search_texts_au"):
        op.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    op.execute("DROP TABLE IF EXISTS search_fts")
    op.drop_table("search_texts")
    op.execute("CREATE VIRTUAL TABLE search_fts USING fts5(body, content='')")
    select = "SELECT id, blocks FROM messages WHERE id > ? ORDER BY id LIMIT ?"
    for chunk in _texts(conn, select):
        conn.exec_driver_sql("INSERT INTO search_fts (rowid, body) VALUES (?, ?)", chunk)


def downgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    conn = op.get_bind()
    op.execute("DROP TABLE IF EXISTS search_fts")
    op.create_table(
        "search_texts",
        sa.Column("message_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["message_id"],
            ["messages.id"],
            name=op.f("fk_search_texts_message_id_messages"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("message_id", name=op.f("pk_search_texts")),
    )
    select = "SELECT id, blocks FROM messages WHERE id > ? ORDER BY id LIMIT ?"
    for chunk in _texts(conn, select):
        conn.exec_driver_sql("INSERT INTO search_texts (message_id, body) VALUES (?, ?)", chunk)
    op.execute(
        "CREATE VIRTUAL TABLE search_fts USING fts5("
        "body, content='search_texts', content_rowid='message_id')"
    )
    op.execute("INSERT INTO search_fts (search_fts) VALUES ('rebuild')")
    op.execute(
        "CREATE TRIGGER search_texts_ad AFTER DELETE ON search_texts BEGIN "
        "INSERT INTO search_fts(search_fts, rowid, body) "
        "VALUES ('delete', old.message_id, old.body); END"
    )
    op.execute(
        "CREATE TRIGGER search_texts_au AFTER UPDATE ON search_texts BEGIN "
        "INSERT INTO search_fts(search_fts, rowid, body) "
        "VALUES ('delete', old.message_id, old.body); "
        "INSERT INTO search_fts(rowid, body) VALUES (new.message_id, new.body); END"
    )
