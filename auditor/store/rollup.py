"""Sums kept in the store for cost reports, refreshed from the dirty marks ingest leaves.

`usage_rollup` holds agents' usage per (thread, day, model, price band); a thread whose usage
changed is marked `rollup_dirty` by ingest and summed again here before a cost report reads it.
Triggers on `usage_rollup` keep `usage_daily`, its sums per day over all threads (SQLite).
"""

from __future__ import annotations

from ..pricing.model_prices import band_sql
from . import sql_text
from .dialect import day_text

# A subagent that forks its parent's context (Claude Code's side questions) logs the parent's
# calls again: same billing key, same counts. They were billed once, to the parent. Such copies
# are looked for among sidechain threads only (through the (thread_id, key) index) and
# subtracted. Equal counts are required too, as some formats number their keys per thread.
COPIES_SQL = (
    "t.parent_id IS NOT NULL AND EXISTS (SELECT 1 FROM token_usage p WHERE p.thread_id = t.parent_id"
    " AND p.key = u.key AND p.input_tokens = u.input_tokens AND p.output_tokens = u.output_tokens"
    " AND p.cache_read_tokens = u.cache_read_tokens AND p.cache_write_tokens = u.cache_write_tokens)"
)


def refresh_rollup(conn, bounds: tuple[int, ...] | None = None) -> int:
    """Bring `usage_rollup` up to date for the threads marked dirty; return how many there were.

    The sums per (thread, day, model, band) leave out the calls a forked subagent logged again.
    `bounds` are the price bands' thresholds (default: the price table's); when they changed
    since the rollup was built, all of it is rebuilt.
    """
    if bounds is None:
        from ..pricing.model_prices import thresholds

        bounds = thresholds()
    conn = sql_text.wrap(conn)
    current = ",".join(map(str, bounds))
    stored = conn.execute("SELECT thresholds FROM usage_rollup_state WHERE id = 1").scalar()
    if stored != current:
        conn.execute("UPDATE threads SET rollup_dirty = TRUE")
        conn.execute("DELETE FROM usage_rollup_state")
        conn.execute(
            "INSERT INTO usage_rollup_state (id, thresholds) VALUES (1, :t)", {"t": current}
        )
    dirty = conn.execute("SELECT count(*) FROM threads WHERE rollup_dirty").scalar()
    if not dirty:
        return 0
    band = band_sql("(u.input_tokens + u.cache_read_tokens + u.cache_write_tokens)", bounds)
    conn.execute(
        "DELETE FROM usage_rollup WHERE thread_id IN (SELECT id FROM threads WHERE rollup_dirty)"
    )
    conn.execute(
        f"""
        INSERT INTO usage_rollup (thread_id, day, model, band, calls, input_tokens, output_tokens,
                                  cache_read_tokens, cache_write_tokens)
        SELECT u.thread_id, {day_text("u.timestamp", conn.dialect.name)} AS day, u.model, {band} AS band, count(*),
               sum(u.input_tokens), sum(u.output_tokens), sum(u.cache_read_tokens), sum(u.cache_write_tokens)
        FROM threads t JOIN token_usage u ON u.thread_id = t.id
        WHERE t.rollup_dirty AND NOT ({COPIES_SQL})
        GROUP BY u.thread_id, day, u.model, band
    """
    )
    conn.execute("UPDATE threads SET rollup_dirty = FALSE WHERE rollup_dirty")
    return int(dirty)
