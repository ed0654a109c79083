"""report views: verdicts_view and costs_view

Views for people who read the store with `sqlite3` or Datasette: one row per observer call
with its thread and checkpoint spelled out, and one row per billed model call (agents' and
observers') with tokens in one convention. Views are not in the SQLAlchemy metadata, and
Alembic's autogenerate does not compare views, so the models-match-migrations check ignores them.

Caution for later migrations: on SQLite, a batch operation that recreates threads, checkpoints,
verdicts or token_usage fails with "error in view verdicts_view: no such table" while these
views exist (SQLite checks views when the copy is renamed). Run it with
`PRAGMA legacy_alter_table=ON` on the migration connection, or drop the views first and create
them again after (VERDICTS_VIEW and COSTS_VIEW below).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22 12:00:00
"""

import re

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

VERDICTS_VIEW = """
CREATE VIEW verdicts_view AS
SELECT
    v.id AS verdict_id,
    v.created_at,
    date(v.created_at) AS day,
    v.run_id,
    v.observer,
    v.model,
    v.prompt_version,
    v.status,
    v.needs_correction,
    v.message,
    v.problem,
    v.latency_ms,
    v.input_tokens,
    v.output_tokens,
    v.cached_tokens,
    v.thinking_tokens,
    v.cache_write_tokens,
    v.cost_usd,
    v.credits,
    t.id AS thread_id,
    t.agent,
    t.native_id AS thread_native_id,
    t.cwd AS project,
    t.title AS thread_title,
    c.id AS checkpoint_id,
    c.message_native_id AS checkpoint_message_id,
    c.kind AS checkpoint_kind,
    c.tool_calls AS checkpoint_tool_calls,
    c.file_edits AS checkpoint_file_edits,
    c.gate_reason
FROM verdicts v
JOIN threads t ON t.id = v.thread_id
JOIN checkpoints c ON c.id = v.checkpoint_id
"""

# Agent calls that a forked subagent logged again (its parent's billing key and counts) are left
# out (billed once, to the parent). Both sides in the token convention of token_usage: input excludes cache reads, output
# includes reasoning. Observers report input including cached and output excluding thinking.
COSTS_VIEW = """
CREATE VIEW costs_view AS
SELECT
    'agent' AS side,
    u.timestamp AS at,
    date(u.timestamp) AS day,
    t.id AS thread_id,
    t.agent,
    t.native_id AS thread_native_id,
    t.cwd AS project,
    u.model,
    NULL AS observer,
    NULL AS run_id,
    NULL AS status,
    u.input_tokens,
    u.output_tokens,
    u.cache_read_tokens,
    u.cache_write_tokens,
    u.reasoning_tokens,
    NULL AS cost_usd,
    NULL AS credits
FROM token_usage u
JOIN threads t ON t.id = u.thread_id
WHERE NOT (t.parent_id IS NOT NULL
           AND EXISTS (SELECT 1 FROM token_usage p WHERE p.thread_id = t.parent_id AND p.key = u.key
                       AND p.input_tokens = u.input_tokens AND p.output_tokens = u.output_tokens
                       AND p.cache_read_tokens = u.cache_read_tokens
                       AND p.cache_write_tokens = u.cache_write_tokens))
UNION ALL
SELECT
    'audit' AS side,
    v.created_at AS at,
    date(v.created_at) AS day,
    t.id AS thread_id,
    t.agent,
    t.native_id AS thread_native_id,
    t.cwd AS project,
    v.model,
    v.observer,
    v.run_id,
    v.status,
    max(v.input_tokens - v.cached_tokens, 0) AS input_tokens,
    v.output_tokens + v.thinking_tokens AS output_tokens,
    v.cached_tokens AS cache_read_tokens,
    v.cache_write_tokens,
    v.thinking_tokens AS reasoning_tokens,
    v.cost_usd,
    v.credits
FROM verdicts v
JOIN threads t ON t.id = v.thread_id
"""


def for_dialect(sql: str, dialect: str) -> str:
    """The view's SQL for `dialect`: on PostgreSQL, the UTC day as text ('YYYY-MM-DD', as SQLite
    gives it) and GREATEST for SQLite's two-argument max()."""
    if dialect != "postgresql":
        return sql
    sql = re.sub(r"date\((\w+\.\w+)\)", r"to_char(\1 AT TIME ZONE 'UTC', 'YYYY-MM-DD')", sql)
    return sql.replace(
        "max(v.input_tokens - v.cached_tokens, 0)", "GREATEST(v.input_tokens - v.cached_tokens, 0)"
    )


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    op.execute("DROP VIEW IF EXISTS verdicts_view")
    op.execute("DROP VIEW IF EXISTS costs_view")
    op.execute(for_dialect(VERDICTS_VIEW, dialect))
    op.execute(for_dialect(COSTS_VIEW, dialect))


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS costs_view")
    op.execute("DROP VIEW IF EXISTS verdicts_view")
