"""Commands for reports and retrospective analysis (`auditor report ...`, `eval`, `export`)."""

from __future__ import annotations

import csv
import io
import sys
from typing import Any

import click
import orjson

from .common import SINCE, UNTIL, Context, pass_ctx, run_options

FORMATS = ["table", "json", "csv"]


def format_option(help: str = "Output format."):
    """The --format option every report takes, with --wide for the table."""
    fmt = click.option(
        "--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True, help=help
    )

    def remember_wide(ctx: click.Context, _param, value: bool) -> bool:
        ctx.meta["auditor.wide"] = value
        return value

    wide = click.option(
        "--wide",
        "-w",
        is_flag=True,
        expose_value=False,
        callback=remember_wide,
        help="Table: every column, in full, even past the terminal's width.",
    )
    return lambda fn: fmt(wide(fn))


def _cell(value: Any) -> Any:
    if isinstance(value, list):
        return ";".join(str(v) for v in value)
    if isinstance(value, dict):
        return orjson.dumps(value).decode()
    return "" if value is None else value


def emit(report, fmt: str, table) -> None:
    """Print a report as JSON, CSV (one line per row; the total is in JSON and the table) or a table."""
    if fmt == "json":
        click.echo(
            orjson.dumps(
                report.as_dict(), option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS
            ).decode()
        )
    elif fmt == "csv":
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(report.columns)
        for row in report.rows:
            writer.writerow([_cell(row.get(c)) for c in report.columns])
        sys.stdout.write(buf.getvalue())
    else:
        table(report)
    if fmt != "json":
        for note in report.notes:
            click.echo(f"note: {note}", err=True)


def _tok(n: int | None) -> str:
    if not n:
        return "0"
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return str(n)


def _usd(v: float | None, unpriced: bool = False) -> str:
    text = "—" if v is None else f"${v:,.4f}" if v < 10 else f"${v:,.2f}"
    return text + ("+?" if unpriced else "")


def _pct(v: float | None) -> str:
    if v is None:
        return "—"
    return f"{v * 100:.1f}%" if v == 0 or abs(v) >= 0.01 else f"{v * 100:.3f}%"


def _key(v: Any) -> str:
    return "—" if v is None else str(v)


def _rich_table(
    title: str,
    columns: list[str],
    lines: list[list[str]],
    total: list[str] | None,
    caption: str | None = None,
    *,
    keys: int = 1,
    wide_only: tuple[str, ...] = (),
    drop_first: tuple[str, ...] = (),
) -> None:
    """Print a report table that fits the terminal (see auditor.cli.tables).

    The first `keys` columns name the row and stay; a project keeps its end, other names
    their start. Numbers are never cut: the `wide_only` columns show with --wide, and on a
    narrow terminal `drop_first` then the right-most columns are left out.
    """
    from .render import console
    from .tables import Col, print_table

    def col(i: int, head: str) -> Col:
        numeric = bool(lines) and _numeric(lines, i) and i >= keys
        cut = None if numeric else "start" if head == "project" else "end"
        if i < keys and head not in ("project", "model"):
            cut = None  # an id or a date is never cut
        drop = 1000 - drop_first.index(head) if head in drop_first else None
        return Col(head, right=numeric, cut=cut, wide=head in wide_only, keep=i < keys, drop=drop)

    wide = bool(click.get_current_context().meta.get("auditor.wide"))
    if title:
        console.print(title, style="bold")
    cols = [col(i, head) for i, head in enumerate(columns)]
    print_table(console, cols, lines, wide=wide, total=total, caption=caption)


def _numeric(lines: list[list[str]], i: int) -> bool:
    return all(line[i][:1] in "$0123456789—" for line in lines)


