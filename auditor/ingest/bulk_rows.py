"""The rows an ingest writes in bulk (messages, tool calls, token usage) and the per-thread
aggregates refreshed from them."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

import orjson

from ..model import Message, Usage
from ..store import search
from ..store.sql_text import DriverSql, marks, stored_time
from .guidance import BASENAMES

if TYPE_CHECKING:
    from sqlalchemy import Connection


def refresh_threads(conn: Connection, ids: list[int], since: int | None = None) -> None:
    """Recompute the cached per-thread aggregates of `ids`.

    With `since`, the threads only gained message rows after the row `since` (nothing of theirs
    was deleted or changed): their message count and span are brought up to date from those rows
    alone, as a recount would give them, so a live ingest of a few new lines costs the same late
    in a long session as early on. Tool calls and models are recounted either way (a call's row
    is updated when its result came first; a usage row's model when its key is seen again)."""
    db, listed = DriverSql(conn), marks(len(ids))
    calls = (
        "tool_call_count = (SELECT count(*) FROM tool_calls t WHERE t.thread_id = threads.id), "
        "file_edit_count = (SELECT count(*) FROM tool_calls t "
        "WHERE t.thread_id = threads.id AND t.is_file_edit = ?) "
    )
    if since is None:
        db.execute(
            "UPDATE threads SET "
            "message_count = (SELECT count(*) FROM messages m WHERE m.thread_id = threads.id), "
            "started_at = (SELECT min(m.timestamp) FROM messages m WHERE m.thread_id = threads.id), "
            "ended_at = (SELECT max(m.timestamp) FROM messages m WHERE m.thread_id = threads.id), "
            f"{calls}WHERE id IN ({listed})",
            (True, *ids),
        )
    else:
        db.execute(f"UPDATE threads SET {calls}WHERE id IN ({listed})", (True, *ids))
        # One pass over the new rows (the highest ids), whatever the threads' length: grouped
        # by `thread_id + 0`, which SQLite's index on the thread cannot serve (it would walk
        # the whole index rather than sort the few new rows).
        wanted = set(ids)
        added = [
            (count, first, first, last, last, tid)
            for tid, count, first, last in db.all(
                "SELECT thread_id + 0, count(*), min(timestamp), max(timestamp) FROM messages "
                "WHERE id > ? GROUP BY thread_id + 0",
                (since,),
            )
            if tid in wanted
        ]
        # A NULL compares as nothing: a thread with no timestamp yet takes the new rows' one,
        # new rows without any leave it as it was.
        if added:
            db.many(
                "UPDATE threads SET message_count = message_count + ?, "
                "started_at = CASE WHEN started_at IS NULL OR started_at > ? THEN ? "
                "ELSE started_at END, "
                "ended_at = CASE WHEN ended_at IS NULL OR ended_at < ? THEN ? ELSE ended_at END "
                "WHERE id = ?",
                added,
            )
    # Each thread's distinct models, one index seek a model (`ix_token_usage_thread_id_model`:
    # the next model above the last one found), not a read of every usage row of the thread:
    # a live event refreshes its thread, whose usage rows grow with the session.
    rows = db.all(
        "WITH RECURSIVE found(thread_id, model) AS ("
        "SELECT t.id, (SELECT min(u.model) FROM token_usage u WHERE u.thread_id = t.id) "
        f"FROM threads t WHERE t.id IN ({listed}) "
        "UNION ALL "
        "SELECT f.thread_id, (SELECT min(u.model) FROM token_usage u "
        "WHERE u.thread_id = f.thread_id AND u.model > f.model) "
        "FROM found f WHERE f.model IS NOT NULL) "
        "SELECT thread_id, model FROM found WHERE model IS NOT NULL AND model != '<synthetic>' "
        "ORDER BY thread_id, model",
        ids,
    )
    models: dict[int, list[str]] = {}
    for tid, model in rows:
        if model:  # never None here: the query leaves those out
            models.setdefault(tid, []).append(model)
    # One statement run for every thread (building one per thread cost more than running it).
    db.many(
        "UPDATE threads SET models = ? WHERE id = ?",
        [(",".join(models.get(tid, [])) or None, tid) for tid in ids],
    )


_MESSAGE_COLS = (
    "thread_id",
    "source_file_id",
    "native_id",
    "parent_native_id",
    "seq",
    "line",
    "role",
    "source_type",
    "timestamp",
    "model",
    "usage_key",
    "stop_reason",
    "is_sidechain",
    "tool_use_count",
    "file_edit_count",
    "blocks",
)
_USAGE_COLS = (
    "thread_id",
    "source_file_id",
    "key",
    "model",
    "timestamp",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
)


def _sql(
    cols: tuple[str, ...], table: str, conflict: str, update_cols: tuple[str, ...] = ()
) -> str:
    action = (
        "NOTHING"
        if not update_cols
        else "UPDATE SET " + ", ".join(f"{c} = excluded.{c}" for c in update_cols)
    )
    marks = ", ".join("?" for _ in cols)
    return f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({marks}) ON CONFLICT ({conflict}) DO {action}"


# Bulk writes bypass SQLAlchemy's per-row processing (the hot path of ingest): plain DBAPI
# executemany with rows as tuples, values already in their stored form.
_MESSAGES_SQL = _sql(_MESSAGE_COLS, "messages", "thread_id, native_id")
# On SQLite a message's blocks go in as the UTF-8 bytes orjson writes, made text by SQLite
# (the same bytes, as the database's encoding is UTF-8): decoding them into a Python string,
# which sqlite3 then encodes back to UTF-8 to bind, cost a tenth of a second on 100 MB of
# transcripts, most of it on text beyond ASCII. The stored value is the same text.
_MESSAGES_SQL_SQLITE = _MESSAGES_SQL.replace("?)", "CAST(? AS TEXT))", 1)
_CALLS_SQL = _sql(
    (
        "thread_id",
        "call_id",
        "source_file_id",
        "name",
        "call_message_id",
        "is_file_edit",
        "edited_paths",
    ),
    "tool_calls",
    "thread_id, call_id",
    ("source_file_id", "name", "call_message_id", "is_file_edit", "edited_paths"),
)
_RESULTS_SQL = _sql(
    ("thread_id", "call_id", "source_file_id", "result_message_id", "is_error", "is_file_edit"),
    "tool_calls",
    "thread_id, call_id",
    ("result_message_id", "is_error"),
)
_USAGE_SQL = _sql(_USAGE_COLS, "token_usage", "thread_id, key", _USAGE_COLS[3:])
# A call with its result from the same batch, in one row: what `_CALLS_SQL` then `_RESULTS_SQL`
# would leave, without the second statement finding the row again. A call without one (its
# result columns NULL) keeps the result the store has.
_ANSWERED_CALLS_SQL = (
    "INSERT INTO tool_calls (thread_id, call_id, source_file_id, name, call_message_id, "
    "is_file_edit, edited_paths, result_message_id, is_error) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (thread_id, call_id) DO UPDATE SET "
    "source_file_id = excluded.source_file_id, name = excluded.name, "
    "call_message_id = excluded.call_message_id, is_file_edit = excluded.is_file_edit, "
    "edited_paths = excluded.edited_paths, "
    "result_message_id = CASE WHEN excluded.result_message_id IS NULL "
    "THEN tool_calls.result_message_id ELSE excluded.result_message_id END, "
    "is_error = CASE WHEN excluded.result_message_id IS NULL "
    "THEN tool_calls.is_error ELSE excluded.is_error END"
)


def _answered(calls: list[tuple], results: list[tuple]) -> tuple[list[tuple], list[tuple]]:
    """The calls with their results' columns (the last result of each), and the results whose
    call is not among `calls`: written in that order, the ids and values are those of the
    calls written first and the results after them."""
    last = {(r[0], r[1]): r for r in results}
    # A result without a message id would read as no result: its call is written as before.
    joined = {(c[0], c[1]) for c in calls} & last.keys()
    joined -= {(r[0], r[1]) for r in results if r[3] is None}
    answered = []
    for c in calls:
        r = last[(c[0], c[1])] if (c[0], c[1]) in joined else None
        answered.append((*c, r[3], r[4]) if r is not None else (*c, None, None))
    return answered, [r for r in results if (r[0], r[1]) not in joined]


def _dumps(value) -> str | None:
    if value is None:
        return None
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()


# The instruction files' names as they appear in a message's JSON.
_NAMED = tuple(name.encode() for name in BASENAMES)


class RowBatch:
    """Rows waiting to be written, flushed with executemany.

    Each new message's searchable text is made from the blocks in hand (reading it back from the
    store would decode every message's JSON again): on SQLite it is gathered in `indexed` with
    the message's id, for the full-text index; on PostgreSQL written to `search_texts` with the
    message (see `auditor.store.search`).
    """

    def __init__(self, dialect: str = "sqlite") -> None:
        self.messages: list[tuple] = []
        self.calls: list[tuple] = []
        self.results: list[tuple] = []
        self.usage: list[tuple] = []
        self.texts: dict[int, list[tuple[str, str]]] = {}
        self.indexed: list[tuple[int, str]] = []
        # The messages with calls naming an instruction file (by native id), told while their
        # JSON is in hand: the guidance search then reads these, not every message's text again.
        self.named: list[tuple[int, str]] = []  # (thread id, native id)
        # The calls its results answer, (thread id, call id), for the same search.
        self.answered: list[tuple[int, str]] = []
        self.sqlite = dialect == "sqlite"
        # The last time written, as stored: a model's bill and its message share one datetime.
        self._last_time: tuple[datetime | None, object] = (None, None)

    @property
    def size(self) -> int:
        return len(self.messages) + len(self.usage)

    def _time(self, value: datetime | None):
        last, stored = self._last_time
        if value is last and value is not None:  # the same (immutable) object: the same text
            return stored
        stored = stored_time(value, self.sqlite)
        self._last_time = (value, stored)
        return stored

    def add_message(self, thread_id: int, file_id: int, msg: Message) -> None:
        """Queue the message and its tool calls; nothing is queued if it cannot be stored."""
        # One pass over the blocks: their stored form, what `search.searchable` would take of
        # it, and the calls and results they hold (the hot path of ingest: once per message).
        native = msg.native_id
        as_json = []
        said = []
        calls = results = None
        uses = edits = 0
        for b in msg.blocks:
            as_json.append(b.as_json())
            kind = b.kind
            if kind == "text":
                if b.text:
                    said.append(b.text)
            elif kind == "tool_use":
                if b.tool_use_id:
                    uses += 1
                    edit = bool(b.is_file_edit)
                    edits += edit
                    paths = b.edited_paths
                    call = (
                        thread_id,
                        b.tool_use_id,
                        file_id,
                        b.tool_name,
                        native,
                        edit,
                        None if paths is None else orjson.dumps(paths).decode(),
                    )
                    if calls is None:
                        calls = [call]
                    else:
                        calls.append(call)
            elif kind == "tool_result":
                if b.text:
                    said.append(b.text)
                if b.tool_use_id:
                    result = (thread_id, b.tool_use_id, file_id, native, b.is_error, False)
                    if results is None:
                        results = [result]
                    else:
                        results.append(result)
        # Raises on what JSON cannot hold.
        encoded = orjson.dumps(as_json, option=orjson.OPT_NON_STR_KEYS)
        # Only a message with calls can name the file a call read (the guidance search joins
        # the messages named here with their calls): the others' text is not searched.
        if uses and b".md" in encoded and any(name in encoded for name in _NAMED):
            self.named.append((thread_id, native))
        self.messages.append(
            (
                thread_id,
                file_id,
                native,
                msg.parent_id,
                msg.seq,
                msg.line,
                msg.role,
                msg.source_type,
                self._time(msg.timestamp),
                msg.model,
                msg.usage_key,
                msg.stop_reason,
                bool(msg.is_sidechain),
                uses,
                edits,
                # A bytearray is bound without the sqlite3 module looking for an adapter.
                bytearray(encoded) if self.sqlite else encoded.decode(),
            )
        )
        if calls is not None:
            self.calls += calls
        if results is not None:
            self.results += results
            self.answered += [(thread_id, r[1]) for r in results]
        texts = self.texts.get(thread_id)
        if texts is None:
            texts = self.texts[thread_id] = []
        texts.append((native, "\n".join(said)))

    def add_usage(self, thread_id: int, file_id: int, u: Usage) -> None:
        self.usage.append(
            (
                thread_id,
                file_id,
                u.key,
                u.model,
                self._time(u.timestamp),
                u.input_tokens,
                u.output_tokens,
                u.cache_read_tokens,
                u.cache_write_tokens,
                u.reasoning_tokens,
            )
        )

    @staticmethod
    def _new_ids(db: DriverSql, thread_id: int, count: int, before: int) -> dict[str, int]:
        """The ids of the `count` message rows of `thread_id` the last executemany inserted
        (SQLite), by native id.

        SQLite gives a new row the largest id there is plus one, so the rows it inserted are
        the thread's rows above `before`, the largest id before it; when all of them were new,
        one statement's rows hold the ids that end at `last_insert_rowid()`, in order. A table
        whose largest id is the largest there can be takes ids at random: its rows are then
        not found here, and not indexed."""
        rows = db.all(
            "SELECT native_id, id FROM messages WHERE id > ? AND thread_id = ?",
            (before, thread_id),
        )
        return dict(rows) if len(rows) == count else {}

    def flush(self, conn: Connection) -> dict[int, int]:
        """Write the queued rows; return the messages each thread gained (id -> count).

        A message already stored (the same transcript copied from another machine, a record
        repeated) is left as it was and not counted: the counts are what the store gained.
        """
        db = DriverSql(conn)
        added: dict[int, int] = {}
        by_thread: dict[int, list[tuple]] = {}
        for row in self.messages:
            by_thread.setdefault(row[0], []).append(row)
        messages_sql = _MESSAGES_SQL_SQLITE if db.sqlite else _MESSAGES_SQL
        for thread_id, rows in by_thread.items():
            before = (db.scalar("SELECT max(id) FROM messages") or 0) if db.sqlite else 0
            # Both drivers sum the rows an executemany inserted; DO NOTHING rows count 0.
            count = db.insert_many(messages_sql, rows)
            if not count:
                continue
            added[thread_id] = count
            texts = self.texts.get(thread_id, [])
            if not db.sqlite:
                # Kept in `search_texts`, found by key; a message stored already keeps its own.
                search.add_texts(db, [(text, thread_id, native) for native, text in texts])
                continue
            last = db.scalar("SELECT last_insert_rowid()") or 0
            if count == len(rows) and last - count == before:
                # Every one of them new, with the ids that follow `before`: no lookup.
                self.indexed += zip(range(before + 1, last + 1), (t for _, t in texts))
            else:
                # Some were stored already (a record repeated, a file copied): the new ones
                # are found by id. A native id met twice was stored with its first blocks.
                ids = self._new_ids(db, thread_id, count, before)
                first: dict[str, str] = {}
                for native, text in texts:
                    first.setdefault(native, text)
                self.indexed += [(i, first[native]) for native, i in ids.items()]
        calls, results = self.calls, self.results
        calls_sql = _CALLS_SQL
        if calls and results:
            calls, results = _answered(calls, results)
            calls_sql = _ANSWERED_CALLS_SQL
        for sql, rows in (
            (calls_sql, calls),
            (_RESULTS_SQL, results),
            (_USAGE_SQL, self.usage),
        ):
            if rows:
                db.insert_many(sql, rows)
        self.messages, self.calls, self.results, self.usage = [], [], [], []
        self.texts = {}
        return added
