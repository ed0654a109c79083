"""SQL written once for SQLite and PostgreSQL, or per dialect where the two differ."""

from __future__ import annotations

from datetime import UTC, datetime


def count_if(condition: str) -> str:
    """SQL counting the rows where `condition` holds (SQLite's sum(a = b) is not portable)."""
    return f"sum(CASE WHEN {condition} THEN 1 ELSE 0 END)"


def day_text(col: str, dialect: str) -> str:
    """SQL for the UTC day ('YYYY-MM-DD') of the stored time `col`: on SQLite its first ten
    characters (much cheaper than date() per row), on PostgreSQL formatted in UTC."""
    if dialect == "postgresql":
        return f"to_char({col} AT TIME ZONE 'UTC', 'YYYY-MM-DD')"
    return f"substr({col}, 1, 10)"


def iso_utc(value: datetime | None) -> str | None:
    """A stored time as ISO 8601 in UTC ending in Z, whichever store gave it: SQLite hands
    times back naive (they are UTC), PostgreSQL with a time zone."""
    if value is None:
        return None
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    return value.isoformat() + "Z"