def _cost_table(report) -> None:
    keys = [c for c in report.columns if c not in _cost_value_cols(report)]
    heads = keys + [
        "calls",
        "input",
        "output",
        "cache read",
        "cache write",
        "agents $",
        "audit calls",
        "invalid/err",
        "audit in/out",
        "audit $",
        "credits",
        "overhead",
    ]

    def line(r: dict, label: str | None = None) -> list[str]:
        k = [
            label if label and i == 0 else ("" if label else _key(r[c])) for i, c in enumerate(keys)
        ]
        return k + [
            str(r["agent_calls"]),
            _tok(r["input_tokens"]),
            _tok(r["output_tokens"]),
            _tok(r["cache_read_tokens"]),
            _tok(r["cache_write_tokens"]),
            _usd(r["agent_usd"], bool(r["agent_unpriced_models"])),
            str(r["audit_calls"]),
            f"{r['audit_invalid']}/{r['audit_errors']}",
            f"{_tok(r['audit_input_tokens'])}/{_tok(r['audit_output_tokens'] + r['audit_thinking_tokens'])}",
            _usd(r["audit_usd"], bool(r["audit_unpriced_calls"])),
            "—" if r["audit_credits"] is None else f"{r['audit_credits']:,.2f}",
            _pct(r["overhead"]),
        ]

    total = line(report.total, "total") if keys else None
    rows = [line(r) for r in report.rows] if keys else [line(report.total, "total")[len(keys) :]]
    _rich_table(
        "costs" + (f" by {', '.join(report.by)}" if report.by else ""),
        heads if keys else heads[len(keys) :],
        rows,
        total,
        "+? : some calls are not in the price table (see the note)" if report.notes else None,
        keys=len(keys),
        wide_only=("invalid/err", "audit in/out", "credits"),
        drop_first=("cache write", "cache read", "input", "output", "audit calls"),
    )


def _cost_value_cols(report) -> set[str]:
    from ..reports import AGENT_COLS, AUDIT_COLS

    return set(AGENT_COLS + AUDIT_COLS + ["overhead"])


@click.group()
def report() -> None:
    """Reports over the store: costs, verdicts, agreement between observers."""


def report_options(dims: tuple[str, ...], default: str):
    def wrap(fn):
        opts = [
            click.option(
                "--by",
                "by",
                multiple=True,
                metavar="DIM",
                help=f"Group by {', '.join(dims)} (repeat or comma-separate for several). Default: {default}.",
            ),
            click.option(
                "--since",
                type=SINCE,
                help="From WHEN on (ISO date or time, or a span like 7d, 12h). UTC.",
            ),
            click.option(
                "--until",
                type=UNTIL,
                help="Before WHEN (an ISO date means up to the end of that day). UTC.",
            ),
            format_option("Output format."),
        ]
        for opt in reversed(opts):
            fn = opt(fn)
        return fn

    return wrap


@report.command("costs")
@report_options(
    ("day", "week", "month", "model", "observer", "run", "thread", "project", "agent"), "day"
)
@pass_ctx
def report_costs(ctx: Context, by, since, until, fmt) -> None:
    """What the agents cost, what auditing them cost, and the overhead (audit $ / agents $).

    Agents' tokens are counted as the providers bill them (streamed duplicates once, cumulative
    counters differenced) and priced per model with the price table; models it does not know
    are listed, not priced at 0. Auditing cost is what each observer call recorded. Agent usage
    is dated by when the agent made the call, auditing by when the observer was called. A week
    is named by its Monday. `--by source` groups by the machine each thread was read on
    (`ingest --source`), for a store several machines share.
    """
    from ..reports import cost_report

    rep = cost_report(ctx.reader, by or ("day",), since, until)
    emit(rep, fmt, _cost_table)


def _verdict_table(report) -> None:
    keys = [c for c in report.columns if c in report.by]
    heads = keys + [
        "seen",
        "gated out",
        "audited",
        "corr.",
        "rate",
        "right",
        "wrong",
        "invalid",
        "errors",
        "p50 ms",
        "p95 ms",
        "$",
        "$/audit",
        "$/corr.",
        "gated out by reason",
    ]

    def line(r: dict, label: str | None = None) -> list[str]:
        k = [
            label if label and i == 0 else ("" if label else _key(r[c])) for i, c in enumerate(keys)
        ]
        reasons = ", ".join(f"{k} {v}" for k, v in sorted(r["gated_out_by_reason"].items()))
        return k + [
            str(r["seen"]),
            str(r["gated_out"]),
            str(r["audited"]),
            str(r["corrections"]),
            _pct(r["correction_rate"]),
            str(r["judged_right"]),
            str(r["judged_wrong"]),
            str(r["invalid"]),
            str(r["errors"]),
            _key(r["latency_p50_ms"]),
            _key(r["latency_p95_ms"]),
            _usd(r["usd"]),
            _usd(r["usd_per_audit"]),
            _usd(r["usd_per_correction"]),
            reasons,
        ]

    total = line(report.total, "total") if report.total and keys else None
    _rich_table(
        "verdicts" + (f" by {', '.join(report.by)}" if report.by else ""),
        heads,
        [line(r) for r in report.rows],
        total,
        keys=len(keys),
        wide_only=("p95 ms", "$/audit"),
        drop_first=(
            "gated out by reason",
            "invalid",
            "p50 ms",
            "gated out",
            "seen",
            "wrong",
            "right",
        ),
    )
    if not report.rows:
        click.echo("no observer has been run on this store yet (see `auditor run`)", err=True)


