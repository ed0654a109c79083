"""`auditor export html`: a static report that opens from disk, with no server and no script.

`index.html` lists the threads with their cost and verdict columns under a small cost-per-day
chart; `thread-<id>.html` shows one thread with its checkpoints' verdicts. Course corrections
(messages auditor inserted, and corrections observers asked for) are set apart: a dimmed header
saying auditor inserted the message and a coloured border. CSS and charts (SVG) are inline.
"""

from __future__ import annotations

import html
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
from sqlalchemy import Engine, text

from .errors import AuditorError
from .model import SOURCE_COURSE_CORRECTION, SOURCE_TOOL_RESULT, SOURCE_TYPED

CLIP = 6000  # characters of a tool input or output shown before cutting the middle out
CORRECTION_HEADER = "inserted by auditor · course correction"

CSS = """
:root { --fg: #1d232a; --dim: #6b7480; --line: #dde2e8; --bg: #ffffff; --soft: #f5f7fa;
        --user: #0b6bcb; --agent: #2f855a; --audit: #b4237a; --warn: #c05621; }
* { box-sizing: border-box; }
body { font: 14px/1.5 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--fg);
       background: var(--bg); margin: 0 auto; max-width: 1180px; padding: 24px; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 16px; margin: 24px 0 8px; }
.dim { color: var(--dim); } .nowrap { white-space: nowrap; } a { color: var(--user); text-decoration: none; } a:hover { text-decoration: underline; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { text-align: left; padding: 5px 8px; border-bottom: 1px solid var(--line); vertical-align: top; }
th { background: var(--soft); font-weight: 600; position: sticky; top: 0; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.cards { display: flex; gap: 12px; flex-wrap: wrap; margin: 12px 0 4px; }
.card { background: var(--soft); border-radius: 8px; padding: 10px 14px; min-width: 150px; }
.card b { display: block; font-size: 18px; }
.chart { margin: 8px 0 16px; } .legend span { margin-right: 14px; } .sw { display: inline-block; width: 10px;
  height: 10px; border-radius: 2px; margin-right: 4px; }
.msg { border: 1px solid var(--line); border-left: 4px solid var(--line); border-radius: 6px;
       margin: 10px 0; padding: 8px 12px; background: var(--bg); }
.msg .head { font-size: 12px; color: var(--dim); margin-bottom: 4px; }
.msg.user { border-left-color: var(--user); background: #f3f8fe; }
.msg.assistant { border-left-color: var(--agent); }
.msg.tool { background: var(--soft); }
.msg.correction, .verdict.correction { border: 2px solid var(--audit); border-left: 6px solid var(--audit);
       background: #fdf2f8; }
.msg.correction .head, .verdict.correction .head { color: var(--audit); opacity: .75; font-style: italic; }
.verdict { border: 1px dashed var(--line); border-radius: 6px; margin: 6px 0 14px 24px; padding: 6px 12px;
           font-size: 13px; }
.verdict .head { font-size: 12px; color: var(--dim); }
.verdict.bad .head { color: var(--warn); }
pre { white-space: pre-wrap; word-wrap: break-word; margin: 4px 0; font: 12.5px/1.45 ui-monospace,
      SFMono-Regular, Menlo, Consolas, monospace; }
.text { white-space: pre-wrap; word-wrap: break-word; }
details { margin: 4px 0; } summary { cursor: pointer; color: var(--dim); font-size: 12.5px; }
.tag { display: inline-block; font-size: 11px; padding: 0 6px; border-radius: 8px; background: var(--soft);
       color: var(--dim); margin-left: 4px; }
.tag.corr { background: #fbe3f0; color: var(--audit); } .tag.err { background: #fde8e1; color: var(--warn); }
"""


@dataclass
class ExportResult:
    out_dir: Path
    index: Path
    pages: list[Path] = field(default_factory=list)


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _usd(value: float | None) -> str:
    if value is None:
        return "—"
    return f"${value:,.4f}" if value < 10 else f"${value:,.2f}"


def _pct(ratio: float) -> str:
    return f"{ratio * 100:.1f}%" if ratio >= 0.01 or ratio == 0 else f"{ratio * 100:.3f}%"


