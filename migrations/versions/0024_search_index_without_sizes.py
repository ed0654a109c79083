"""full-text index without each message's word count (SQLite)

FTS5 keeps, beside the index, the number of words of every row (`search_fts_docsize`), for
ranking functions (bm25) and for reading the whole table without a MATCH. Search uses neither:
it matches words and orders by time. Writing that row for every message a cold ingest stores
was about a tenth of the indexing's cost. The index is made again without it
(`columnsize=0`): a contentless index cannot be copied, so the messages' texts are given to
it again from their blocks, as ingest gives them. Its matches are the same, word for word.

Revision ID: 0024
Revises: 0023
Create Date: 2026-11-27 21:00:00
"""

import json

from alembic import op

revision = "0024"
down_revision = "0023"
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


def _index_again(options: str) -> None:
    """Make `search_fts` again with `options` and give it every message's text; the setting
    that sizes its memory (`hashsize`) is kept."""
    conn = op.get_bind()
    kept = conn.exec_driver_sql(
        "SELECT k, v FROM search_fts_config WHERE k IN ('hashsize', 'automerge')"
    ).all()
    op.execute("DROP TABLE search_fts")
    op.execute(f"CREATE VIRTUAL TABLE search_fts USING fts5(body, content=''{options})")
    for key, value in kept:
        conn.exec_driver_sql(
            "INSERT INTO search_fts (search_fts, rank) VALUES (?, ?)", (key, value)
        )
    last = 0
    while True:
        rows = conn.exec_driver_sql(
            "SELECT id, blocks FROM messages WHERE id > ? ORDER BY id LIMIT ?", (last, CHUNK)
        ).all()
        if not rows:
            return
        conn.exec_driver_sql(
            "INSERT INTO search_fts (rowid, body) VALUES (?, ?)",
            [(mid, _searchable(json.loads(blocks) if blocks else None)) for mid, blocks in rows],
        )
        last = rows[-1][0]


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        _index_again(", columnsize=0")


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        _index_again("")
