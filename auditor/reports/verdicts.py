"""The verdicts report: how often observers were asked, stepped in, failed, and what it cost."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, text

from .shared import (
    THREAD_DIMS,
    TIME_DIMS,
    Report,
    check_dims,
    count_if,
    nearest_rank,
    ratio,
    sort_rows,
    time_expr,
    window_sql,
)

VERDICT_DIMS = ("observer", "model", "project", "agent", "run", "day", "week", "month")

VERDICT_COLS = [
    "seen",
    "gated_out",
    "gated_in",
    "calls",
    "audited",
    "corrections",
    "correction_rate",
    "judged_right",
    "judged_wrong",
    "invalid",
    "errors",
    "latency_p50_ms",
    "latency_p95_ms",
    "usd",
    "usd_per_audit",
    "usd_per_correction",
    "gated_out_by_reason",
]


def _verdict_keys(by: list[str], side: str, dialect: str) -> list[tuple[str, str]]:
    """(column, SQL) per dimension; side "c" (checkpoints joined to their run) or "v" (verdicts)."""
    at = "c.gated_at" if side == "c" else "v.created_at"
    src = "r" if side == "c" else "v"
    out = []
    for dim in by:
        if dim in TIME_DIMS:
            out.append((dim, time_expr(dim, at, dialect)))
        elif dim in ("observer", "model"):
            out.append((dim, f"{src}.{dim}"))
        elif dim == "run":
            out.append(("run", f"{side}.run_id"))
        elif dim == "project":
            out.append(("project", "t.cwd"))
        elif dim == "agent":
            out.append(("agent", "t.agent"))
    return out


def verdict_report(
    engine: Engine,
    by: Sequence[str] = ("observer", "model"),
    since: datetime | None = None,
    until: datetime | None = None,
) -> Report:
    """Return, per group, how often observers were asked, stepped in, failed, and what it cost.

    `seen`: distinct checkpoints a run of the group gated or the group answered; `gated_out`
    (by reason, the reason without its figures): of those, the ones the gate held back at their
    latest gating; `calls`: observer calls; `audited`: valid answers; `corrections`: valid
    answers asking for a correction; `judged_right` / `judged_wrong`: of those, the ones a
    person marked right or wrong (the store's labels, `auditor serve`'s review page); latency
    percentiles (nearest rank) over answered calls.
    """
    by = check_dims(by, VERDICT_DIMS)
    dialect = engine.dialect.name
    ck, vk = _verdict_keys(by, "c", dialect), _verdict_keys(by, "v", dialect)
    cols = [k[0] for k in vk]
    n = len(cols)
    csel = "".join(f"{k[1]} AS k{i}, " for i, k in enumerate(ck))
    vsel = "".join(f"{k[1]} AS k{i}, " for i, k in enumerate(vk))
    kl = "".join(f"k{i}, " for i in range(n))
    grp = ("GROUP BY " + ", ".join(f"k{i}" for i in range(n))) if n else ""
    params: dict[str, Any] = {}
    cwin = window_sql("c.gated_at", since, until, params)
    vwin = window_sql("v.created_at", since, until, params)
    c_join = " JOIN threads t ON t.id = c.thread_id" if THREAD_DIMS & set(by) else ""
    v_join = " JOIN threads t ON t.id = v.thread_id" if THREAD_DIMS & set(by) else ""
    c_from = f"checkpoints c JOIN runs r ON r.id = c.run_id{c_join} WHERE {cwin}"
    v_from = f"verdicts v{v_join} WHERE {vwin}"
    # Checkpoints whose latest gating was by a run of the group, with the reason when held back.
    gated_sql = f"""
        SELECT {csel} CASE WHEN NOT c.gate_audit THEN c.gate_code END AS reason, count(*)
        FROM {c_from} GROUP BY {kl} reason
    """
    # Checkpoints the group answered that the query above did not already count for it.
    same = " AND ".join(
        [f"r.id IS NOT NULL AND {cwin}"]
        + [f"({c[1]}) IS NOT DISTINCT FROM ({v[1]})" for c, v in zip(ck, vk)]
    )
    answered_sql = f"""
        SELECT {vsel} count(DISTINCT v.checkpoint_id)
        FROM verdicts v{v_join} JOIN checkpoints c ON c.id = v.checkpoint_id
        LEFT JOIN runs r ON r.id = c.run_id
        WHERE {vwin} AND NOT ({same}) {grp}
    """
    calls_sql = f"""
        SELECT {vsel} count(*), {count_if("v.status = 'ok'")},
               {count_if("v.status = 'ok' AND v.needs_correction")},
               {count_if("v.status = 'invalid'")}, {count_if("v.status = 'error'")}, sum(v.cost_usd)
        FROM {v_from} {grp}
    """
    # Corrections whose checkpoint a person labelled: right when it needed one, else wrong.
    judged_sql = f"""
        SELECT {vsel} {count_if("l.needs_correction")}, {count_if("NOT l.needs_correction")}
        FROM verdicts v{v_join} JOIN checkpoints ck ON ck.id = v.checkpoint_id
        JOIN labels l ON l.thread_id = ck.thread_id AND l.message_native_id = ck.message_native_id
        WHERE {vwin} AND v.status = 'ok' AND v.needs_correction {grp}
    """
    latency_sql = f"""
        SELECT {vsel} v.latency_ms FROM {v_from}
        AND v.status IN ('ok', 'invalid') AND v.latency_ms IS NOT NULL
    """
    rows: dict[tuple, dict[str, Any]] = {}

    def row_for(key: tuple) -> dict[str, Any]:
        if key not in rows:
            row = dict(zip(cols, key))
            row.update({c: 0 for c in VERDICT_COLS})
            row.update(gated_out_by_reason={}, latency_p50_ms=None, latency_p95_ms=None, usd=None)
            rows[key] = row
        return rows[key]

    latencies: dict[tuple, list[int]] = {}
    with engine.connect() as conn:
        for r in conn.execute(text(gated_sql), params):
            row = row_for(tuple(r[:n]))
            row["seen"] += r[n + 1]
            if r[n] is not None:
                row["gated_out_by_reason"][r[n]] = r[n + 1]
                row["gated_out"] += r[n + 1]
        for r in conn.execute(text(answered_sql), params):
            row_for(tuple(r[:n]))["seen"] += r[n]
        for r in conn.execute(text(calls_sql), params):
            row = row_for(tuple(r[:n]))
            (
                row["calls"],
                row["audited"],
                row["corrections"],
                row["invalid"],
                row["errors"],
                row["usd"],
            ) = (r[n], r[n + 1] or 0, r[n + 2] or 0, r[n + 3] or 0, r[n + 4] or 0, r[n + 5])
        for r in conn.execute(text(judged_sql), params):
            row = row_for(tuple(r[:n]))
            row["judged_right"], row["judged_wrong"] = r[n] or 0, r[n + 1] or 0
        for r in conn.execute(text(latency_sql), params):
            latencies.setdefault(tuple(r[:n]), []).append(r[n])
    for key, values in latencies.items():
        values.sort()
        row = rows[key]
        row["latency_p50_ms"], row["latency_p95_ms"] = (
            nearest_rank(values, 50),
            nearest_rank(values, 95),
        )
    for row in rows.values():
        row["gated_in"] = row["seen"] - row["gated_out"]
        row["correction_rate"] = ratio(row["corrections"], row["audited"])
        row["usd_per_audit"] = ratio(row["usd"], row["audited"])
        row["usd_per_correction"] = ratio(row["usd"], row["corrections"])
    out = sort_rows(list(rows.values()), by, ("calls",))
    if not by or by[0] not in TIME_DIMS:
        out.sort(key=lambda r: tuple(str(r[c] or "") for c in cols))
    total: dict[str, Any] | None = None
    if len(out) > 1:
        total = {c: None for c in cols}
        for c in (
            "seen",
            "gated_out",
            "gated_in",
            "calls",
            "audited",
            "corrections",
            "judged_right",
            "judged_wrong",
            "invalid",
            "errors",
        ):
            total[c] = sum(r[c] for r in out)
        usd = [r["usd"] for r in out if r["usd"] is not None]
        total["usd"] = sum(usd) if usd else None
        reasons: dict[str, int] = {}
        for o in out:
            for k, v in o["gated_out_by_reason"].items():
                reasons[k] = reasons.get(k, 0) + v
        total.update(
            gated_out_by_reason=reasons,
            latency_p50_ms=None,
            latency_p95_ms=None,
            correction_rate=ratio(total["corrections"], total["audited"]),
            usd_per_audit=ratio(total["usd"], total["audited"]),
            usd_per_correction=ratio(total["usd"], total["corrections"]),
        )
    return Report("verdicts", by, cols + VERDICT_COLS, out, total)