def _clip(value: str, limit: int = CLIP) -> str:
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


def _page(title: str, body: str) -> str:
    return (
        f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(title)}</title><style>{CSS}</style></head>\n<body>\n{body}\n</body></html>\n"
    )


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
        return '<p class="dim">no costs to chart</p>'
    top = max(sum(v.values()) for _, v in series) or 1.0
    pad_left, pad_bottom = 64, 20
    inner_w, inner_h = width - pad_left - 8, height - pad_bottom - 8
    slot = inner_w / len(series)
    bar_w = max(1.0, min(28.0, slot * 0.8))
    parts = [
        (
            f'<svg class="chart" role="img" aria-label="{_e(label)}" xmlns="http://www.w3.org/2000/svg" '
            f'width="{width}" height="{height}" viewBox="0 0 {width} {height}">'
        ),
        f'<line x1="{pad_left}" y1="{8 + inner_h}" x2="{width - 8}" y2="{8 + inner_h}" stroke="#c9d0d8"/>',
        f'<text x="{pad_left - 6}" y="14" font-size="11" text-anchor="end" fill="#6b7480">{_e(_usd(top))}</text>',
        f'<text x="{pad_left - 6}" y="{8 + inner_h}" font-size="11" text-anchor="end" fill="#6b7480">$0</text>',
    ]
    for i, (name, values) in enumerate(series):
        x = pad_left + i * slot + (slot - bar_w) / 2
        y = 8 + inner_h
        for key, color in colors.items():
            v = values.get(key) or 0.0
            if v <= 0:
                continue
            h = max(1.0, v / top * inner_h)
            y -= h
            parts.append(
                f'<rect class="bar {key}" x="{x:.1f}" y="{y:.1f}" width="{bar_w:.1f}" height="{h:.1f}" '
                f'fill="{color}"><title>{_e(name)}: {key} {_e(_usd(v))}</title></rect>'
            )
    for i in sorted({0, len(series) - 1}):
        x = pad_left + i * slot + slot / 2
        anchor = "start" if i == 0 and len(series) > 1 else "end" if i else "middle"
        parts.append(
            f'<text x="{x:.1f}" y="{height - 4}" font-size="11" text-anchor="{anchor}" '
            f'fill="#6b7480">{_e(series[i][0])}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


COLORS = {"agents": "#2f855a", "audit": "#b4237a"}


def _legend() -> str:
    return (
        '<div class="legend dim">'
        + "".join(
            f'<span><i class="sw" style="background:{c}"></i>{_e(k)} $</span>'
            for k, c in COLORS.items()
        )
        + "</div>"
    )


# -- data ------------------------------------------------------------------------------------


def _select_threads(engine: Engine, threads: Iterable[str] | None, run_id: int | None) -> list[int]:
    from .threads import find_thread

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
                from .errors import UnknownName

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


def _thread_rows(engine: Engine, ids: list[int]) -> list[dict[str, Any]]:
    from .reports import cost_report

    wanted = set(ids)
    costs = {r["thread"]: r for r in cost_report(engine, ["thread"]).rows if r["thread"] in wanted}
    out = []
    with engine.connect() as conn:
        verdicts = {
            r[0]: r
            for r in conn.execute(
                text(
                    "SELECT thread_id, count(*), sum(status = 'ok'), sum(status = 'ok' AND needs_correction = 1), "
                    "sum(status != 'ok') FROM verdicts GROUP BY thread_id"
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
    from .reports import cost_report

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
    corrections = sum(r["corrections"] for r in rows)
    audited = sum(r["audited"] for r in rows)
    cards = [
        ("threads", f"{len(rows):,}"),
        ("agents' cost", _usd(agents)),
        ("auditing cost", _usd(audit)),
        ("overhead", _pct(audit / agents) if agents else "—"),
        ("audited checkpoints", f"{audited:,}"),
        ("corrections", f"{corrections:,}"),
    ]
    body = [
        f"<h1>{_e(title)}</h1>",
        f'<p class="dim">generated {_e(datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"))} by auditor</p>',
        '<div class="cards">'
        + "".join(
            f'<div class="card"><span class="dim">{_e(k)}</span><b>{_e(v)}</b></div>'
            for k, v in cards
        )
        + "</div>",
        "<h2>Cost per day</h2>",
        _legend(),
        bar_chart(daily, COLORS, label="cost per day: agents and auditing"),
        "<h2>Threads</h2>",
        (
            '<table id="threads"><thead><tr><th>thread</th><th>agent</th><th>project</th><th>started</th>'
            '<th class="num">messages</th><th class="num">agents $</th><th class="num">audit $</th>'
            '<th class="num">audited</th><th class="num">corrections</th></tr></thead><tbody>'
        ),
    ]
    for r in rows:
        label = clean(r["title"] or r["native_id"])
        tags = ""
        if r["parent_native_id"]:
            tags += '<span class="tag">subagent</span>'
        if r["failed"]:
            tags += f'<span class="tag err">{r["failed"]} failed</span>'
        corr = f'<span class="tag corr">{r["corrections"]}</span>' if r["corrections"] else "0"
        body.append(
            f'<tr data-thread="{r["id"]}"><td><a href="thread-{r["id"]}.html">{_e(label[:90])}</a>{tags}'
            + (f'<div class="dim">{_e(clean(r["native_id"]))}</div>' if r["title"] else "")
            + f'</td><td class="nowrap">{_e(r["agent"])}</td><td>{_e(clean(r["cwd"]))}</td>'
            f'<td>{_e(_when(r["started_at"])[:16])}</td><td class="num">{r["message_count"]}</td>'
            f'<td class="num agent-usd">{_usd(r["agent_usd"])}{"+?" if r["unpriced"] else ""}</td>'
            f'<td class="num audit-usd">{_usd(r["audit_usd"])}</td><td class="num">{r["audited"]}</td>'
            f'<td class="num corrections">{corr}</td></tr>'
        )
    body.append("</tbody></table>")
    if any(r["unpriced"] for r in rows):
        body.append(
            '<p class="dim">+? : some of the agent\'s calls used a model without a price.</p>'
        )
    return _page(title, "\n".join(body))


def _blocks_html(m, clean) -> str:
    out = []
    for b in m.blocks:
        if b.kind == "text" and b.text:
            out.append(f'<div class="text">{_e(clean(b.text))}</div>')
        elif b.kind == "thinking" and b.text:
            out.append(
                f"<details><summary>thinking</summary><pre>{_e(_clip(clean(b.text)))}</pre></details>"
            )
        elif b.kind == "tool_use":
            raw = (
                b.tool_input
                if isinstance(b.tool_input, str)
                else orjson.dumps(b.tool_input, option=orjson.OPT_INDENT_2).decode()
            )
            edit = " ✎ edits files" if b.is_file_edit else ""
            out.append(
                f'<details class="tool-use"><summary>→ {_e(clean(b.tool_name))}{edit}</summary>'
                f"<pre>{_e(_clip(clean(raw)))}</pre></details>"
            )
        elif b.kind == "tool_result":
            mark = "✗ error" if b.is_error else "← result"
            out.append(
                f'<details class="tool-result"><summary>{mark} ({len(b.text or ""):,} chars)</summary>'
                f"<pre>{_e(_clip(clean(b.text)))}</pre></details>"
            )
        elif b.kind == "image":
            out.append('<span class="tag">image</span>')
    return "".join(out)


def _verdict_html(v, clean) -> str:
    who = f"{_e(v.observer)} · {_e(v.model)}"
    when = _e(_when(v.created_at))
    if v.status != "ok":
        return (
            f'<div class="verdict bad"><div class="head">auditor · {who} · {_e(v.status)} · {when}</div>'
            f"{_e(clean(v.problem))}</div>"
        )
    if v.needs_correction:
        return (
            f'<div class="verdict correction"><div class="head">auditor asked for a course correction here · '
            f'{who} · {when}</div><div class="text">{_e(clean(v.message))}</div></div>'
        )
    return f'<div class="verdict ok"><div class="head">auditor · {who} · no correction needed · {when}</div></div>'


def _thread_page(engine: Engine, row: dict, usage_chart: str, clean) -> str:
    from .threads import load_messages

    with engine.connect() as conn:
        verdicts = conn.execute(
            text(
                "SELECT v.*, c.message_native_id AS at FROM verdicts v JOIN checkpoints c ON c.id = v.checkpoint_id "
                "WHERE v.thread_id = :t ORDER BY v.id"
            ),
            {"t": row["id"]},
        ).all()
    by_message: dict[str, list] = defaultdict(list)
    for v in verdicts:
        by_message[v.at].append(v)
    messages = load_messages(engine, row["id"])
    body = [
        '<p><a href="index.html">← all threads</a></p>',
        f"<h1>{_e(clean(row['title'] or row['native_id']))}</h1>",
        f'<p class="dim">{_e(row["agent"])} · {_e(clean(row["native_id"]))} · {_e(clean(row["cwd"]))}'
        + (
            f" · subagent of {_e(clean(row['parent_native_id']))}"
            if row["parent_native_id"]
            else ""
        )
        + "</p>",
        (
            '<div class="cards">'
            f'<div class="card"><span class="dim">agents\' cost</span><b>{_usd(row["agent_usd"])}</b></div>'
            f'<div class="card"><span class="dim">auditing cost</span><b>{_usd(row["audit_usd"])}</b></div>'
            f'<div class="card"><span class="dim">audited</span><b>{row["audited"]}</b></div>'
            f'<div class="card"><span class="dim">corrections</span><b>{row["corrections"]}</b></div></div>'
        ),
        "<h2>Cost of each model call</h2>",
        _legend(),
        usage_chart,
        "<h2>Messages</h2>",
    ]
    for m in messages:
        head = (
            f"{_e(m.role)}"
            + (f" · {_e(m.source_type)}" if m.source_type else "")
            + (f" · {_e(m.model)}" if m.model else "")
            + f" · {_e(_when(m.timestamp))}"
        )
        if m.source_type == SOURCE_COURSE_CORRECTION:
            cls, head = "msg correction", f"{CORRECTION_HEADER} · {_e(_when(m.timestamp))}"
        elif m.role == "user" and m.source_type in (SOURCE_TYPED, None):
            cls = "msg user"
        elif m.source_type == SOURCE_TOOL_RESULT or m.role == "tool":
            cls = "msg tool"
        else:
            cls = f"msg {_e(m.role)}"
        body.append(
            f'<div class="{cls}" id="m-{_e(m.native_id)}"><div class="head">{head}</div>'
            f"{_blocks_html(m, clean)}</div>"
        )
        for v in by_message.get(m.native_id, ()):
            body.append(_verdict_html(v, clean))
    return _page(clean(row["title"] or row["native_id"]), "\n".join(body))


def _usage_chart(engine: Engine, thread_id: int, verdict_usd: dict[str, float]) -> str:
    """Bars of each agent call's cost, in order; the auditing cost as one bar at the end."""
    from .prices import Pricer, band_sql

    band = band_sql("(input_tokens + cache_read_tokens + cache_write_tokens)")
    pricer = Pricer()
    series = []
    with engine.connect() as conn:
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
) -> ExportResult:
    """Write index.html and one page per thread (all threads, those named, or a run's) to `out_dir`.

    Secrets in the transcripts are shown as `[REDACTED:kind]` unless `redact` is False; terminal
    control sequences are left out.
    """
    from .redact import shown

    clean = shown(redact)
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise AuditorError(
            f"Cannot create {out}: {exc.strerror}. Pass -o with a writable directory."
        ) from None
    ids = _select_threads(engine, threads, run_id)
    rows = _thread_rows(engine, ids)
    result = ExportResult(out, out / "index.html")
    result.index.write_text(_index(rows, _daily(engine, set(ids)), title, clean), encoding="utf-8")
    for row in rows:
        chart = _usage_chart(engine, row["id"], {"audit": row["audit_usd"] or 0.0})
        page = out / f"thread-{row['id']}.html"
        page.write_text(_thread_page(engine, row, chart, clean), encoding="utf-8")
        result.pages.append(page)
    return result
