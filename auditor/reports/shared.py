"""What every report shares: the `Report` shape, time windows and keys, --by and --until parsing."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from ..errors import AuditorError
from ..store.dialect import count_if, day_text  # noqa: F401 (the reports use them from here)

TIME_DIMS = ("day", "week", "month")
THREAD_DIMS = {"thread", "project", "agent", "source"}


@dataclass
class Report:
    """A report: `rows` and `total` are dicts keyed by `columns`; `notes` are caveats to print."""

    title: str
    by: list[str]
    columns: list[str]
    rows: list[dict[str, Any]]
    total: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        out = {
            "report": self.title,
            "by": self.by,
            "columns": self.columns,
            "rows": self.rows,
            "total": self.total,
            "notes": self.notes,
        }
        out.update(self.extra)
        return out


def time_expr(dim: str, col: str, dialect: str = "sqlite") -> str:
    """SQL naming the day, week (by its Monday) or month of the stored time `col` (UTC), as
    text: 2026-11-23, 2026-11-23 (a Monday), 2026-11."""
    if dialect == "postgresql":
        utc = f"({col} AT TIME ZONE 'UTC')"
        if dim == "week":
            return f"to_char(date_trunc('week', {utc}), 'YYYY-MM-DD')"
        return f"to_char({utc}, '{'YYYY-MM-DD' if dim == 'day' else 'YYYY-MM'}')"
    if dim == "day":
        return f"date({col})"
    if dim == "week":  # the Monday that starts the (ISO) week
        return f"date({col}, '-6 days', 'weekday 1')"
    return f"strftime('%Y-%m', {col})"


def db_time(value: datetime) -> str:
    """Format a time the way SQLAlchemy stores DateTime in SQLite (naive UTC), for comparison."""
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    return value.strftime("%Y-%m-%d %H:%M:%S.%f")


def window_sql(col: str, since: datetime | None, until: datetime | None, params: dict) -> str:
    """SQL keeping `col` in [since, until), its bounds added to `params`; "1 = 1" when unbounded."""
    conds = []
    if since is not None:
        params["since"] = db_time(since)
        conds.append(f"{col} >= :since")
    if until is not None:
        params["until"] = db_time(until)
        conds.append(f"{col} < :until")
    return " AND ".join(conds) or "1 = 1"


def check_dims(by: Sequence[str], allowed: Sequence[str]) -> list[str]:
    """Return the --by dimensions in order without repeats, or raise naming the valid ones."""
    out: list[str] = []
    for item in by:
        for dim in (d.strip() for d in item.split(",")):
            if not dim:
                continue
            if dim not in allowed:
                raise AuditorError(
                    f"{dim!r} is not a dimension of this report. Available: {', '.join(allowed)}"
                )
            if dim not in out:
                out.append(dim)
    return out


def parse_until(value: str | None) -> datetime | None:
    """Parse --until: a bare date means the whole of that day (up to the next midnight UTC)."""
    if not value:
        return None
    try:
        dt = datetime.fromisoformat(value)
    except ValueError:
        raise AuditorError(
            f"{value!r} is not a date: use an ISO date (2026-11-01) or date and time"
        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    if len(value) <= 10:
        dt += timedelta(days=1)
    return dt


def nearest_rank(ordered: list, p: int):
    """The p-th percentile of a sorted list by the nearest-rank method."""
    return ordered[max(1, -(-p * len(ordered) // 100)) - 1]


def ratio(a: float | None, b: float | None) -> float | None:
    """a / b, or None when either is missing or b is 0."""
    if a is None or not b:
        return None
    return a / b


def sort_rows(rows: list[dict], by: list[str], cost_cols: Sequence[str]) -> list[dict]:
    """In time order when the first dimension is a time, else the costliest first."""
    if by and by[0] in TIME_DIMS:
        return sorted(rows, key=lambda r: tuple((r[d] is not None, str(r[d] or "")) for d in by))
    return sorted(rows, key=lambda r: -sum(r.get(c) or 0 for c in cost_cols))
