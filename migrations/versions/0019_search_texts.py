"""search_texts: each message's searchable text, with the store's own full-text index over it
(SQLite: an FTS5 table kept in step by triggers; PostgreSQL: a GIN index on its tsvector)

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-27 04:20:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
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
    if op.get_bind().dialect.name == "sqlite":
        # External content: the words are indexed, the text stays in search_texts once.
        op.execute(
            "CREATE VIRTUAL TABLE search_fts USING fts5("
            "body, content='search_texts', content_rowid='message_id')"
        )
        op.execute(
            "CREATE TRIGGER search_texts_ai AFTER INSERT ON search_texts BEGIN "
            "INSERT INTO search_fts(rowid, body) VALUES (new.message_id, new.body); END"
        )
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
    else:
        op.execute(
            "CREATE INDEX ix_search_texts_body_tsv ON search_texts "
            "USING gin (to_tsvector('simple', body))"
        )


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for trigger in ("search_texts_ai", "search_texts_ad", "search_texts_au"):
            op.execute(f"DROP TRIGGER IF EXISTS {trigger}")
        op.execute("DROP TABLE IF EXISTS search_fts")
    op.drop_table("search_texts")