@report.command("verdicts")
@report_options(
    ("observer", "model", "project", "agent", "run", "day", "week", "month"), "observer,model"
)
@pass_ctx
def report_verdicts(ctx: Context, by, since, until, fmt) -> None:
    """How often each observer was asked and stepped in, failed, how fast, and at what cost.

    Per group: checkpoints seen, gated out (by reason), audited (valid answers), corrections and
    their rate, corrections you judged right and wrong (`auditor serve`'s review page), invalid answers, errors, latency p50/p95 of answered calls, cost per audit and
    per correction.
    """
    from ..reports import verdict_report

    rep = verdict_report(ctx.engine, by or ("observer", "model"), since, until)
    emit(rep, fmt, _verdict_table)


def _agreement_table(report) -> None:
    from .render import console

    x = report.extra
    (a_yes_b_yes, a_yes_b_no), (a_no_b_yes, a_no_b_no) = x["table"]
    console.print(
        f"[bold]{x['a']}[/bold] (rows) vs [bold]{x['b']}[/bold] (columns) on {x['checkpoints']} checkpoints both answered"
    )
    _rich_table(
        "",
        ["", f"{x['b']}: correct", f"{x['b']}: fine"],
        [
            [f"{x['a']}: correct", str(a_yes_b_yes), str(a_yes_b_no)],
            [f"{x['a']}: fine", str(a_no_b_yes), str(a_no_b_no)],
        ],
        None,
    )
    kappa = "undefined" if x["kappa"] is None else f"{x['kappa']:.3f}"
    console.print(f"agreement {_pct(x['agreement'])}, Cohen's kappa {kappa}")
    for d in report.rows:
        # Ids whole on lines of their own (never folded by the console), to copy into `show`.
        console.print(f"\n[bold]{d['agent']} {d['thread_native_id']}[/bold]", soft_wrap=True)
        console.print(f"  at message {d['message_id']}", soft_wrap=True, markup=False)
        for side, name in (("a", x["a"]), ("b", x["b"])):
            said = d[f"{side}_message"] or (
                "(asked for a correction)" if d[f"{side}_needs_correction"] else "(no correction)"
            )
            console.print(f"  {name}: {said}", markup=False)


@report.command("agreement")
@click.option(
    "--observers",
    required=True,
    metavar="A,B",
    help="The two observers to compare: NAME or NAME:MODEL, comma-separated.",
)
@click.option("--since", type=SINCE, help="Only answers given from WHEN on (ISO date or 7d).")
@click.option("--until", type=UNTIL, help="Only answers given before WHEN.")
@format_option("Output format (csv lists the disagreements).")
@pass_ctx
def report_agreement(ctx: Context, observers, since, until, fmt) -> None:
    """Compare two observers on the checkpoints both answered: 2x2 table, agreement, Cohen's kappa.

    The latest valid answer of each observer at a checkpoint counts. The disagreements are
    listed with the thread, the checkpoint's message id and both observers' messages.
    """
    from ..errors import AuditorError
    from ..reports import agreement_report

    parts = [p for p in observers.split(",") if p.strip()]
    if len(parts) != 2:
        raise AuditorError(f"--observers takes two observers, A,B; got {observers!r}")
    rep = agreement_report(ctx.engine, parts[0], parts[1], since, until)
    emit(rep, fmt, _agreement_table)


