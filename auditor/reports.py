"""Reports over the store: costs, verdicts, agreement between observers, evaluation on labels.

Every report is one or two SQL aggregations (GROUP BY in SQLite), so it stays fast on a store of
100k threads; Python only prices the grouped token sums and shapes rows. Times are UTC, as
stored. Each function returns a `Report`: ordered columns, rows as dicts, a total row and notes,
which the CLI renders as a table, JSON or CSV.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, text

from .errors import AuditorError

TIME_DIMS = ("day", "week", "month")
COST_DIMS = ("day", "week", "month", "model", "observer", "run", "thread", "project", "agent")
VERDICT_DIMS = ("observer", "model", "project", "agent", "run", "day", "week", "month")


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


# -- shared helpers ------------------------------------------------------------------------


def _time_expr(dim: str, col: str) -> str:
    if dim == "day":
        return f"date({col})"
    if dim == "week":  # the Monday that starts the (ISO) week
        return f"date({col}, '-6 days', 'weekday 1')"
    return f"strftime('%Y-%m', {col})"


def _db_time(value: datetime) -> str:
    """Format a time the way SQLAlchemy stores DateTime in SQLite (naive UTC), for comparison."""
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    return value.strftime("%Y-%m-%d %H:%M:%S.%f")


def _window(col: str, since: datetime | None, until: datetime | None, params: dict) -> str:
    conds = []
    if since is not None:
        params["since"] = _db_time(since)
        conds.append(f"{col} >= :since")
    if until is not None:
        params["until"] = _db_time(until)
        conds.append(f"{col} < :until")
    return " AND ".join(conds) or "1"


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


def _rank(ordered: list, p: int):
    """The p-th percentile of a sorted list by the nearest-rank method."""
    return ordered[max(1, -(-p * len(ordered) // 100)) - 1]


def _div(a: float | None, b: float | None) -> float | None:
    if a is None or not b:
        return None
    return a / b


def _sort_rows(rows: list[dict], by: list[str], cost_cols: Sequence[str]) -> list[dict]:
    if by and by[0] in TIME_DIMS:
        return sorted(rows, key=lambda r: tuple((r[d] is not None, str(r[d] or "")) for d in by))
    return sorted(rows, key=lambda r: -sum(r.get(c) or 0 for c in cost_cols))


# -- prices (auditor.prices is the one price table) ------------------------------------------

# Some models bill the whole call at a higher rate once its prompt passes a threshold, so token
# sums cannot be priced as one call. Calls are grouped by prompt-size band (between consecutive
# thresholds of any model) in SQL; inside a band every model's price is linear, so a group is
# priced with per-token rates probed once per (model, band) from the price table.
FALLBACK_THRESHOLDS = (
    32_000,
    100_000,
    128_000,
    199_999,
    200_000,
    256_000,
    272_000,
    512_000,
    524_288,
)
_thresholds: tuple[int, ...] | None = None


def thresholds() -> tuple[int, ...]:
    """Return every prompt-size threshold at which some price changes, ascending."""
    global _thresholds
    if _thresholds is None:
        from . import prices

        found = {prices.TIER_THRESHOLD, *FALLBACK_THRESHOLDS}
        try:  # read the tiers genai-prices knows, so a new threshold is not missed
            from genai_prices.data_snapshot import get_snapshot
            from genai_prices.types import TieredPrices

            for provider in get_snapshot().providers:
                for model in provider.models:
                    prices_ = model.prices if isinstance(model.prices, list) else [model.prices]
                    for p in prices_:
                        p = getattr(p, "prices", p)
                        for value in vars(p).values():
                            if isinstance(value, TieredPrices):
                                found.update(t.start for t in value.tiers)
        except (
            ImportError,
            AttributeError,
            TypeError,
        ):  # its internals moved: the fallback list applies
            pass
        _thresholds = tuple(sorted(found))
    return _thresholds


def band_sql(prompt: str) -> str:
    """SQL giving the band number of a call whose whole prompt (cache included) is `prompt`."""
    cases = " ".join(f"WHEN {prompt} <= {t} THEN {i}" for i, t in enumerate(thresholds()))
    return f"CASE {cases} ELSE {len(thresholds())} END"


class Pricer:
    """Price grouped token sums exactly as the calls would be priced one by one."""

    PROBE_OUT = 1000

    def __init__(self) -> None:
        self._rates: dict[tuple, tuple | None] = {}

    def _probe_size(self, band: int) -> int:
        ts = thresholds()
        return 1000 if band == 0 else ts[band - 1] + 1

    def rates(self, model: str | None, band: int, provider: str | None = None):
        """(input, output, cache read, cache write) USD per token, or None for an unknown model."""
        key = (model, band, provider)
        if key not in self._rates:
            self._rates[key] = self._probe(model, band, provider) if model else None
        return self._rates[key]

    def _probe(self, model: str, band: int, provider: str | None):
        from .prices import Tokens, price

        x, o = self._probe_size(band), self.PROBE_OUT
        base = price(model, Tokens(input=x), provider).usd
        if base is None:
            return None
        read = price(model, Tokens(input=x, cache_read=x), provider).usd
        write = price(model, Tokens(input=x, cache_write=x), provider).usd
        out = price(model, Tokens(input=x, output=o), provider).usd
        return base / x, (out - base) / o, read / x, write / x

    def usd(
        self,
        model: str | None,
        band: int,
        uncached: int,
        output: int,
        cache_read: int,
        cache_write: int,
        provider: str | None = None,
    ) -> float | None:
        """Price the sums of calls of one band; `uncached` is prompt tokens not read from or written to cache."""
        r = self.rates(model, band, provider)
        if r is None:
            return None
        return float(r[0] * uncached + r[1] * output + r[2] * cache_read + r[3] * cache_write)


# -- report costs ----------------------------------------------------------------------------

AGENT_COLS = [
    "agent_calls",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "agent_usd",
    "agent_unpriced_models",
]
AUDIT_COLS = [
    "audit_calls",
    "audit_invalid",
    "audit_errors",
    "audit_input_tokens",
    "audit_cached_tokens",
    "audit_output_tokens",
    "audit_thinking_tokens",
    "audit_usd",
    "audit_credits",
    "audit_unpriced_calls",
]


# A subagent that forks its parent's context (Claude Code's side questions) logs the parent's
# calls again: same billing key, same counts. They were billed once, to the parent. Such copies
# are looked for among sidechain threads only (through the (thread_id, key) index) and
# subtracted. Equal counts are required too, as some formats number their keys per thread.
COPIES_SQL = (
    "t.parent_id IS NOT NULL AND EXISTS (SELECT 1 FROM token_usage p WHERE p.thread_id = t.parent_id"
    " AND p.key = u.key AND p.input_tokens = u.input_tokens AND p.output_tokens = u.output_tokens"
    " AND p.cache_read_tokens = u.cache_read_tokens AND p.cache_write_tokens = u.cache_write_tokens)"
)
THREAD_DIMS = {"thread", "project", "agent"}


def _cost_columns(by: list[str]) -> tuple[list[str], list[tuple[str, str, str]]]:
    """Return the output key columns, and the SQL columns to group by: (alias, agent side,
    audit side), NULL where a side has no such thing. Weeks and months are made from days in
    Python: grouping on a substring of the stored time is much cheaper than date() per row."""
    out: list[str] = []
    sql: list[tuple[str, str, str]] = []
    for dim in by:
        if dim in TIME_DIMS:
            if not any(c[0] == "day" for c in sql):
                sql.append(("day", "substr(u.timestamp, 1, 10)", "substr(v.created_at, 1, 10)"))
            out.append(dim)
        elif dim == "thread":
            sql += [("thread", "t.id", "t.id"), ("thread_native_id", "t.native_id", "t.native_id")]
            out += ["thread", "thread_native_id"]
        else:
            agent_side = {
                "model": "u.model",
                "observer": "NULL",
                "run": "NULL",
                "project": "t.cwd",
                "agent": "t.agent",
            }[dim]
            audit_side = {
                "model": "v.model",
                "observer": "v.observer",
                "run": "v.run_id",
                "project": "t.cwd",
                "agent": "t.agent",
            }[dim]
            sql.append((dim, agent_side, audit_side))
            out.append(dim)
    return out, sql


def week_of(day: str | None) -> str | None:
    """Name a week by its Monday."""
    if not day:
        return None
    d = datetime.strptime(day, "%Y-%m-%d").date()
    return (d - timedelta(days=d.weekday())).isoformat()


def _key_maker(out: list[str], sql: list[tuple[str, str, str]]):
    pos = {c[0]: i for i, c in enumerate(sql)}

    def make(values: Sequence[Any]) -> tuple:
        key = []
        for col in out:
            if col == "week":
                key.append(week_of(values[pos["day"]]))
            elif col == "month":
                day = values[pos["day"]]
                key.append(day[:7] if day else None)
            else:
                key.append(values[pos[col]])
        return tuple(key)

    return make


def _whole_days(value: datetime | None) -> bool:
    if value is None:
        return True
    value = value.astimezone(UTC) if value.tzinfo else value
    return (value.hour, value.minute, value.second, value.microsecond) == (0, 0, 0, 0)


def refresh_rollup(conn) -> int:
    """Bring `usage_rollup` up to date for the threads marked dirty; return how many there were.

    The sums per (thread, day, model, band) leave out the calls a forked subagent logged again.
    When the price table's thresholds changed since the rollup was built, all of it is rebuilt.
    """
    current = ",".join(map(str, thresholds()))
    stored = conn.execute(text("SELECT thresholds FROM usage_rollup_state WHERE id = 1")).scalar()
    if stored != current:
        conn.execute(text("UPDATE threads SET rollup_dirty = 1"))
        conn.execute(text("DELETE FROM usage_rollup_state"))
        conn.execute(
            text("INSERT INTO usage_rollup_state (id, thresholds) VALUES (1, :t)"), {"t": current}
        )
    dirty = conn.execute(text("SELECT count(*) FROM threads WHERE rollup_dirty")).scalar()
    if not dirty:
        return 0
    band = band_sql("(u.input_tokens + u.cache_read_tokens + u.cache_write_tokens)")
    conn.execute(
        text(
            "DELETE FROM usage_rollup WHERE thread_id IN (SELECT id FROM threads WHERE rollup_dirty)"
        )
    )
    conn.execute(
        text(f"""
        INSERT INTO usage_rollup (thread_id, day, model, band, calls, input_tokens, output_tokens,
                                  cache_read_tokens, cache_write_tokens)
        SELECT u.thread_id, substr(u.timestamp, 1, 10) AS day, u.model, {band} AS band, count(*),
               sum(u.input_tokens), sum(u.output_tokens), sum(u.cache_read_tokens), sum(u.cache_write_tokens)
        FROM threads t JOIN token_usage u ON u.thread_id = t.id
        WHERE t.rollup_dirty AND NOT ({COPIES_SQL})
        GROUP BY u.thread_id, day, u.model, band
    """)
    )
    conn.execute(text("UPDATE threads SET rollup_dirty = 0 WHERE rollup_dirty"))
    return int(dirty)


def _rolled_up_usage(conn, by, sql, sel, group, since, until) -> dict[tuple, list[int]]:
    """`_agent_usage` read from `usage_rollup` (whole-day windows only): a few rows a thread."""
    refresh_rollup(conn)
    conn.commit()
    params: dict[str, Any] = {}
    conds = []
    if since is not None:
        params["since"] = (
            since.astimezone(UTC).strftime("%Y-%m-%d")
            if since.tzinfo
            else since.strftime("%Y-%m-%d")
        )
        conds.append("u.day >= :since")
    if until is not None:
        params["until"] = (
            until.astimezone(UTC).strftime("%Y-%m-%d")
            if until.tzinfo
            else until.strftime("%Y-%m-%d")
        )
        conds.append("u.day < :until")
    # The same key expressions as over token_usage: `u.timestamp` is the day here.
    sel = sel.replace("substr(u.timestamp, 1, 10)", "u.day")
    join = " JOIN threads t ON t.id = u.thread_id" if THREAD_DIMS & set(by) else ""
    rows = conn.execute(
        text(
            f"SELECT {sel} u.model, u.band, sum(u.calls), sum(u.input_tokens), sum(u.output_tokens), "
            f"sum(u.cache_read_tokens), sum(u.cache_write_tokens) FROM usage_rollup u{join} "
            f"WHERE {' AND '.join(conds) or '1'} GROUP BY {group} u.model, u.band"
        ),
        params,
    )
    n = len(sql) + 2
    return {tuple(r[:n]): [int(x or 0) for x in r[n:]] for r in rows}


def _agent_usage(
    conn, by: list[str], sql: list[tuple[str, str, str]], since, until
) -> dict[tuple, list[int]]:
    """Sum agents' calls per (SQL group, model, band), copies subtracted: group -> [calls, 4 sums]."""
    sel = "".join(f"{c[1]} AS k{i}, " for i, c in enumerate(sql))
    group = "".join(f"k{i}, " for i in range(len(sql)))
    if _whole_days(since) and _whole_days(until) and conn.dialect.name == "sqlite":
        return _rolled_up_usage(conn, by, sql, sel, group, since, until)
    params: dict[str, Any] = {}
    window = _window("u.timestamp", since, until, params)
    band = band_sql("(u.input_tokens + u.cache_read_tokens + u.cache_write_tokens)")
    body = (
        f"SELECT {sel} u.model, {band} AS band, count(*), sum(u.input_tokens), sum(u.output_tokens), "
        f"sum(u.cache_read_tokens), sum(u.cache_write_tokens)"
    )
    join = " JOIN threads t ON t.id = u.thread_id" if THREAD_DIMS & set(by) else ""
    total_sql = f"{body} FROM token_usage u{join} WHERE {window} GROUP BY {group} u.model, band"
    copies_sql = (
        f"{body} FROM threads t JOIN token_usage u ON u.thread_id = t.id "
        f"WHERE {COPIES_SQL} AND {window} GROUP BY {group} u.model, band"
    )
    n = len(sql) + 2
    sums: dict[tuple, list[int]] = {}
    for r in conn.execute(text(total_sql), params):
        sums[tuple(r[:n])] = [int(x or 0) for x in r[n:]]
    for r in conn.execute(text(copies_sql), params):
        have = sums[tuple(r[:n])]
        for i, x in enumerate(r[n:]):
            have[i] -= int(x or 0)
    return sums


