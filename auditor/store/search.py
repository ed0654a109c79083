"""Full-text search over stored transcripts: what was said and what tools answered.

Each message's searchable text (its text blocks and its tool results) is kept in
`search_texts`, one row per message. Ingest writes it with the message rows, from the blocks it
already holds (`add_texts`), and indexes a group's texts when the group is committed
(`index_texts`); `index_new` catches up what is left (a store filled before this table existed,
messages whose text ingest could not tell apart) before each search. A message whose thread
is forgotten goes with it through the foreign key's cascade. Each store indexes the rows its
own way, made by the migrations: SQLite an FTS5 table over `search_texts`, PostgreSQL a GIN
index on `to_tsvector('simple', body)`. Both match whole words, any case, every word of the
query.

SQLite's index is fed by these functions, not by a trigger on insert: FTS5 writes out what it
holds in memory at every savepoint, and a trigger (or any INSERT ... SELECT) runs in one, so a
trigger made one index segment per message: three times the CPU of the same rows indexed in
one statement. Deletes
still reach the index through a trigger: they are rare (a rewritten file, `auditor forget`).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import orjson

from .sql_text import DriverSql, store_failed

if TYPE_CHECKING:
    from sqlalchemy import Connection, Engine

CHUNK = 500
INDEX_CHUNK = 10000


def searchable(blocks: list | None) -> str:
    """The text of a message worth searching: its text blocks and tool results, in order."""
    parts = []
    for b in blocks or []:
        if b.get("kind") in ("text", "tool_result") and b.get("text"):
            parts.append(b["text"])
    return "\n".join(parts)


# The text of a message just inserted, found by its natural key; a message that was stored
# already keeps the text it has.
_ADD_TEXT = (
    "INSERT INTO search_texts (message_id, body) SELECT id, ? FROM messages "
    "WHERE thread_id = ? AND native_id = ? ON CONFLICT (message_id) DO NOTHING"
)
# The keys go in as one JSON array, so that a whole group is one statement: an INSERT ...
# SELECT run once per row would open a savepoint, and a segment, per row (see above).
_INDEX_TEXTS = (
    "INSERT INTO search_fts (rowid, body) SELECT t.message_id, t.body FROM json_each(?) k "
    "JOIN messages m ON m.thread_id = json_extract(k.value, '$[0]') "
    "AND m.native_id = json_extract(k.value, '$[1]') "
    "JOIN search_texts t ON t.message_id = m.id"
)


def _driver_sql(conn: Connection, sql: str) -> str:
    return sql if conn.dialect.paramstyle == "qmark" else sql.replace("?", "%s")


def add_texts(db: DriverSql, rows: list[tuple[str, int, str]]) -> None:
    """Store the searchable text of messages just inserted: (body, thread_id, native_id) rows.

    SQLite's index is not fed here but by `index_texts`, once for a whole group of files."""
    if rows:
        db.many(_ADD_TEXT, rows)


def add_texts_by_id(db: DriverSql, rows: list[tuple[int, str]]) -> None:
    """`add_texts` for messages whose ids are known: (message_id, body) rows, no lookup."""
    if rows:
        db.many("INSERT INTO search_texts (message_id, body) VALUES (?, ?)", rows)


# FTS5 holds what it indexes in memory up to this size before writing it out as a segment, and
# merges segments as they pile up. At its 1 MB a group of files became several segments, merged
# again and again: at 4 MB indexing the 25x replica of the Claude Code corpus took a quarter
# less CPU (1.68 -> 1.28 s), the same matches. A setting of the index, kept by SQLite in
# `search_fts_config`; an SQLite without it leaves the index as it was.
INDEX_MEMORY = 4 << 20


def _hold_more(db: DriverSql) -> None:
    """Set the index's memory to `INDEX_MEMORY`, once for a store."""
    try:
        if db.scalar("SELECT v FROM search_fts_config WHERE k = 'hashsize'") == INDEX_MEMORY:
            return
        db.execute(
            "INSERT INTO search_fts (search_fts, rank) VALUES ('hashsize', ?)", (INDEX_MEMORY,)
        )
    except Exception as exc:
        if not store_failed(exc):
            raise


def index_texts(conn: Connection, keys: list[tuple[int, str]]) -> None:
    """Add the texts `add_texts` stored for these (thread_id, native_id) messages to SQLite's
    full-text index (PostgreSQL's index keeps itself)."""
    if conn.dialect.name != "sqlite" or not keys:
        return
    _hold_more(DriverSql(conn))
    for start in range(0, len(keys), INDEX_CHUNK):
        chunk = orjson.dumps(keys[start : start + INDEX_CHUNK]).decode()
        DriverSql(conn).execute(_INDEX_TEXTS, (chunk,))