def _followup_table(report) -> None:
    from .render import console

    x = report.extra
    share = _pct(x["acted_on_share"])
    console.print(
        f"{x['corrections']} corrections; the agent went on after {x['continued']}, and acted on "
        f"{x['acted_on']} of those ({share}): edited files or ran tests"
    )
    if not report.rows:
        return
    heads = [
        "thread",
        "correction at",
        "went on",
        "edited",
        "tests",
        "next checkpoint",
        "user wrote",
        "user corrected",
    ]

    def yes(v: bool) -> str:
        return "yes" if v else "—"

    lines = [
        [
            f"{r['agent']} {r['thread_native_id']}"[:40],
            _key(r["at"]),
            yes(r["continued"]),
            yes(r["edited_files"]),
            yes(r["ran_tests"]),
            _key(r["next_checkpoint"]),
            yes(r["user_wrote_next"]),
            yes(r["user_corrected"]),
        ]
        for r in report.rows
    ]
    t = report.total
    nxt = t["next_checkpoint"]
    total = [
        "total",
        "",
        str(t["continued"]),
        str(t["edited_files"]),
        str(t["ran_tests"]),
        f"{nxt['passed']} passed, {nxt['corrected again']} again",
        str(t["user_wrote_next"]),
        str(t["user_corrected"]),
    ]
    _rich_table("after each correction", heads, lines, total)


def _delivery_table(report) -> None:
    keys = [c for c in report.columns if c in report.by]
    heads = keys + [
        "corr.",
        "delivered",
        "taken back",
        "held",
        "failed",
        "pending",
        "cancelled",
        "why",
    ]

    def line(r: dict, label: str | None = None) -> list[str]:
        k = [
            label if label and i == 0 else ("" if label else _key(r[c])) for i, c in enumerate(keys)
        ]
        why = ", ".join(f"{k} {v}" for k, v in sorted(r["why"].items()))
        counts = ("corrections", "delivered", "taken_back", "held", "failed", "pending")
        return k + [str(r[c]) for c in (*counts, "cancelled")] + [why]

    total = line(report.total, "total") if report.total and keys else None
    _rich_table(
        "deliveries" + (f" by {', '.join(report.by)}" if report.by else ""),
        heads,
        [line(r) for r in report.rows],
        total,
        keys=len(keys),
        drop_first=("why", "failed", "pending"),
    )


@report.command("deliveries")
@report_options(
    ("agent", "observer", "model", "project", "day", "week", "month"), "agent,observer,day"
)
@pass_ctx
def report_deliveries(ctx: Context, by, since, until, fmt) -> None:
    """What became of the corrections: delivered, taken back, held, failed, pending, and why.

    Per group: corrections asked for; how many reached the agent (an injector or a live hook),
    were taken back by a live hook because the user wrote first, were held back by a loop guard
    (`user-wrote-again`, `too-many-corrections`, `duplicate`...), failed every attempt, or wait
    for `auditor inject`; and the live audits cancelled in flight when the user wrote. `why`
    counts the reasons. Dated by when the observer answered.
    """
    from ..reports import delivery_report

    rep = delivery_report(ctx.engine, by or ("agent", "observer", "day"), since, until)
    emit(rep, fmt, _delivery_table)


@report.command("followup")
@click.option("--since", type=SINCE, help="Corrections from WHEN on (ISO date or 7d).")
@click.option("--until", type=UNTIL, help="Corrections before WHEN.")
@format_option("Output format.")
@pass_ctx
def report_followup(ctx: Context, since, until, fmt) -> None:
    """What the agent did after each course correction, and the share of corrections acted on.

    For each correction found in a thread: did the agent go on, edit files, run tests; did the
    next audited checkpoint pass; did the person write a correction of their own next.
    """
    from ..reports import followup_report

    emit(followup_report(ctx.engine, since, until), fmt, _followup_table)


@click.group()
def export() -> None:
    """Export the store for reading elsewhere."""