def cost_report(
    engine: Engine,
    by: Sequence[str] = ("day",),
    since: datetime | None = None,
    until: datetime | None = None,
) -> Report:
    """Return the agents' own cost next to the auditing cost, grouped by `by`.

    Agents' usage comes from `token_usage` (one row per billing key: streamed duplicates and
    cumulative counters are already resolved at ingest; calls a forked subagent logged again
    are left out) priced per model with the price table; models it does not know are listed
    per row and in `unknown_models`, never priced at zero. Auditing cost is what each verdict
    recorded; calls recorded without a price are priced with today's table when it now knows
    the model. Agent usage is dated by its timestamp, auditing by when the observer was called.
    `overhead` is audit USD / agent USD.
    """
    by = check_dims(by, COST_DIMS)
    key_cols, sql = _cost_columns(by)
    make_key = _key_maker(key_cols, sql)
    n = len(sql)
    rows: dict[tuple, dict[str, Any]] = {}

    def row_for(key: tuple) -> dict[str, Any]:
        row = rows.get(key)
        if row is None:
            row = dict(zip(key_cols, key))
            row.update({c: 0 for c in AGENT_COLS + AUDIT_COLS})
            row.update(agent_usd=None, agent_unpriced_models=[], audit_usd=None, audit_credits=None)
            rows[key] = row
        return row

    audit_params: dict[str, Any] = {}
    audit_sel = "".join(f"{c[2]} AS k{i}, " for i, c in enumerate(sql))
    group = "".join(f"k{i}, " for i in range(n))
    # Only calls recorded without a price need the band (to be priced now); the rest share band 0.
    audit_band = f"CASE WHEN v.cost_usd IS NULL THEN {band_sql('v.input_tokens')} ELSE 0 END"
    audit_sql = f"""
        SELECT {audit_sel} v.model AS model, v.observer, {audit_band} AS band,
               count(*) AS calls, sum(v.status = 'invalid'), sum(v.status = 'error'),
               sum(v.input_tokens), sum(v.cached_tokens), sum(v.output_tokens), sum(v.thinking_tokens),
               sum(v.cost_usd), sum(v.credits),
               sum(v.cost_usd IS NULL AND v.status != 'error'),
               sum(CASE WHEN v.cost_usd IS NULL THEN v.input_tokens END),
               sum(CASE WHEN v.cost_usd IS NULL THEN v.output_tokens + v.thinking_tokens END),
               sum(CASE WHEN v.cost_usd IS NULL THEN v.cached_tokens END),
               sum(CASE WHEN v.cost_usd IS NULL THEN v.cache_write_tokens END)
        FROM verdicts v JOIN threads t ON t.id = v.thread_id
        WHERE {_window("v.created_at", since, until, audit_params)}
        GROUP BY {group} v.model, v.observer, band
    """
    with engine.connect() as conn:
        agent_sums = _agent_usage(conn, by, sql, since, until)
        audit_rows = conn.execute(text(audit_sql), audit_params).all()

    pricer = Pricer()
    unknown: dict[str | None, dict[str, int]] = {}
    for group_key, (calls, *tokens) in agent_sums.items():
        if not calls:
            continue
        model, band = group_key[n], group_key[n + 1]
        sums = dict(
            zip(
                ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"), tokens
            )
        )
        row = row_for(make_key(group_key))
        row["agent_calls"] += calls
        for c, v in sums.items():
            row[c] += v
        usd = pricer.usd(model, band, *tokens)
        if usd is not None:
            row["agent_usd"] = (row["agent_usd"] or 0.0) + usd
        elif any(tokens):
            if model not in row["agent_unpriced_models"]:
                row["agent_unpriced_models"].append(model)
            u = unknown.setdefault(model, {"calls": 0, **{c: 0 for c in sums}})
            u["calls"] += calls
            for c, v in sums.items():
                u[c] += v
    unknown_observers: set[str] = set()
    for r in audit_rows:
        model, observer, band = r[n], r[n + 1], r[n + 2]
        (
            calls,
            invalid,
            errors,
            inp,
            cached,
            out,
            thinking,
            usd,
            credits,
            unpriced,
            u_in,
            u_out,
            u_cached,
            u_cw,
        ) = r[n + 3 :]
        row = row_for(make_key(r[:n]))
        row["audit_calls"] += calls
        row["audit_invalid"] += invalid or 0
        row["audit_errors"] += errors or 0
        row["audit_input_tokens"] += inp or 0
        row["audit_cached_tokens"] += cached or 0
        row["audit_output_tokens"] += out or 0
        row["audit_thinking_tokens"] += thinking or 0
        if unpriced:
            u_cached, u_cw = u_cached or 0, u_cw or 0
            late = pricer.usd(
                model,
                band,
                max((u_in or 0) - u_cached - u_cw, 0),
                u_out or 0,
                u_cached,
                u_cw,
                provider=observer,
            )
            if late is None:
                row["audit_unpriced_calls"] += unpriced
                unknown_observers.add(model)
            else:
                from .prices import credits as to_credits

                usd = (usd or 0.0) + late
                credits = (credits or 0.0) + float(to_credits(late))
        if usd is not None:
            row["audit_usd"] = (row["audit_usd"] or 0.0) + usd
            row["audit_credits"] = (row["audit_credits"] or 0.0) + (credits or 0.0)
    out_rows = _sort_rows(list(rows.values()), by, ("agent_usd", "audit_usd"))
    total = {c: None for c in key_cols}
    for c in AGENT_COLS + AUDIT_COLS:
        if c == "agent_unpriced_models":
            total[c] = sorted({m or "(none)" for r in out_rows for m in r[c]})
        elif c in ("agent_usd", "audit_usd", "audit_credits"):
            vals = [r[c] for r in out_rows if r[c] is not None]
            total[c] = sum(vals) if vals else None
        else:
            total[c] = sum(r[c] for r in out_rows)
    for row in out_rows + [total]:
        row["agent_unpriced_models"] = [m or "(none)" for m in row["agent_unpriced_models"]]
        row["overhead"] = _div(row["audit_usd"], row["agent_usd"])
    notes = []
    unknown_list = [
        {"model": m or "(none)", **v} for m, v in sorted(unknown.items(), key=lambda kv: str(kv[0]))
    ]
    if unknown_list:
        notes.append(
            "not in the price table, so left out of agent_usd (not priced at 0): "
            + ", ".join(f"{u['model']} ({u['calls']} calls)" for u in unknown_list)
        )
    if unknown_observers:
        notes.append("observer models without a price: " + ", ".join(sorted(unknown_observers)))
    columns = key_cols + AGENT_COLS + AUDIT_COLS + ["overhead"]
    return Report("costs", by, columns, out_rows, total, notes, {"unknown_models": unknown_list})


