"""Spans of time as the command line writes them (90s, 15m, 12h, 7d, 2w) and `--since WHEN`."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from .errors import AuditorError

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_SPAN = re.compile(r"(\d+(?:\.\d*)?|\.\d+)([smhdw]?)")
_HINT = "use a number with s, m, h, d or w, like 90s, 15m, 12h or 7d"


def parse_duration(value: str) -> timedelta:
    """Turn '90s', '15m', '12h', '7d', '2w' or a bare number of seconds into a timedelta."""
    match = _SPAN.fullmatch(str(value).strip().lower())
    if not match:
        raise AuditorError(f"{value!r} is not a duration: {_HINT}")
    seconds = float(match[1]) * UNITS[match[2] or "s"]
    if seconds <= 0:
        raise AuditorError(f"{value!r} is no time at all: a duration must be longer than 0")
    return timedelta(seconds=seconds)


def format_duration(span: timedelta) -> str:
    """Write `span` in the largest unit that holds it whole: 15m, 90s, 2h, 1w."""
    seconds = span.total_seconds()
    for unit, size in sorted(UNITS.items(), key=lambda item: -item[1]):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def parse_since(value: str, now: datetime | None = None) -> datetime:
    """Turn an ISO date or time (UTC unless it says otherwise), or a span back from `now`
    such as 12h or 7d, into an aware datetime."""
    try:
        dt = datetime.fromisoformat(value)
    except ValueError:
        pass
    else:
        return dt if dt.tzinfo else dt.replace(tzinfo=UTC)
    if value.strip()[-1:].isalpha():  # a bare number would be seconds back: surely a slip
        try:
            return (now or datetime.now(UTC)) - parse_duration(value)
        except AuditorError:
            pass
    raise AuditorError(
        f"{value!r} is not a time: use an ISO date (2026-11-01) or a span back from now "
        "like 12h or 7d"
    )
