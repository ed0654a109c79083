"""The deliveries report: what became of the corrections the observers asked for.

A correction (a valid answer that asks for one, with a message) ends up one of:
- `delivered`: an injector or a live hook handed it to the agent;
- `taken_back`: a live hook had it ready, and the user wrote before it was handed over;
- `held`: a loop guard kept it back (`user-wrote-again`, `too-many-corrections`,
  `duplicate`...), before it was ever ready;
- `failed`: every attempt to deliver it failed (a later `auditor inject` tries again);
- `pending`: nobody tried yet.
Besides, `cancelled` counts the live audits stopped in flight because the user wrote: they
never got to say whether a correction was needed. `why` counts the reasons behind the last
four, as `held: user-wrote-again`, `taken back: UserPromptSubmit`, `cancelled: the user
wrote`, `failed: ConnectionError`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, text

from .shared import TIME_DIMS, Report, check_dims, sort_rows, time_expr, window_sql

DELIVERY_DIMS = ("agent", "observer", "model", "project", "day", "week", "month")
DELIVERY_COLS = [
    "corrections",
    "delivered",
    "taken_back",
    "held",
    "failed",
    "pending",
    "cancelled",
    "why",
]
# How a live hook records a correction it took back (`auditor.live.worker`): the user wrote
# (EVENT) before it was handed over.
_TAKEN_BACK = re.compile(r"the user wrote \((?P<event>[^)]*)\) before it was handed over")
_CANCELLED = re.compile(r"^cancelled: (?P<why>.*?)(?:, [\d.]+s into the call)?$", re.DOTALL)


def _keys(by: list[str], dialect: str) -> list[tuple[str, str]]:
    out = []
    for dim in by:
        if dim in TIME_DIMS:
            out.append((dim, time_expr(dim, "v.created_at", dialect)))
        elif dim in ("observer", "model"):
            out.append((dim, f"v.{dim}"))
        else:
            out.append((dim, "t.cwd" if dim == "project" else "t.agent"))
    return out


def _fate(status: str, problem: str | None, tries: list[tuple[str, str | None]]) -> tuple[str, str]:
    """(column, reason) of one verdict: what became of it, and why where it did not go out."""
    if status == "cancelled":
        found = _CANCELLED.match(problem or "")
        return "cancelled", f"cancelled: {found['why'] if found else problem or '?'}"
    if any(s == "delivered" for s, _ in tries):
        return "delivered", ""
    skipped = [e or "" for s, e in tries if s == "skipped"]
    if skipped:
        taken = _TAKEN_BACK.search(skipped[-1])
        if taken:
            return "taken_back", f"taken back: {taken['event']}"
        return "held", "held: " + skipped[-1].split(":")[0]
    if tries:
        return "failed", "failed: " + (tries[-1][1] or "?").split(":")[0]
    return "pending", ""


def delivery_report(
    engine: Engine,
    by: Sequence[str] = ("agent", "observer", "day"),
    since: datetime | None = None,
    until: datetime | None = None,
) -> Report:
    """Return, per group, how many corrections were delivered, taken back, held, failed or are
    pending, how many live audits were cancelled, and why (see the module docstring). A
    correction is dated by when the observer answered."""
    by = check_dims(by, DELIVERY_DIMS)
    keys = _keys(by, engine.dialect.name)
    params: dict[str, Any] = {}
    window = window_sql("v.created_at", since, until, params)
    select_keys = "".join(f", {sql} AS k_{dim}" for dim, sql in keys)
    verdicts = text(
        f"SELECT v.id, v.status, v.problem{select_keys} FROM verdicts v "
        "JOIN threads t ON t.id = v.thread_id "
        "WHERE ((v.status = 'ok' AND v.needs_correction AND v.message IS NOT NULL) "
        f"OR v.status = 'cancelled') AND {window}"
    )
    tries: dict[int, list[tuple[str, str | None]]] = {}
    with engine.connect() as conn:
        rows = conn.execute(verdicts, params).all()
        attempts = text(
            "SELECT i.verdict_id, i.status, i.error FROM injections i "
            "JOIN verdicts v ON v.id = i.verdict_id "
            f"WHERE {window} ORDER BY i.created_at, i.id"
        )
        for r in conn.execute(attempts, params):
            tries.setdefault(r.verdict_id, []).append((r.status, r.error))
    groups: dict[tuple, dict[str, Any]] = {}
    total = _empty({})
    for r in rows:
        key = tuple(getattr(r, f"k_{dim}") for dim in by)
        group = groups.setdefault(key, _empty(dict(zip(by, key, strict=True))))
        column, why = _fate(r.status, r.problem, tries.get(r.id, []))
        for g in (group, total):
            g[column] += 1
            g["corrections"] += column != "cancelled"
            if why:
                g["why"][why] = g["why"].get(why, 0) + 1
    out = sort_rows(list(groups.values()), by, ("corrections",))
    return Report(
        "deliveries",
        by,
        by + DELIVERY_COLS,
        out,
        total if by else None,
        notes=[] if rows else ["no correction has been asked for in this window"],
    )


def _empty(keys: dict[str, Any]) -> dict[str, Any]:
    return {**keys, **{c: 0 for c in DELIVERY_COLS if c != "why"}, "why": {}}