# Messages whose ids are known (all of a group's on SQLite, as a rule): no lookup by key.
_INDEX_IDS = (
    "INSERT INTO search_fts (rowid, body) SELECT message_id, body FROM search_texts "
    "WHERE message_id IN (SELECT value FROM json_each(?))"
)


def index_ids(conn: Connection, ids: list[int]) -> None:
    """`index_texts` for messages whose ids are known."""
    if conn.dialect.name != "sqlite" or not ids:
        return
    _hold_more(DriverSql(conn))
    for start in range(0, len(ids), INDEX_CHUNK):
        chunk = orjson.dumps(ids[start : start + INDEX_CHUNK]).decode()
        DriverSql(conn).execute(_INDEX_IDS, (chunk,))


def index_new(conn: Connection, thread_ids: list[int] | None = None) -> int:
    """Add the messages not indexed yet (of `thread_ids`, or all); return how many."""
    from sqlalchemy import select

    from . import schema as s  # here: an ingest that needs no catching up never loads the models

    m, st = s.Message, s.SearchText
    q = (
        select(m.id, m.blocks)
        .outerjoin(st, st.message_id == m.id)
        .where(st.message_id.is_(None))
        .order_by(m.id)
    )
    if thread_ids is not None:
        q = q.where(m.thread_id.in_(thread_ids))
    added = 0
    rows = conn.execute(q).all()
    for start in range(0, len(rows), CHUNK):
        chunk = [(r.id, searchable(r.blocks)) for r in rows[start : start + CHUNK]]
        conn.exec_driver_sql(
            _driver_sql(conn, "INSERT INTO search_texts (message_id, body) VALUES (?, ?)"), chunk
        )
        if conn.dialect.name == "sqlite":
            conn.exec_driver_sql("INSERT INTO search_fts (rowid, body) VALUES (?, ?)", chunk)
        added += len(chunk)
    return added


def _fts_query(words: list[str]) -> str:
    """The words as FTS5 phrases (each quoted, so `-`, `:` or `AND` are plain text)."""
    return " ".join('"' + w.replace('"', '""') + '"' for w in words)


def search(
    engine: Engine,
    query: str,
    *,
    agent: str | None = None,
    project: str | None = None,
    since: datetime | None = None,
    limit: int | None = 20,
) -> list[dict[str, Any]]:
    """Return the messages holding every word of `query`, newest first, with their thread,
    agent, time, role and text (unredacted: the caller redacts what it shows)."""
    from sqlalchemy import func, select, text

    words = query.split()
    if not words:
        return []
    from . import schema as s

    m, t, st = s.Message, s.Thread, s.SearchText
    with engine.begin() as conn:
        index_new(conn)
        q = select(
            m.id,
            m.native_id.label("message_native_id"),
            m.role,
            m.timestamp,
            t.id.label("thread_id"),
            t.native_id,
            t.agent,
            t.cwd,
            st.body,
        ).select_from(st.__table__.join(m, m.id == st.message_id).join(t, t.id == m.thread_id))
        if conn.dialect.name == "sqlite":
            hits = text("SELECT rowid FROM search_fts WHERE search_fts MATCH :q").bindparams(
                q=_fts_query(words)
            )
            q = q.where(st.message_id.in_(hits.columns(rowid=st.message_id.type)))
        else:
            tsq = func.plainto_tsquery("simple", " ".join(words))
            q = q.where(func.to_tsvector("simple", st.body).op("@@")(tsq))
        if agent:
            q = q.where(t.agent == agent)
        if project:
            q = q.where(func.lower(t.cwd).contains(project.lower(), autoescape=True))
        if since is not None:
            at = since.astimezone(UTC).replace(tzinfo=None) if since.tzinfo else since
            q = q.where(m.timestamp >= at)
        q = q.order_by(m.timestamp.desc().nulls_last(), m.id.desc())
        if limit is not None:
            q = q.limit(limit)
        rows = conn.execute(q).all()
    return [
        {
            "message_id": r.id,
            "message_native_id": r.message_native_id,
            "thread_id": r.thread_id,
            "native_id": r.native_id,
            "agent": r.agent,
            "project": r.cwd,
            "role": r.role,
            "time": r.timestamp.replace(tzinfo=UTC).isoformat() if r.timestamp else None,
            "body": r.body,
        }
        for r in rows
    ]


def snippet(body: str, words: list[str], width: int = 120) -> str:
    """About `width` characters of `body` around the first of `words` found as a whole word
    (as the index matches them), on one line."""
    flat = " ".join(body.split())
    found = [
        hit.start()
        for w in words
        if (hit := re.search(rf"(?<!\w){re.escape(w)}(?!\w)", flat, re.IGNORECASE))
    ]
    at = min(found, default=0)
    start = max(0, at - width // 3)
    if start and flat[start - 1] != " ":  # begin at a whole word
        start = flat.find(" ", start, at) + 1 or start
    end = start + width
    return ("…" if start else "") + flat[start:end].strip() + ("…" if end < len(flat) else "")
