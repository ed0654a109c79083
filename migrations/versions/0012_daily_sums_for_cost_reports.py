"""daily sums for cost reports: usage_daily, verdict_daily (kept by triggers), partial indexes

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-25 13:10:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

KEY = "day, observer, model, run_id"
SUMS = (
    "calls, invalid, errors, input_tokens, cached_tokens, output_tokens, thinking_tokens, "
    "cost_usd, credits, priced"
)


def _values(row: str) -> str:
    """One verdict's contribution to its verdict_daily row (`row` is NEW or OLD)."""
    return (
        f"substr({row}.created_at, 1, 10), {row}.observer, {row}.model, coalesce({row}.run_id, 0), "
        f"1, {row}.status = 'invalid', {row}.status = 'error', coalesce({row}.input_tokens, 0), "
        f"coalesce({row}.cached_tokens, 0), coalesce({row}.output_tokens, 0), "
        f"coalesce({row}.thinking_tokens, 0), coalesce({row}.cost_usd, 0), "
        f"coalesce({row}.credits, 0), {row}.cost_usd IS NOT NULL"
    )


ADD = (
    f"INSERT INTO verdict_daily ({KEY}, {SUMS}) VALUES ({_values('NEW')}) "
    f"ON CONFLICT ({KEY}) DO UPDATE SET "
    + ", ".join(f"{c} = {c} + excluded.{c}" for c in SUMS.split(", "))
    + ";"
)
WHERE_OLD = (
    "WHERE day = substr(OLD.created_at, 1, 10) AND observer = OLD.observer "
    "AND model = OLD.model AND run_id = coalesce(OLD.run_id, 0)"
)
REMOVE = (
    "UPDATE verdict_daily SET calls = calls - 1, invalid = invalid - (OLD.status = 'invalid'), "
    "errors = errors - (OLD.status = 'error'), "
    "input_tokens = input_tokens - coalesce(OLD.input_tokens, 0), "
    "cached_tokens = cached_tokens - coalesce(OLD.cached_tokens, 0), "
    "output_tokens = output_tokens - coalesce(OLD.output_tokens, 0), "
    "thinking_tokens = thinking_tokens - coalesce(OLD.thinking_tokens, 0), "
    "cost_usd = cost_usd - coalesce(OLD.cost_usd, 0), credits = credits - coalesce(OLD.credits, 0), "
    f"priced = priced - (OLD.cost_usd IS NOT NULL) {WHERE_OLD}; "
    f"DELETE FROM verdict_daily {WHERE_OLD} AND calls <= 0;"
)
COUNTED = (
    "created_at, observer, model, run_id, status, input_tokens, cached_tokens, output_tokens, "
    "thinking_tokens, cost_usd, credits"
)
USAGE_KEY = "day, model, band"
USAGE_SUMS = ("calls", "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
USAGE_ADD = (
    f"INSERT INTO usage_daily ({USAGE_KEY}, {', '.join(USAGE_SUMS)}) VALUES "
    "(coalesce(NEW.day, ''), coalesce(NEW.model, ''), NEW.band, "
    + ", ".join(f"NEW.{c}" for c in USAGE_SUMS)
    + f") ON CONFLICT ({USAGE_KEY}) DO UPDATE SET "
    + ", ".join(f"{c} = {c} + excluded.{c}" for c in USAGE_SUMS)
    + ";"
)
USAGE_WHERE_OLD = (
    "WHERE day = coalesce(OLD.day, '') AND model = coalesce(OLD.model, '') AND band = OLD.band"
)
USAGE_REMOVE = (
    "UPDATE usage_daily SET "
    + ", ".join(f"{c} = {c} - OLD.{c}" for c in USAGE_SUMS)
    + f" {USAGE_WHERE_OLD}; DELETE FROM usage_daily {USAGE_WHERE_OLD} AND calls <= 0;"
)
TRIGGERS = {
    "verdict_daily_add": f"AFTER INSERT ON verdicts BEGIN {ADD} END",
    "verdict_daily_remove": f"AFTER DELETE ON verdicts BEGIN {REMOVE} END",
    "verdict_daily_change": f"AFTER UPDATE OF {COUNTED} ON verdicts BEGIN {REMOVE} {ADD} END",
    "usage_daily_add": f"AFTER INSERT ON usage_rollup BEGIN {USAGE_ADD} END",
    "usage_daily_remove": f"AFTER DELETE ON usage_rollup BEGIN {USAGE_REMOVE} END",
    "usage_daily_change": (f"AFTER UPDATE ON usage_rollup BEGIN {USAGE_REMOVE} {USAGE_ADD} END"),
}


def upgrade() -> None:
    op.create_table(
        "usage_daily",
        sa.Column("day", sa.String(length=10), nullable=False),
        sa.Column("model", sa.String(length=128), nullable=False),
        sa.Column("band", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("calls", sa.Integer(), nullable=False),
        sa.Column("input_tokens", sa.BigInteger(), nullable=False),
        sa.Column("output_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cache_read_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cache_write_tokens", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("day", "model", "band", name=op.f("pk_usage_daily")),
    )
    op.create_table(
        "verdict_daily",
        sa.Column("day", sa.String(length=10), nullable=False),
        sa.Column("observer", sa.String(length=64), nullable=False),
        sa.Column("model", sa.String(length=128), nullable=False),
        sa.Column("run_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("calls", sa.Integer(), nullable=False),
        sa.Column("invalid", sa.Integer(), nullable=False),
        sa.Column("errors", sa.Integer(), nullable=False),
        sa.Column("input_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cached_tokens", sa.BigInteger(), nullable=False),
        sa.Column("output_tokens", sa.BigInteger(), nullable=False),
        sa.Column("thinking_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cost_usd", sa.Double(), nullable=False),
        sa.Column("credits", sa.Double(), nullable=False),
        sa.Column("priced", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint(
            "day", "observer", "model", "run_id", name=op.f("pk_verdict_daily")
        ),
    )
    op.create_index(
        "ix_threads_rollup_dirty",
        "threads",
        ["id"],
        unique=False,
        sqlite_where=sa.text("rollup_dirty"),
        postgresql_where=sa.text("rollup_dirty"),
    )
    op.create_index(
        "ix_verdicts_unpriced",
        "verdicts",
        ["created_at"],
        unique=False,
        sqlite_where=sa.text("cost_usd IS NULL"),
        postgresql_where=sa.text("cost_usd IS NULL"),
    )
    if op.get_bind().dialect.name == "sqlite":  # elsewhere the reports read the sums' sources
        op.execute(
            f"INSERT INTO usage_daily ({USAGE_KEY}, {', '.join(USAGE_SUMS)}) SELECT "
            "coalesce(day, ''), coalesce(model, ''), band, "
            + ", ".join(f"sum({c})" for c in USAGE_SUMS)
            + " FROM usage_rollup GROUP BY 1, 2, 3"
        )
        op.execute(
            f"INSERT INTO verdict_daily ({KEY}, {SUMS}) SELECT substr(created_at, 1, 10), "
            "observer, model, coalesce(run_id, 0), count(*), sum(status = 'invalid'), "
            "sum(status = 'error'), coalesce(sum(input_tokens), 0), "
            "coalesce(sum(cached_tokens), 0), coalesce(sum(output_tokens), 0), "
            "coalesce(sum(thinking_tokens), 0), coalesce(sum(cost_usd), 0), "
            "coalesce(sum(credits), 0), count(cost_usd) FROM verdicts GROUP BY 1, 2, 3, 4"
        )
        for name, body in TRIGGERS.items():
            op.execute(f"CREATE TRIGGER {name} {body}")


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for name in TRIGGERS:
            op.execute(f"DROP TRIGGER IF EXISTS {name}")
    op.drop_index("ix_verdicts_unpriced", table_name="verdicts")
    op.drop_index("ix_threads_rollup_dirty", table_name="threads")
    op.drop_table("verdict_daily")
    op.drop_table("usage_daily")