@export.command("html")
@click.argument("threads", nargs=-1, metavar="[THREAD]...")
@click.option(
    "--run",
    "run_id",
    type=int,
    metavar="ID",
    help="Only the threads of this run (see `auditor report costs --by run`).",
)
@click.option(
    "-o",
    "--output",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False),
    help="Directory to write index.html and the thread pages to.",
)
@click.option(
    "--title", default="auditor report", show_default=True, help="Title of the index page."
)
@click.option(
    "--no-redact",
    is_flag=True,
    help="Show secrets (keys, tokens, passwords) as the transcripts have them, not [REDACTED:kind].",
)
@pass_ctx
def export_html(ctx: Context, threads, run_id, out_dir, title, no_redact) -> None:
    """Write a static HTML report: an index of threads with cost and verdict columns, a cost
    chart, and a page per thread with corrections set apart. It opens from disk, no server.

    THREAD is a database id, native id or unique prefix; without THREAD or --run, every thread.
    Secrets are shown as [REDACTED:kind] unless --no-redact.
    """
    from ..errors import AuditorError
    from ..reports.html_export import export_html as write

    if threads and run_id is not None:
        raise AuditorError("name THREADs or --run, not both")
    result = write(ctx.engine, out_dir, threads or None, run_id, title, not no_redact, ctx.plugins)
    click.echo(f"wrote {result.index} and {len(result.pages)} thread pages")


def _eval_table(report) -> None:
    from .render import console

    x = report.extra
    c = x["confusion"]
    console.print(
        f"[bold]{x['observer']}[/bold] {x['model']} on {x['labels']} labels "
        f"(run {x['run']}: {x['calls_made']} calls made, {x['reused']} answers reused)"
    )
    _rich_table(
        "",
        ["", "labelled: correct", "labelled: fine"],
        [["said: correct", str(c["tp"]), str(c["fp"])], ["said: fine", str(c["fn"]), str(c["tn"])]],
        None,
    )

    def num(v):
        return "—" if v is None else f"{v:.3f}"

    console.print(
        f"precision {num(x['precision'])}  recall {num(x['recall'])}  F1 {num(x['f1'])}  "
        f"accuracy {num(x['accuracy'])}  (gated out, counted as 'fine': {x['gated_out']}; "
        f"not scored: {x['failed']})"
    )
    for r in report.rows:
        if r["outcome"] in ("missed", "false alarm", "failed", "invalid"):
            why = r["message"] or (f"gate: {r['gate']}" if r["verdict"] is None else "")
            console.print(
                f"  {r['outcome']:<11} line {r['line']}: {r['thread_native_id']} at {r['at']}  {why}",
                markup=False,
            )


@click.command("eval")
@click.argument("labels", required=False, type=click.Path(exists=True, dir_okay=False))
@run_options
@click.option(
    "--concurrency",
    "-j",
    type=int,
    help="Observer calls in flight at once (default: what the observer suits: 4, the embedded model 1).",
)
@format_option("Output format (csv: one line per label).")
@pass_ctx
def eval_command(
    ctx: Context,
    labels,
    config,
    concurrency,
    fmt,
) -> None:
    """Score an observer (and the gate) against your own labels: precision, recall, F1.

    LABELS is JSON lines of {"thread": ID or "file": PATH, "at": MESSAGE_ID, "needs_correction":
    true|false}: the checkpoint ending at that message, and whether it needed a correction.
    Without LABELS, the labels marked in the store on the review page of `auditor serve` (each
    correction judged right or wrong). Checkpoints already answered by the same observer, model, prompt and content are not paid
    for again. A checkpoint the gate holds back counts as "no correction". The misses and false
    alarms are listed.
    """
    from ..audit.evaluate import evaluate

    config.concurrency = concurrency
    emit(evaluate(ctx.engine, ctx.plugins, labels, config), fmt, _eval_table)


@click.command("reprice")
@click.option(
    "--all",
    "everything",
    is_flag=True,
    help="Price every verdict again (default: only those recorded without a price).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@pass_ctx
def reprice_command(ctx: Context, everything, as_json) -> None:
    """Price stored verdicts from their recorded tokens once their model has a price.

    Verdicts recorded while the price table did not know their model show as unpriced; after
    a price is added (prices.json, `auditor config` shows where, or a newer genai-prices), this
    stores their cost, priced at the date of the call (batch verdicts at the batch price), and
    the runs' totals, so that `auditor verdicts` and `auditor report costs` agree.
    """
    from ..audit.reprice import describe, reprice

    result = reprice(ctx.engine, everything=everything)
    if as_json:
        click.echo(orjson.dumps(result.as_dict()).decode())
    else:
        click.echo(describe(result))


COMMANDS = [report, export, eval_command, reprice_command]
