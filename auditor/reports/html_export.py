"""`auditor export html`: a static report that opens from disk, with no server and no script.

`index.html` lists the threads with their cost and verdict columns under a small cost-per-day
chart; `thread-<id>.html` shows one thread with its checkpoints' verdicts. Course corrections
(messages auditor inserted, and corrections observers asked for) are set apart: a dimmed header
saying auditor inserted the message and a coloured border. CSS and charts (SVG) are inline.

The pages are Jinja2 templates shipped in `auditor/templates/` (base, index, thread, chart,
legend, report.css) with autoescaping on: everything this module hands them is plain text, and
the template escapes it, so no value can be forgotten.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup
from sqlalchemy import Engine, text

from ..errors import AuditorError
from ..model import SOURCE_COURSE_CORRECTION, SOURCE_TOOL_RESULT, SOURCE_TYPED
from ..store.dialect import count_if

CLIP = 6000  # characters of a tool input or output shown before cutting the middle out
CORRECTION_HEADER = "inserted by auditor · course correction"


@dataclass
class ExportResult:
    out_dir: Path
    index: Path
    pages: list[Path] = field(default_factory=list)


@functools.cache
def _templates() -> Environment:
    return Environment(
        loader=PackageLoader("auditor", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


def _render(template: str, **values: Any) -> str:
    return _templates().get_template(template).render(colors=COLORS, **values)


def render_page(template: str, **values: Any) -> str:
    """Render one of the shipped templates (`auditor serve`'s pages are among them)."""
    return _render(template, **values)


def usd_text(value: float | None) -> str:
    if value is None:
        return "—"
    return f"${value:,.4f}" if value < 10 else f"${value:,.2f}"


def _pct(ratio: float) -> str:
    return f"{ratio * 100:.1f}%" if ratio >= 0.01 or ratio == 0 else f"{ratio * 100:.3f}%"


def clip(value: str, limit: int = CLIP) -> str:
    if len(value) <= limit:
        return value
    half = limit // 2
    return f"{value[:half]}\n… [{len(value) - limit:,} characters cut] …\n{value[-half:]}"


def _when(value) -> str:
    """Format a stored time (a datetime, or the text SQLite returns to raw SQL) to the second."""
    if not value:
        return ""
    if isinstance(value, str):
        return value[:19].replace("T", " ")
    return value.strftime("%Y-%m-%d %H:%M:%S")


def bar_chart(
    series: list[tuple[str, dict[str, float]]],
    colors: dict[str, str],
    *,
    width: int = 1120,
    height: int = 140,
    label: str = "",
) -> str:
    """Return an inline SVG of stacked bars: one bar per (label, {series: value}) in order."""
    if not series:
        return Markup(_render("chart.html", empty=True))
    top = max(sum(v.values()) for _, v in series) or 1.0
    pad_left, pad_bottom = 64, 20
    inner_w, inner_h = width - pad_left - 8, height - pad_bottom - 8
    slot = inner_w / len(series)
    bar_w = max(1.0, min(28.0, slot * 0.8))
    bars = []
    for i, (name, values) in enumerate(series):
        x = pad_left + i * slot + (slot - bar_w) / 2
        y: float = 8 + inner_h
        for key, color in colors.items():
            v = values.get(key) or 0.0
            if v <= 0:
                continue
            h = max(1.0, v / top * inner_h)
            y -= h
            bars.append(
                {
                    "key": key,
                    "x": f"{x:.1f}",
                    "y": f"{y:.1f}",
                    "w": f"{bar_w:.1f}",
                    "h": f"{h:.1f}",
                    "color": color,
                    "name": name,
                    "usd": usd_text(v),
                }
            )
    labels = []
    for i in sorted({0, len(series) - 1}):
        anchor = "start" if i == 0 and len(series) > 1 else "end" if i else "middle"
        labels.append(
            {"x": f"{pad_left + i * slot + slot / 2:.1f}", "anchor": anchor, "text": series[i][0]}
        )
    return Markup(
        _render(
            "chart.html",
            empty=False,
            label=label,
            width=width,
            height=height,
            left=pad_left,
            right=width - 8,
            base=8 + inner_h,
            top=usd_text(top),
            bars=bars,
            labels=labels,
        )
    )


COLORS = {"agents": "#2f855a", "audit": "#b4237a"}


# -- data ------------------------------------------------------------------------------------


def _select_threads(engine: Engine, threads: Iterable[str] | None, run_id: int | None) -> list[int]:
    from ..store.threads import find_thread

    with engine.connect() as conn:
        if threads:
            return list(dict.fromkeys(find_thread(engine, t).id for t in threads))
        if run_id is not None:
            if (
                conn.execute(text("SELECT 1 FROM runs WHERE id = :r"), {"r": run_id}).first()
                is None
            ):
                known = [
                    str(r[0])
                    for r in conn.execute(text("SELECT id FROM runs ORDER BY id DESC LIMIT 10"))
                ]
                from ..errors import UnknownName

                raise UnknownName("run", str(run_id), known)
            return [
                r[0]
                for r in conn.execute(
                    text(
                        "SELECT thread_id FROM checkpoints WHERE run_id = :r UNION SELECT thread_id FROM verdicts "
                        "WHERE run_id = :r"
                    ),
                    {"r": run_id},
                )
            ]
        return [r[0] for r in conn.execute(text("SELECT id FROM threads"))]


def thread_rows(engine: Engine, ids: list[int]) -> list[dict[str, Any]]:
    from . import cost_report

    wanted = set(ids)
    costs = {r["thread"]: r for r in cost_report(engine, ["thread"]).rows if r["thread"] in wanted}
    out = []
    with engine.connect() as conn:
        verdicts = {
            r[0]: r
            for r in conn.execute(
                text(
                    "SELECT thread_id, count(*), "
                    + ", ".join(
                        map(
                            count_if,
                            (
                                "status = 'ok'",
                                "status = 'ok' AND needs_correction",
                                "status != 'ok'",
                            ),
                        )
                    )
                    + " FROM verdicts GROUP BY thread_id"
                )
            )
        }
        for t in conn.execute(
            text(
                "SELECT id, agent, native_id, title, cwd, started_at, message_count, parent_native_id "
                "FROM threads ORDER BY started_at DESC, id DESC"
            )
        ).mappings():
            if t["id"] not in wanted:
                continue
            c = costs.get(t["id"], {})
            v = verdicts.get(t["id"])
            out.append(
                {
                    **t,
                    "agent_usd": c.get("agent_usd"),
                    "audit_usd": c.get("audit_usd"),
                    "unpriced": bool(c.get("agent_unpriced_models")),
                    "calls": v[1] if v else 0,
                    "audited": (v[2] or 0) if v else 0,
                    "corrections": (v[3] or 0) if v else 0,
                    "failed": (v[4] or 0) if v else 0,
                }
            )
    return out


def _daily(engine: Engine, ids: set[int]) -> list[tuple[str, dict[str, float]]]:
    from . import cost_report

    days: dict[str, dict[str, float]] = defaultdict(lambda: {"agents": 0.0, "audit": 0.0})
    for r in cost_report(engine, ["day", "thread"]).rows:
        if r["thread"] in ids and r["day"]:
            days[r["day"]]["agents"] += r["agent_usd"] or 0.0
            days[r["day"]]["audit"] += r["audit_usd"] or 0.0
    return sorted(days.items())


# -- pages -----------------------------------------------------------------------------------


def _index(rows: list[dict], daily, title: str, clean) -> str:
    agents = sum(r["agent_usd"] or 0 for r in rows)
    audit = sum(r["audit_usd"] or 0 for r in rows)
    cards = [
        ("threads", f"{len(rows):,}"),
        ("agents' cost", usd_text(agents)),
        ("auditing cost", usd_text(audit)),
        ("overhead", _pct(audit / agents) if agents else "—"),
        ("audited checkpoints", f"{sum(r['audited'] for r in rows):,}"),
        ("corrections", f"{sum(r['corrections'] for r in rows):,}"),
    ]
    lines = [
        {
            "id": r["id"],
            "label": clean(r["title"] or r["native_id"])[:90],
            "native_id_line": clean(r["native_id"]) if r["title"] else "",
            "subagent": bool(r["parent_native_id"]),
            "failed": r["failed"],
            "agent": r["agent"],
            "cwd": clean(r["cwd"]),
            "started": _when(r["started_at"])[:16],
            "messages": r["message_count"],
            "agent_usd": usd_text(r["agent_usd"]) + ("+?" if r["unpriced"] else ""),
            "audit_usd": usd_text(r["audit_usd"]),
            "audited": r["audited"],
            "corrections": r["corrections"],
        }
        for r in rows
    ]
    return _render(
        "index.html",
        title=title,
        generated=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        cards=cards,
        chart=bar_chart(daily, COLORS, label="cost per day: agents and auditing"),
        rows=lines,
        unpriced=any(r["unpriced"] for r in rows),
    )


def _blocks(m, clean) -> list[dict[str, Any]]:
    """A message's blocks as the thread template shows them (plain text, cleaned and clipped)."""
    out: list[dict[str, Any]] = []
    for b in m.blocks:
        if b.kind == "text" and b.text:
            out.append({"kind": "text", "text": clean(b.text)})
        elif b.kind == "thinking" and b.text:
            out.append({"kind": "thinking", "text": clip(clean(b.text))})
        elif b.kind == "tool_use":
            raw = (
                b.tool_input
                if isinstance(b.tool_input, str)
                else orjson.dumps(b.tool_input, option=orjson.OPT_INDENT_2).decode()
            )
            out.append(
                {
                    "kind": "tool_use",
                    "name": clean(b.tool_name),
                    "edit": b.is_file_edit,
                    "text": clip(clean(raw)),
                }
            )
        elif b.kind == "tool_result":
            out.append(
                {
                    "kind": "tool_result",
                    "error": b.is_error,
                    "size": f"{len(b.text or ''):,}",
                    "text": clip(clean(b.text)),
                }
            )
        elif b.kind == "image":
            out.append({"kind": "image"})
    return out


def _verdict(v: dict[str, Any], clean, marks: dict[str, bool]) -> dict[str, Any]:
    """A stored verdict (as `auditor.store.verdict_rows.list_verdicts` gives it) for the page:
    who answered and when in the header, then what it cost and whether it reached the agent,
    as `auditor show` says them; for a correction, the mark a person gave its checkpoint on
    the review page (`marks`: the thread's labels by message), right or wrong."""
    from ..store.verdict_rows import cost_text, delivery_text

    label = marks.get(v["message_id"]) if v["needs_correction"] else None

    return {
        "id": v["id"],
        "status": v["status"],
        "correction": bool(v["needs_correction"]),
        "who": f"{v['observer']} · {v['model']}",
        "when": _when(v["created_at"]),
        "text": clean(v["problem"] if v["status"] != "ok" else v["message"]),
        "run": f"run {v['run_id']}" if v["run_id"] is not None else "",
        "cost": cost_text(v),
        "latency": f"{v['latency_ms'] / 1000:.1f} s" if v["latency_ms"] is not None else "",
        "delivery": clean(delivery_text(v) or ""),
        "mark": {True: "right", False: "wrong", None: ""}[label],
    }


def thread_page(
    engine: Engine,
    plugins,
    row: dict,
    usage_chart: str,
    clean,
    home: str = "index.html",
    review: str | None = None,
) -> str:
    """One thread's page: its messages, and at each checkpoint the signals that fire there and
    the verdicts given on it (with their cost and delivery, and a correction's review mark),
    as `auditor show` prints them. `home` is where "all threads" leads (the index file, or
    `auditor serve`'s first page); `review`, where a correction not yet marked can be (the
    review page of `auditor serve`; a file has none)."""
    from ..audit.checkpoint_plan import CheckpointPlanner
    from ..live.delivery import check_pending
    from ..store.labels import thread_marks
    from ..store.threads import find_thread, load_messages
    from ..store.verdict_rows import checkpoint_notes

    thread_row = find_thread(engine, str(row["id"]))
    loaded = load_messages(engine, row["id"])
    notes = checkpoint_notes(engine, CheckpointPlanner(plugins).signals, thread_row, loaded)
    marks = thread_marks(engine, row["id"])
    check_pending(engine, [v for note in notes.values() for v in note.verdicts])
    messages = []
    for m in loaded:
        when = _when(m.timestamp)
        head = " · ".join(x for x in (m.role, m.source_type, m.model) if x) + f" · {when}"
        if m.source_type == SOURCE_COURSE_CORRECTION:
            cls, head = "msg correction", f"{CORRECTION_HEADER} · {when}"
        elif m.role == "user" and m.source_type in (SOURCE_TYPED, None):
            cls = "msg user"
        elif m.source_type == SOURCE_TOOL_RESULT or m.role == "tool":
            cls = "msg tool"
        else:
            cls = f"msg {m.role}"
        note = notes.get(m.native_id)
        messages.append(
            {
                "cls": cls,
                "native_id": m.native_id,
                "head": head,
                "blocks": _blocks(m, clean),
                "signals": [clean(sig.summary()) for sig in note.signals] if note else [],
                "verdicts": [_verdict(v, clean, marks) for v in note.verdicts] if note else [],
            }
        )
    thread = {
        "agent": row["agent"],
        "native_id": clean(row["native_id"]),
        "cwd": clean(row["cwd"]),
        "parent": clean(row["parent_native_id"]),
        "agent_usd": usd_text(row["agent_usd"]),
        "audit_usd": usd_text(row["audit_usd"]),
        "audited": row["audited"],
        "corrections": row["corrections"],
    }
    return _render(
        "thread.html",
        title=clean(row["title"] or row["native_id"]),
        thread=thread,
        chart=usage_chart,
        messages=messages,
        home=home,
        review=review,
    )


def usage_chart(engine: Engine, thread_id: int, verdict_usd: dict[str, float]) -> str:
    """Bars of each agent call's cost, in order; the auditing cost as one bar at the end."""
    from ..pricing import stored_prices

    series = []
    with engine.connect() as conn:
        pricer = stored_prices.load(conn)
        band = pricer.band_sql("(input_tokens + cache_read_tokens + cache_write_tokens)")
        for i, r in enumerate(
            conn.execute(
                text(
                    f"SELECT model, {band}, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, timestamp "
                    "FROM token_usage WHERE thread_id = :t ORDER BY timestamp, id"
                ),
                {"t": thread_id},
            )
        ):
            usd = pricer.usd(r[0], r[1], r[2], r[3], r[4], r[5]) or 0.0
            series.append((f"call {i + 1} {_when(r[6])[11:19]}", {"agents": usd}))
        stored_prices.save(conn, pricer)
    if verdict_usd.get("audit"):
        series.append(("auditing", verdict_usd))
    return bar_chart(series, COLORS, height=110, label="cost of each model call")


def export_html(
    engine: Engine,
    out_dir: str | Path,
    threads: Iterable[str] | None = None,
    run_id: int | None = None,
    title: str = "auditor report",
    redact: bool = True,
    plugins=None,
) -> ExportResult:
    """Write index.html and one page per thread (all threads, those named, or a run's) to `out_dir`.

    Secrets in the transcripts are shown as `[REDACTED:kind]` unless `redact` is False; terminal
    control sequences are left out. `plugins` (the signal plugins; by default those installed)
    say which signals fire at each checkpoint.
    """
    from ..redact import shown

    if plugins is None:
        from ..plugins import get_plugin_manager

        plugins = get_plugin_manager()

    clean = shown(redact)
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise AuditorError(
            f"Cannot create {out}: {exc.strerror}. Pass -o with a writable directory."
        ) from None
    ids = _select_threads(engine, threads, run_id)
    rows = thread_rows(engine, ids)
    result = ExportResult(out, out / "index.html")
    result.index.write_text(_index(rows, _daily(engine, set(ids)), title, clean), encoding="utf-8")
    for row in rows:
        chart = usage_chart(engine, row["id"], {"audit": row["audit_usd"] or 0.0})
        page = out / f"thread-{row['id']}.html"
        page.write_text(thread_page(engine, plugins, row, chart, clean), encoding="utf-8")
        result.pages.append(page)
    return result