# -- report verdicts -------------------------------------------------------------------------

VERDICT_COLS = [
    "seen",
    "gated_out",
    "gated_in",
    "calls",
    "audited",
    "corrections",
    "correction_rate",
    "invalid",
    "errors",
    "latency_p50_ms",
    "latency_p95_ms",
    "usd",
    "usd_per_audit",
    "usd_per_correction",
    "gated_out_by_reason",
]


def _verdict_keys(by: list[str], side: str) -> list[tuple[str, str]]:
    """(column, SQL) per dimension; side "c" (checkpoints joined to their run) or "v" (verdicts)."""
    at = "c.gated_at" if side == "c" else "v.created_at"
    src = "r" if side == "c" else "v"
    out = []
    for dim in by:
        if dim in TIME_DIMS:
            out.append((dim, _time_expr(dim, at)))
        elif dim in ("observer", "model"):
            out.append((dim, f"{src}.{dim}"))
        elif dim == "run":
            out.append(("run", f"{side}.run_id"))
        elif dim == "project":
            out.append(("project", "t.cwd"))
        elif dim == "agent":
            out.append(("agent", "t.agent"))
    return out


REASON_SQL = "CASE WHEN instr(c.gate_reason, ' (') > 0 THEN substr(c.gate_reason, 1, instr(c.gate_reason, ' (') - 1) ELSE c.gate_reason END"


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
    answers asking for a correction; latency percentiles (nearest rank) over answered calls.
    """
    by = check_dims(by, VERDICT_DIMS)
    ck, vk = _verdict_keys(by, "c"), _verdict_keys(by, "v")
    cols = [k[0] for k in vk]
    n = len(cols)
    csel = "".join(f"{k[1]} AS k{i}, " for i, k in enumerate(ck))
    vsel = "".join(f"{k[1]} AS k{i}, " for i, k in enumerate(vk))
    kl = "".join(f"k{i}, " for i in range(n))
    grp = ("GROUP BY " + ", ".join(f"k{i}" for i in range(n))) if n else ""
    params: dict[str, Any] = {}
    cwin = _window("c.gated_at", since, until, params)
    vwin = _window("v.created_at", since, until, params)
    c_join = " JOIN threads t ON t.id = c.thread_id" if THREAD_DIMS & set(by) else ""
    v_join = " JOIN threads t ON t.id = v.thread_id" if THREAD_DIMS & set(by) else ""
    c_from = f"checkpoints c JOIN runs r ON r.id = c.run_id{c_join} WHERE {cwin}"
    v_from = f"verdicts v{v_join} WHERE {vwin}"
    # Checkpoints whose latest gating was by a run of the group, with the reason when held back.
    gated_sql = f"""
        SELECT {csel} CASE WHEN c.gate_audit = 0 THEN {REASON_SQL} END AS reason, count(*)
        FROM {c_from} GROUP BY {kl} reason
    """
    # Checkpoints the group answered that the query above did not already count for it.
    same = " AND ".join(
        [f"r.id IS NOT NULL AND {cwin}"] + [f"({c[1]}) IS ({v[1]})" for c, v in zip(ck, vk)]
    )
    answered_sql = f"""
        SELECT {vsel} count(DISTINCT v.checkpoint_id)
        FROM verdicts v{v_join} JOIN checkpoints c ON c.id = v.checkpoint_id
        LEFT JOIN runs r ON r.id = c.run_id
        WHERE {vwin} AND NOT ({same}) {grp}
    """
    calls_sql = f"""
        SELECT {vsel} count(*), sum(v.status = 'ok'), sum(v.status = 'ok' AND v.needs_correction = 1),
               sum(v.status = 'invalid'), sum(v.status = 'error'), sum(v.cost_usd)
        FROM {v_from} {grp}
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
        for r in conn.execute(text(latency_sql), params):
            latencies.setdefault(tuple(r[:n]), []).append(r[n])
    for key, values in latencies.items():
        values.sort()
        row = rows[key]
        row["latency_p50_ms"], row["latency_p95_ms"] = _rank(values, 50), _rank(values, 95)
    for row in rows.values():
        row["gated_in"] = row["seen"] - row["gated_out"]
        row["correction_rate"] = _div(row["corrections"], row["audited"])
        row["usd_per_audit"] = _div(row["usd"], row["audited"])
        row["usd_per_correction"] = _div(row["usd"], row["corrections"])
    out = _sort_rows(list(rows.values()), by, ("calls",))
    if not by or by[0] not in TIME_DIMS:
        out.sort(key=lambda r: tuple(str(r[c] or "") for c in cols))
    total = None
    if len(out) > 1:
        total = {c: None for c in cols}
        for c in (
            "seen",
            "gated_out",
            "gated_in",
            "calls",
            "audited",
            "corrections",
            "invalid",
            "errors",
        ):
            total[c] = sum(r[c] for r in out)
        usd = [r["usd"] for r in out if r["usd"] is not None]
        total["usd"] = sum(usd) if usd else None
        reasons: dict[str, int] = {}
        for r in out:
            for k, v in r["gated_out_by_reason"].items():
                reasons[k] = reasons.get(k, 0) + v
        total.update(
            gated_out_by_reason=reasons,
            latency_p50_ms=None,
            latency_p95_ms=None,
            correction_rate=_div(total["corrections"], total["audited"]),
            usd_per_audit=_div(total["usd"], total["audited"]),
            usd_per_correction=_div(total["usd"], total["corrections"]),
        )
    return Report("verdicts", by, cols + VERDICT_COLS, out, total)


