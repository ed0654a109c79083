"""The cost report: agents' own cost beside the cost of auditing them, grouped by --by."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from ..pricing import stored_prices
from ..pricing.model_prices import Pricer
from ..store import sql_text
from ..store.rollup import COPIES_SQL, refresh_rollup
from .shared import (
    THREAD_DIMS,
    TIME_DIMS,
    Report,
    check_dims,
    count_if,
    day_text,
    ratio,
    sort_rows,
    window_sql,
)

COST_DIMS = (
    "day",
    "week",
    "month",
    "model",
    "observer",
    "run",
    "thread",
    "project",
    "agent",
    "source",
)
# The machine a thread was read on (`ingest --source`): that of the file that first gave it.
THREAD_SOURCE = "(SELECT f.source FROM source_files f WHERE f.id = t.source_file_id)"

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


def _cost_columns(
    by: list[str], dialect: str = "sqlite"
) -> tuple[list[str], list[tuple[str, str, str]]]:
    """Return the output key columns, and the SQL columns to group by: (alias, agent side,
    audit side), NULL where a side has no such thing. Weeks and months are made from days in
    Python: grouping on a substring of the stored time is much cheaper than date() per row."""
    out: list[str] = []
    sql: list[tuple[str, str, str]] = []
    for dim in by:
        if dim in TIME_DIMS:
            if not any(c[0] == "day" for c in sql):
                sql.append(
                    ("day", day_text("u.timestamp", dialect), day_text("v.created_at", dialect))
                )
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
                "source": THREAD_SOURCE,
            }[dim]
            audit_side = {
                "model": "v.model",
                "observer": "v.observer",
                "run": "v.run_id",
                "project": "t.cwd",
                "agent": "t.agent",
                "source": THREAD_SOURCE,
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


def _day_window(col: str, since, until, params: dict) -> str:
    """SQL keeping the ISO day `col` in [since, until) (whole days, as `_whole_days` checks)."""
    conds = []
    for name, value, op in (("since", since, ">="), ("until", until, "<")):
        if value is not None:
            value = value.astimezone(UTC) if value.tzinfo else value
            params[name] = value.strftime("%Y-%m-%d")
            conds.append(f"{col} {op} :{name}")
    return " AND ".join(conds) or "1 = 1"


def _daily_sums(conn, by: Sequence[str], since, until) -> bool:
    """Whether the sums per day (`usage_daily`, `verdict_daily`) can answer: no thread
    dimension, whole-day windows, and a SQLite store (where triggers keep them)."""
    return (
        not THREAD_DIMS & set(by)
        and _whole_days(since)
        and _whole_days(until)
        and conn.dialect.name == "sqlite"
    )


# The day sums with the columns of `usage_rollup` and `verdicts` the report's SQL names.
USAGE_DAILY = (
    "(SELECT nullif(day, '') AS day, nullif(model, '') AS model, band, calls, input_tokens, "
    "output_tokens, cache_read_tokens, cache_write_tokens FROM usage_daily)"
)
VERDICT_DAILY = (
    "(SELECT day AS created_at, observer, model, nullif(run_id, 0) AS run_id, calls, invalid, "
    "errors, input_tokens, cached_tokens, output_tokens, thinking_tokens, cost_usd, credits, "
    "priced FROM verdict_daily)"
)


def _rolled_up_usage(
    conn, by, sql, sel, group, since, until, pricer: Pricer
) -> dict[tuple, list[int]]:
    """`_agent_usage` read from `usage_rollup` (whole-day windows only): a few rows a thread,
    or from `usage_daily` when no thread dimension is asked for: a few rows a day."""
    refresh_rollup(conn, pricer.bounds)
    conn.commit()
    params: dict[str, Any] = {}
    where = _day_window("u.day", since, until, params)
    # The same key expressions as over token_usage: `u.timestamp` is the day here.
    sel = sel.replace(day_text("u.timestamp", conn.dialect.name), "u.day")
    if _daily_sums(conn, by, since, until):
        source = f"{USAGE_DAILY} u"
    else:
        source = "usage_rollup u"
        if THREAD_DIMS & set(by):
            source += " JOIN threads t ON t.id = u.thread_id"
    rows = conn.execute(
        f"SELECT {sel} u.model, u.band, sum(u.calls), sum(u.input_tokens), sum(u.output_tokens), "
        f"sum(u.cache_read_tokens), sum(u.cache_write_tokens) FROM {source} "
        f"WHERE {where} GROUP BY {group} u.model, u.band",
        params,
    )
    n = len(sql) + 2
    return {tuple(r[:n]): [int(x or 0) for x in r[n:]] for r in rows}


def _agent_usage(
    conn, by: list[str], sql: list[tuple[str, str, str]], since, until, pricer: Pricer
) -> dict[tuple, list[int]]:
    """Sum agents' calls per (SQL group, model, band of `pricer`), copies subtracted:
    group -> [calls, 4 sums]."""
    sel = "".join(f"{c[1]} AS k{i}, " for i, c in enumerate(sql))
    group = "".join(f"k{i}, " for i in range(len(sql)))
    if _whole_days(since) and _whole_days(until):
        return _rolled_up_usage(conn, by, sql, sel, group, since, until, pricer)
    params: dict[str, Any] = {}
    window = window_sql("u.timestamp", since, until, params)
    band = pricer.band_sql("(u.input_tokens + u.cache_read_tokens + u.cache_write_tokens)")
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
    for r in conn.execute(total_sql, params):
        sums[tuple(r[:n])] = [int(x or 0) for x in r[n:]]
    for r in conn.execute(copies_sql, params):
        have = sums[tuple(r[:n])]
        for i, x in enumerate(r[n:]):
            have[i] -= int(x or 0)
    return sums


def _audit_sums(conn, by, sql: list[tuple[str, str, str]], since, until, pricer: Pricer) -> list:
    """Sum observer calls per (SQL group, model, observer, band): only calls recorded without a
    price need the band (to be priced now); the rest share band 0. Rows: the group, model,
    observer, band, calls, invalid, errors, 4 token sums, USD, credits, calls to price now and
    their input, output, cache read and cache write tokens."""
    params: dict[str, Any] = {}
    sel = "".join(f"{c[2]} AS k{i}, " for i, c in enumerate(sql))
    group = "".join(f"k{i}, " for i in range(len(sql)))
    band = f"CASE WHEN v.cost_usd IS NULL THEN {pricer.band_sql('v.input_tokens')} ELSE 0 END"
    unpriced = f"""{count_if("v.cost_usd IS NULL AND v.status != 'error'")},
               sum(CASE WHEN v.cost_usd IS NULL THEN v.input_tokens END),
               sum(CASE WHEN v.cost_usd IS NULL THEN v.output_tokens + v.thinking_tokens END),
               sum(CASE WHEN v.cost_usd IS NULL THEN v.cached_tokens END),
               sum(CASE WHEN v.cost_usd IS NULL THEN v.cache_write_tokens END)"""
    window = window_sql("v.created_at", since, until, params)
    if not _daily_sums(conn, by, since, until):
        query = f"""
            SELECT {sel} v.model AS model, v.observer, {band} AS band,
                   count(*) AS calls, {count_if("v.status = 'invalid'")}, {count_if("v.status = 'error'")},
                   sum(v.input_tokens), sum(v.cached_tokens), sum(v.output_tokens),
                   sum(v.thinking_tokens), sum(v.cost_usd), sum(v.credits), {unpriced}
            FROM verdicts v JOIN threads t ON t.id = v.thread_id
            WHERE {window}
            GROUP BY {group} v.model, v.observer, band
        """
        return conn.execute(query, params).all()
    # A few rows a day from the day sums; the calls without a price (few: through their
    # partial index) from the verdicts themselves.
    day_params: dict[str, Any] = {}
    summed = f"""
        SELECT {sel} v.model AS model, v.observer, 0 AS band,
               sum(v.calls), sum(v.invalid), sum(v.errors), sum(v.input_tokens),
               sum(v.cached_tokens), sum(v.output_tokens), sum(v.thinking_tokens),
               CASE WHEN sum(v.priced) THEN sum(v.cost_usd) END,
               CASE WHEN sum(v.priced) THEN sum(v.credits) END, 0, NULL, NULL, NULL, NULL
        FROM {VERDICT_DAILY} v
        WHERE {_day_window("v.created_at", since, until, day_params)}
        GROUP BY {group} v.model, v.observer
    """
    to_price = f"""
        SELECT {sel} v.model AS model, v.observer, {band} AS band,
               0, 0, 0, 0, 0, 0, 0, NULL, NULL, {unpriced}
        FROM verdicts v
        WHERE v.cost_usd IS NULL AND {window}
        GROUP BY {group} v.model, v.observer, band
    """
    return [
        *conn.execute(summed, day_params).all(),
        *conn.execute(to_price, params).all(),
    ]


def cost_report(
    engine: Any,
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
    `overhead` is audit USD / agent USD. `engine`: a SQLAlchemy engine, or a
    `sql_text.SqliteStore` (read without importing SQLAlchemy).
    """
    by = check_dims(by, COST_DIMS)
    key_cols, sql = _cost_columns(by, engine.dialect.name)
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

    with sql_text.connect(engine) as conn:
        pricer = stored_prices.load(conn)
        agent_sums = _agent_usage(conn, by, sql, since, until, pricer)
        audit_rows = _audit_sums(conn, by, sql, since, until, pricer)

    unknown: dict[str | None, dict[str, int]] = {}
    # Summed in one order whatever order the database returned the groups in: the same store
    # gives the same figures to the last digit, on SQLite and PostgreSQL alike.
    for group_key, (calls, *tokens) in sorted(agent_sums.items(), key=repr):
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
        usd = pricer.usd(model, band, tokens[0], tokens[1], tokens[2], tokens[3])
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
    for r in sorted(audit_rows, key=lambda r: repr(tuple(r[: n + 3]))):  # by group
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
                from ..pricing.model_prices import credits as to_credits

                usd = (usd or 0.0) + late
                credits = (credits or 0.0) + float(to_credits(late))
        if usd is not None:
            row["audit_usd"] = (row["audit_usd"] or 0.0) + usd
            row["audit_credits"] = (row["audit_credits"] or 0.0) + (credits or 0.0)
    if pricer.probed:
        with sql_text.connect(engine) as conn:
            stored_prices.save(conn, pricer)
    out_rows = sort_rows(list(rows.values()), by, ("agent_usd", "audit_usd"))
    total: dict[str, Any] = {c: None for c in key_cols}
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
        row["overhead"] = ratio(row["audit_usd"], row["agent_usd"])
    notes = []
    unknown_list = [
        {"model": m or "(none)", **v} for m, v in sorted(unknown.items(), key=lambda kv: str(kv[0]))
    ]
    named = sorted((m, v["calls"]) for m, v in unknown.items() if m)
    if named:
        notes.append(
            "not in the price table, so left out of agent_usd (not priced at 0): "
            + ", ".join(f"{m} ({calls} calls)" for m, calls in named)
        )
    if len(named) < len(unknown):
        calls = sum(v["calls"] for m, v in unknown.items() if not m)
        notes.append(
            f"{calls} agent calls name no model in their transcript, so they have no price "
            "(left out of agent_usd)"
        )
    if unknown_observers:
        notes.append("observer models without a price: " + ", ".join(sorted(unknown_observers)))
    columns = key_cols + AGENT_COLS + AUDIT_COLS + ["overhead"]
    return Report("costs", by, columns, out_rows, total, notes, {"unknown_models": unknown_list})
