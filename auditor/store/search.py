"""Full-text search over stored transcripts: what was said and what tools answered.

A message's searchable text is its text blocks and tool results, in order (`searchable`). Each
store indexes it its own way, made by the migrations: SQLite an FTS5 table that keeps no text
of its own (the text is in the message's blocks, once), PostgreSQL a GIN index on
`to_tsvector('simple', body)` of the table `search_texts`, one row per message, written by
ingest with the message (`add_texts`; `index_new` catches up what is left: a store filled
before that table existed). Both match whole words, any case, every word of the query.

SQLite's index is fed by ingest with the texts it has in hand (`index`), for a whole group of
files when the group is committed: FTS5 writes out what it holds in memory at every savepoint,
and each file is written in one, so feeding it file by file made one index segment per file.
Such an index takes a message's words out only when told the text it was given
(`unindex`, before any message is deleted: a rewritten file, `auditor forget`); the text is
made again from the stored blocks by `searchable`, the function that made it. A hit's text is
made from its blocks too.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from .sql_text import DriverSql, read_json, store_failed

if TYPE_CHECKING:
    from sqlalchemy import Connection, Engine

CHUNK = 500


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


def _driver_sql(conn: Connection, sql: str) -> str:
    return sql if conn.dialect.paramstyle == "qmark" else sql.replace("?", "%s")


def add_texts(db: DriverSql, rows: list[tuple[str, int, str]]) -> None:
    """Store the searchable text of messages just inserted: (body, thread_id, native_id) rows
    (PostgreSQL)."""
    if rows:
        db.many(_ADD_TEXT, rows)


# FTS5 holds what it indexes in memory up to `hashsize` bytes before writing it out as a
# segment, and merges segments as they pile up: `automerge` of them of a size make one of the
# next. At its 1 MB a group of files became several segments, merged again and again: at 4 MB
# indexing the 25x replica of the Claude Code corpus took a quarter less CPU (1.68 -> 1.28 s),
# the same matches. Merging at 8 segments rather than 4 writes each word's entries fewer times
# over as a big store fills (a search then looks in at most twice as many segments, still a
# few). Settings of the index, kept by SQLite in `search_fts_config`; an SQLite without them
# leaves the index as it was.
INDEX_SETTINGS = {"hashsize": 4 << 20, "automerge": 8}


def _hold_more(db: DriverSql) -> None:
    """Give the index `INDEX_SETTINGS`, once for a store."""
    try:
        found = dict(
            db.all(
                "SELECT k, v FROM search_fts_config WHERE k IN "
                f"({', '.join('?' * len(INDEX_SETTINGS))})",
                tuple(INDEX_SETTINGS),
            )
        )
        for key, value in INDEX_SETTINGS.items():
            if found.get(key) != value:
                db.execute("INSERT INTO search_fts (search_fts, rank) VALUES (?, ?)", (key, value))
    except Exception as exc:
        if not store_failed(exc):
            raise


def index(db: DriverSql, texts: list[tuple[int, str]]) -> None:
    """Add these (message id, searchable text) rows, messages just stored, to SQLite's index.
    One statement run for every row: a plain INSERT into the index opens no savepoint, so its
    rows stay in memory until the commit."""
    if texts:
        _hold_more(db)
        db.many("INSERT INTO search_fts (rowid, body) VALUES (?, ?)", texts)


def unindex(
    db: DriverSql, where: str, params: Sequence, pending: list[tuple[int, str]] | None = None
) -> list[tuple[int, str]]:
    """Take the messages `where` (SQL on `messages`) out of SQLite's index, before they are
    deleted; return `pending` (texts to index at the group's commit) less theirs, which the
    index was never given."""
    waiting = {i for i, _ in pending or []}
    gone, dropped = [], set()
    for mid, blocks in db.all(f"SELECT id, blocks FROM messages WHERE {where}", params):
        if mid in waiting:
            dropped.add(mid)
        else:
            gone.append(("delete", mid, searchable(read_json(blocks))))
    if gone:
        db.many("INSERT INTO search_fts (search_fts, rowid, body) VALUES (?, ?, ?)", gone)
    return [p for p in pending or [] if p[0] not in dropped]


def index_new(conn: Connection, thread_ids: list[int] | None = None) -> int:
    """Add the messages not in `search_texts` yet (of `thread_ids`, or all) to it, PostgreSQL's
    searchable texts; return how many."""
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
        sqlite = conn.dialect.name == "sqlite"
        q = select(
            m.id,
            m.native_id.label("message_native_id"),
            m.role,
            m.timestamp,
            t.id.label("thread_id"),
            t.native_id,
            t.agent,
            t.cwd,
            m.blocks if sqlite else st.body,
        )
        if sqlite:
            hits = text("SELECT rowid FROM search_fts WHERE search_fts MATCH :q").bindparams(
                q=_fts_query(words)
            )
            q = q.select_from(m.__table__.join(t, t.id == m.thread_id)).where(
                m.id.in_(hits.columns(rowid=m.id.type))
            )
        else:
            index_new(conn)
            q = q.select_from(
                st.__table__.join(m, m.id == st.message_id).join(t, t.id == m.thread_id)
            )
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
            "body": searchable(r.blocks) if sqlite else r.body,
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