# -- report agreement ------------------------------------------------------------------------


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
    # SQLite returns the other columns from the row holding max(id): the latest valid answer.
    return (
        f"{alias} AS (SELECT checkpoint_id, max(id) AS vid, needs_correction, message FROM verdicts v "
        f"WHERE status = 'ok' AND observer = :{param}{model} AND {window} GROUP BY checkpoint_id)"
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
    win = _window("v.created_at", since, until, params)
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
            from .errors import UnknownName

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


# -- eval on labels --------------------------------------------------------------------------


@dataclass
class Label:
    """One line of a labels file: the checkpoint ending at message `at` of a thread, and the truth."""

    line: int
    thread: Any  # the threads row
    at: str
    needs_correction: bool


def read_labels(engine: Engine, path: str) -> list[Label]:
    """Read LABELS.jsonl: lines of {"thread" or "file", "at", "needs_correction"}.

    `thread` is a database id, native id or unique prefix; `file` a transcript already ingested,
    whose thread is the one holding message `at`.
    """
    import os

    import orjson

    from .threads import find_thread

    try:
        raw_lines = Path(path).read_bytes().splitlines()
    except OSError as exc:
        raise AuditorError(f"Cannot read labels {path}: {exc.strerror}") from None
    labels = []
    with engine.connect() as conn:
        for n, raw in enumerate(raw_lines, 1):
            if not raw.strip():
                continue
            where = f"{path}:{n}"
            try:
                obj = orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                raise AuditorError(f"{where}: not JSON ({exc})") from None
            if (
                not isinstance(obj, dict)
                or not isinstance(obj.get("at"), str)
                or not isinstance(obj.get("needs_correction"), bool)
                or not (obj.get("thread") or obj.get("file"))
            ):
                raise AuditorError(
                    f'{where}: expected {{"thread" or "file": ..., "at": MESSAGE_ID, '
                    f'"needs_correction": true|false}}, got {raw.decode(errors="replace")[:120]}'
                )
            if obj.get("thread"):
                thread = find_thread(engine, str(obj["thread"]))
            else:
                file = os.path.abspath(os.path.expanduser(obj["file"]))
                found = conn.execute(
                    text(
                        "SELECT m.thread_id FROM messages m JOIN source_files f ON f.id = m.source_file_id "
                        "WHERE f.path = :p AND m.native_id = :at LIMIT 1"
                    ),
                    {"p": file, "at": obj["at"]},
                ).first()
                if found is None:
                    raise AuditorError(
                        f"{where}: no message {obj['at']!r} read from {file}; "
                        f"ingest it first: auditor ingest {file}"
                    )
                thread = find_thread(engine, str(found[0]))
            labels.append(Label(n, thread, obj["at"], obj["needs_correction"]))
    if not labels:
        raise AuditorError(f"{path} holds no labels")
    return labels


def evaluate(engine: Engine, plugins, labels_path: str, config) -> Report:
    """Audit (or reuse the verdicts at) the labelled checkpoints and score the answers.

    The gate applies as in `auditor run`: a checkpoint it holds back counts as "no correction",
    so the figures judge gate and prompt together. Calls that fail or break the tool contract
    are listed and left out of the scores. Rows are the labels with their outcome; `extra` has
    the confusion matrix, precision, recall, F1 and accuracy.
    """
    import asyncio

    from .checkpoints import checkpoint_at
    from .run import Auditor
    from .threads import load_messages

    labels = read_labels(engine, labels_path)
    auditor = Auditor(engine, plugins, config)
    problem = auditor.observer.check({"model": auditor.model, **config.observer_options})
    if problem:
        raise AuditorError(f"observer {auditor.observer_name!r} cannot be used: {problem}")
    mode = auditor.gate_config.get("mode", "end-turn")
    messages: dict[int, list] = {}
    planned: list[tuple[Label, Any, Any]] = []  # (label, checkpoint, job or None)
    auditor._start_run()
    status = "failed"
    try:
        for label in labels:
            tid = label.thread.id
            if tid not in messages:
                messages[tid] = load_messages(engine, tid)
            try:
                cp = checkpoint_at(tid, messages[tid], label.at, mode)
            except KeyError:
                raise AuditorError(
                    f"{labels_path}:{label.line}: thread {label.thread.native_id} has no message "
                    f"{label.at!r}"
                ) from None
            with engine.begin() as conn:
                job = auditor.plan_checkpoint(conn, cp, label.thread, messages[tid])
            planned.append((label, cp, job))

        async def call_all() -> None:
            gate = asyncio.Semaphore(max(1, config.concurrency))

            async def one(job) -> None:
                async with gate:
                    job.answered = await auditor.call(job) or job.answered

            await asyncio.gather(
                *(one(j) for _, _, j in planned if j is not None and j.answered is None)
            )

        asyncio.run(call_all())
        status = "done"
    finally:
        auditor._finish_run(status)
    return _score(engine, planned, auditor, labels_path)


def _score(engine: Engine, planned, auditor, labels_path: str) -> Report:
    ids = [j.answered for _, _, j in planned if j is not None and j.answered is not None]
    with engine.connect() as conn:
        verdicts = {
            r.id: r
            for r in conn.execute(
                text(
                    f"SELECT id, status, needs_correction, message, problem FROM verdicts WHERE id IN ({','.join(map(str, ids)) or 'NULL'})"
                )
            )
        }
        reasons = {
            (r.thread_id, r.message_native_id, r.kind): r.gate_reason
            for r in conn.execute(
                text(
                    "SELECT thread_id, message_native_id, kind, gate_reason FROM checkpoints WHERE thread_id IN "
                    f"({','.join(str(lb.thread.id) for lb, _, _ in planned)})"
                )
            )
        }
    counts = {"tp": 0, "fp": 0, "fn": 0, "tn": 0}
    rows, failed, gated = [], 0, 0
    for label, cp, job in planned:
        v = verdicts.get(job.answered) if job is not None else None
        row = {
            "line": label.line,
            "thread": label.thread.id,
            "thread_native_id": label.thread.native_id,
            "at": label.at,
            "label": label.needs_correction,
            "predicted": None,
            "outcome": None,
            "gate": reasons.get((cp.thread_id, cp.message_id, cp.kind)),
            "verdict": job.answered if job else None,
            "message": None,
        }
        if job is None:
            row["predicted"] = False
            gated += 1
        elif v is None or v.status != "ok":
            row["outcome"] = "failed" if v is None or v.status == "error" else "invalid"
            row["message"] = (
                v.problem if v is not None else "the call was not made (held by another run)"
            )
            failed += 1
            rows.append(row)
            continue
        else:
            row["predicted"], row["message"] = bool(v.needs_correction), v.message
        key = ("t" if row["predicted"] == label.needs_correction else "f") + (
            "p" if row["predicted"] else "n"
        )
        counts[key] += 1
        row["outcome"] = {"tp": "caught", "tn": "left alone", "fp": "false alarm", "fn": "missed"}[
            key
        ]
        rows.append(row)
    tp, fp, fn, tn = counts["tp"], counts["fp"], counts["fn"], counts["tn"]
    precision, recall = _div(tp, tp + fp), _div(tp, tp + fn)
    f1 = None if not precision or not recall else 2 * precision * recall / (precision + recall)
    extra = {
        "observer": auditor.observer_name,
        "model": auditor.model,
        "run": auditor.summary.run_id,
        "labels": len(planned),
        "scored": tp + fp + fn + tn,
        "gated_out": gated,
        "failed": failed,
        "confusion": counts,
        "precision": precision,
        "recall": recall,
        "f1": f1,
        "accuracy": _div(tp + tn, tp + fp + fn + tn),
        "calls_made": auditor.summary.audited + auditor.summary.invalid + auditor.summary.errors,
        "reused": auditor.summary.reused,
    }
    notes = (
        [f"{failed} labelled checkpoints got no valid answer and are not scored"] if failed else []
    )
    cols = [
        "line",
        "thread",
        "thread_native_id",
        "at",
        "label",
        "predicted",
        "outcome",
        "gate",
        "verdict",
        "message",
    ]
    return Report("eval", [], cols, rows, None, notes, extra)


# -- what the agent did after a correction -----------------------------------------------------

TEST_COMMAND = re.compile(
    r"\b(pytest|py\.test|tox|nox|unittest|(npm|pnpm|yarn|bun)( run)? test|jest|vitest|mocha|go test|cargo test|"
    r"cargo nextest|mvn( -\S+)* (test|verify)|gradle\w* test|make (test|check)|ctest|rspec|phpunit|dotnet test|"
    r"swift test|mix test|deno test)\b"
)
# How a person's reply that itself corrects the agent tends to start.
USER_CORRECTS = re.compile(
    r"^\s*(no\b|nope|stop\b|wait\b|don'?t\b|do not\b|that'?s (not|wrong)|this is (not|wrong)|wrong\b|you (didn'?t|did not|"
    r"broke|forgot|missed)|why (did|are|is)\b|revert|undo|not what i|that is not|it (still|doesn'?t)|still (fail|broken))",
    re.IGNORECASE,
)
FOLLOWUP_COLS = [
    "thread",
    "thread_native_id",
    "agent",
    "correction_id",
    "at",
    "continued",
    "edited_files",
    "ran_tests",
    "next_checkpoint",
    "user_wrote_next",
    "user_corrected",
    "acted_on",
]


def _commands(block) -> str:
    data = block.tool_input
    if isinstance(data, dict):
        data = data.get("command") or data.get("cmd") or data.get("script") or ""
    if isinstance(data, list):
        data = " ".join(map(str, data))
    return data if isinstance(data, str) else ""


def followup_report(
    engine: Engine, since: datetime | None = None, until: datetime | None = None
) -> Report:
    """Return, for each course correction found in a thread, what the agent did next.

    The window after a correction runs to the next message a person typed, the next correction
    or the end of the thread. `edited_files`: a tool call there changed files; `ran_tests`: a
    command ran a test runner; `next_checkpoint`: the latest valid verdict at the first audited
    checkpoint after the correction (`passed`, `corrected again`, or None when none was
    audited); `user_corrected`: the person's next message reads as a correction of their own
    (it starts "no", "stop", "that's wrong", "you didn't"...). `acted_on`: the agent went on and
    edited files or ran tests. Totals give the share of corrections acted on.
    """
    from .model import SOURCE_COURSE_CORRECTION
    from .threads import load_messages

    params: dict[str, Any] = {"cc": SOURCE_COURSE_CORRECTION}
    window = _window("m.timestamp", since, until, params)
    with engine.connect() as conn:
        threads = conn.execute(
            text(
                "SELECT DISTINCT t.id, t.native_id, t.agent FROM messages m JOIN threads t ON t.id = m.thread_id "
                f"WHERE m.source_type = :cc AND {window} ORDER BY t.id"
            ),
            params,
        ).all()
        verdicts: dict[tuple[int, str], Any] = {}
        if threads:
            for r in conn.execute(
                text(
                    "SELECT c.thread_id, c.message_native_id, v.needs_correction, max(v.id) FROM checkpoints c "
                    "JOIN verdicts v ON v.checkpoint_id = c.id AND v.status = 'ok' "
                    f"WHERE c.thread_id IN ({','.join(str(t.id) for t in threads)}) "
                    "GROUP BY c.thread_id, c.message_native_id"
                )
            ):
                verdicts[(r[0], r[1])] = bool(r[2])
    rows = []
    for t in threads:
        messages = load_messages(engine, t.id)
        for i, m in enumerate(messages):
            if m.source_type != SOURCE_COURSE_CORRECTION:
                continue
            when = _db_time(m.timestamp) if m.timestamp else None
            if (since and (when is None or when < _db_time(since))) or (
                until and (when is None or when >= _db_time(until))
            ):
                continue
            row = {
                "thread": t.id,
                "thread_native_id": t.native_id,
                "agent": t.agent,
                "correction_id": m.native_id,
                "at": when[:19] if when else None,
                "continued": False,
                "edited_files": False,
                "ran_tests": False,
                "next_checkpoint": None,
                "user_wrote_next": False,
                "user_corrected": False,
            }
            for after in messages[i + 1 :]:
                if after.source_type == SOURCE_COURSE_CORRECTION:
                    break
                if after.role == "user" and after.source_type == "user":
                    row["user_wrote_next"] = True
                    row["user_corrected"] = bool(USER_CORRECTS.match(after.text or ""))
                    break
                if after.role == "assistant":
                    row["continued"] = True
                    for b in after.blocks:
                        if b.kind == "tool_use":
                            row["edited_files"] |= bool(b.is_file_edit)
                            row["ran_tests"] |= bool(TEST_COMMAND.search(_commands(b)))
            for after in messages[i + 1 :]:
                said = verdicts.get((t.id, after.native_id))
                if said is not None:
                    row["next_checkpoint"] = "corrected again" if said else "passed"
                    break
            row["acted_on"] = row["continued"] and (row["edited_files"] or row["ran_tests"])
            rows.append(row)
    n = len(rows)
    continued = sum(r["continued"] for r in rows)
    total = {c: None for c in FOLLOWUP_COLS}
    for c in (
        "continued",
        "edited_files",
        "ran_tests",
        "user_wrote_next",
        "user_corrected",
        "acted_on",
    ):
        total[c] = sum(r[c] for r in rows)
    total["next_checkpoint"] = {
        k: sum(r["next_checkpoint"] == k for r in rows) for k in ("passed", "corrected again")
    }
    extra = {
        "corrections": n,
        "continued": continued,
        "acted_on": total["acted_on"],
        "acted_on_share": _div(total["acted_on"], continued),
    }
    notes = (
        []
        if n
        else [
            "no course correction found in the stored threads (see `auditor inject` and the hooks)"
        ]
    )
    return Report("followup", [], FOLLOWUP_COLS, rows, total, notes, extra)
