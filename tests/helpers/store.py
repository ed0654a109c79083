"""A thread read back from the store, the same way for every transcript format's tests."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any, NamedTuple

from sqlalchemy import text


class Tokens(NamedTuple):
    """A thread's token_usage rows, summed (0 when it has none)."""

    input: int
    cache_read: int
    output: int
    reasoning: int
    cache_write: int
    bills: int  # how many usage rows


class StoredThread(NamedTuple):
    thread: dict[str, Any]  # the threads row
    messages: list  # the messages rows in order (blocks as stored, JSON text)
    calls: dict[str, SimpleNamespace]  # tool_calls by call id, edited_paths decoded
    tokens: Tokens


def stored_thread(engine, agent: str, native_id: str) -> StoredThread:
    """Read thread `native_id` of `agent` back: its row, messages, tool calls and tokens."""
    with engine.connect() as conn:
        thread = dict(
            conn.execute(
                text("SELECT * FROM threads WHERE agent = :a AND native_id = :n"),
                {"a": agent, "n": native_id},
            )
            .mappings()
            .one()
        )
        tid = {"t": thread["id"]}
        messages = conn.execute(
            text(
                "SELECT native_id, role, source_type, seq, line, timestamp, model, usage_key, "
                "stop_reason, blocks FROM messages WHERE thread_id = :t ORDER BY seq"
            ),
            tid,
        ).all()
        calls = {
            r.call_id: SimpleNamespace(
                **{**r._mapping, "edited_paths": json.loads(r.edited_paths or "null")}
            )
            for r in conn.execute(
                text(
                    "SELECT call_id, name, is_error, is_file_edit, edited_paths, call_message_id, "
                    "result_message_id FROM tool_calls WHERE thread_id = :t"
                ),
                tid,
            )
        }
        tokens = conn.execute(
            text(
                "SELECT COALESCE(SUM(input_tokens), 0), COALESCE(SUM(cache_read_tokens), 0), "
                "COALESCE(SUM(output_tokens), 0), COALESCE(SUM(reasoning_tokens), 0), "
                "COALESCE(SUM(cache_write_tokens), 0), COUNT(*) "
                "FROM token_usage WHERE thread_id = :t"
            ),
            tid,
        ).one()
    return StoredThread(thread, list(messages), calls, Tokens(*(int(x) for x in tokens)))


class StoreCounts(NamedTuple):
    """What a whole store holds, as the corpus tests of each format count it."""

    threads: int
    messages: int
    calls: int
    answered: int  # tool calls with their result
    edits: int  # tool calls that change files
    failed: int  # tool calls whose result is an error
    tokens: int  # input, cache and output tokens of every bill


def store_counts(engine) -> StoreCounts:
    with engine.connect() as conn:
        row = conn.execute(
            text(
                "SELECT (SELECT count(*) FROM threads), (SELECT count(*) FROM messages), "
                "(SELECT count(*) FROM tool_calls), "
                "(SELECT count(*) FROM tool_calls WHERE result_message_id IS NOT NULL), "
                "(SELECT count(*) FROM tool_calls WHERE is_file_edit), "
                "(SELECT count(*) FROM tool_calls WHERE is_error), "
                "(SELECT COALESCE(SUM(input_tokens + cache_read_tokens + cache_write_tokens "
                "+ output_tokens), 0) FROM token_usage)"
            )
        ).one()
    return StoreCounts(*(int(x) for x in row))
