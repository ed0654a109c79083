"""The agreement report: two observers compared on the checkpoints both answered."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, text

from ..errors import AuditorError
from .shared import (
    Report,
    window_sql,
)


def parse_observer(spec: str) -> tuple[str, str | None]:
    """Split "NAME" or "NAME:MODEL" (the model may itself contain ':' or '/')."""
    name, _, model = spec.strip().partition(":")
    if not name:
        raise AuditorError(
            f"{spec!r} is not an observer: write NAME or NAME:MODEL, e.g. gemini:gemini-2.5-flash"
        )
    return name, model or None


def cohen_kappa(table: Sequence[Sequence[int]]) -> float | None:
    """Cohen's kappa of a square contingency table (rows: rater A, columns: rater B).

    None when it is undefined: no items, or both raters always gave the one same answer.
    """
    k = len(table)
    n = sum(sum(row) for row in table)
    if n == 0:
        return None
    po = sum(table[i][i] for i in range(k)) / n
    pe = sum(sum(table[i]) * sum(table[j][i] for j in range(k)) for i in range(k)) / (n * n)
    if pe == 1:
        return None
    return (po - pe) / (1 - pe)


def _latest_valid(alias: str, param: str, with_model: bool, window: str) -> str:
    model = f" AND model = :{param}_model" if with_model else ""
    # The latest valid answer: the row holding max(id) of its checkpoint.
    return (
        f"{alias} AS (SELECT v.checkpoint_id, v.id AS vid, v.needs_correction, v.message "
        f"FROM verdicts v WHERE v.id IN (SELECT max(id) FROM verdicts v WHERE status = 'ok' "
        f"AND observer = :{param}{model} AND {window} GROUP BY checkpoint_id))"
    )


def agreement_report(
    engine: Engine, a: str, b: str, since: datetime | None = None, until: datetime | None = None
) -> Report:
    """Compare two observers on the checkpoints both answered validly (latest answer of each).

    Rows are the disagreements; `extra` holds the 2x2 table (rows: A, columns: B; index 0 is
    "needs correction"), the percent agreement and Cohen's kappa.
    """
    (an, am), (bn, bm) = parse_observer(a), parse_observer(b)
    if (an, am) == (bn, bm):
        raise AuditorError(f"compare two different observers, not {a!r} with itself")
    params: dict[str, Any] = {"a": an, "b": bn}
    if am:
        params["a_model"] = am
    if bm:
        params["b_model"] = bm
    win = window_sql("v.created_at", since, until, params)
    sql = f"""
        WITH {_latest_valid("va", "a", bool(am), win)}, {_latest_valid("vb", "b", bool(bm), win)}
        SELECT c.id, t.id, t.agent, t.native_id, t.cwd, c.message_native_id,
               va.needs_correction, va.message, vb.needs_correction, vb.message
        FROM va JOIN vb ON vb.checkpoint_id = va.checkpoint_id
        JOIN checkpoints c ON c.id = va.checkpoint_id JOIN threads t ON t.id = c.thread_id
        ORDER BY t.id, c.id
    """
    with engine.connect() as conn:
        pairs = conn.execute(text(sql), params).all()
        known = {r[0] for r in conn.execute(text("SELECT DISTINCT observer FROM verdicts"))}
    for name in (an, bn):
        if name not in known:
            from ..errors import UnknownName

            raise UnknownName("observer with verdicts in this store", name, sorted(known))
    table = [[0, 0], [0, 0]]
    disagreements = []
    for cid, tid, agent, native, cwd, mid, a_needs, a_msg, b_needs, b_msg in pairs:
        i, j = (0 if a_needs else 1), (0 if b_needs else 1)
        table[i][j] += 1
        if i != j:
            disagreements.append(
                {
                    "thread": tid,
                    "thread_native_id": native,
                    "agent": agent,
                    "project": cwd,
                    "checkpoint": cid,
                    "message_id": mid,
                    "a_needs_correction": bool(a_needs),
                    "a_message": a_msg,
                    "b_needs_correction": bool(b_needs),
                    "b_message": b_msg,
                }
            )
    n = len(pairs)
    agreement = (table[0][0] + table[1][1]) / n if n else None
    kappa = cohen_kappa(table)
    notes = [] if n else [f"no checkpoint has a valid answer from both {a} and {b}"]
    extra = {
        "a": a,
        "b": b,
        "checkpoints": n,
        "table": table,
        "agreement": agreement,
        "kappa": kappa,
    }
    cols = [
        "thread",
        "thread_native_id",
        "agent",
        "project",
        "checkpoint",
        "message_id",
        "a_needs_correction",
        "a_message",
        "b_needs_correction",
        "b_message",
    ]
    return Report("agreement", [], cols, disagreements, None, notes, extra)
