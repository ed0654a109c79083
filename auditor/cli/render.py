"""Terminal output: tables, progress, thread views (rich)."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from time import monotonic

import orjson
from rich.console import Console
from rich.pager import Pager
from rich.table import Table
from rich.text import Text

from ..model import SOURCE_COURSE_CORRECTION, SOURCE_TYPED
from ..printable import printable
from .tables import Col, print_table, short_thread_id

console = Console()
if not console.is_terminal and not os.environ.get("COLUMNS", "").isdigit():
    console = Console(width=180)  # piped output: do not squeeze tables into 80 columns
err_console = Console(stderr=True)

# Where stderr is no terminal (a log file, `| tee`), progress is a plain line at most this
# often (seconds), and one when the work is done; the variable changes it (0: every step).
PROGRESS_EVERY_VAR = "AUDITOR_PROGRESS_EVERY"
PROGRESS_EVERY = 10.0


def _progress_every(every: float | None) -> float:
    if every is not None:
        return every
    try:
        return float(os.environ.get(PROGRESS_EVERY_VAR, PROGRESS_EVERY))
    except ValueError:
        return PROGRESS_EVERY


class _Lines:
    """Progress as plain lines on stderr: one when `every` seconds have passed since the last
    (or since the start), and one at the end, however soon."""

    def __init__(self, every: float) -> None:
        self.every = every
        self.started = self.last = monotonic()
        self.said = ""

    def line(self, text: str, final: bool = False, now: float | None = None) -> None:
        """Print `text` ({elapsed} filled in) if it is time to, or `final`."""
        now = monotonic() if now is None else now
        if text == self.said or (now - self.last < self.every and not final):
            return
        self.last, self.said = now, text
        text = text.format(elapsed=_clock(now - self.started))
        err_console.print(text, markup=False, highlight=False, soft_wrap=True)


@contextlib.contextmanager
def ingest_progress() -> Iterator:
    """Yield a per-file progress callback: a bar where stderr is a terminal, else a line every
    `PROGRESS_EVERY` seconds."""
    if not err_console.is_terminal:
        lines = _Lines(_progress_every(None))
        seen = {"files": 0, "messages": 0}

        def as_line(result) -> None:
            seen["files"] += 1
            seen["messages"] += result.messages
            lines.line(
                f"ingest: {seen['files']} files, {seen['messages']} messages added, "
                f"{{elapsed}} elapsed; {printable(result.path)[-80:]}"
            )

        yield as_line
        return
    # Imported here, as Panel below: a command that prints a table does not load them.
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("[bold]ingest"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[msgs]} messages"),
        TimeElapsedColumn(),
        TextColumn("{task.description}"),
        console=err_console,
        transient=True,
    ) as progress:
        task = progress.add_task("", total=None, msgs=0)
        count = {"messages": 0}

        def callback(result) -> None:
            count["messages"] += result.messages
            progress.update(task, advance=1, msgs=count["messages"], description=result.path[-60:])

        yield callback


def _short(n: int) -> str:
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return str(n)


def threads_table(rows: list[dict], wide: bool = False) -> None:
    """Print threads: id, agent, thread, started, msgs, tokens and project in 80 columns;
    `wide` adds the full id, time, tool calls, edits, models and the token breakdown."""
    cols = [
        Col("id", right=True, keep=True),
        Col("agent", keep=True),
        Col("thread", keep=True),
        Col("thread id", wide=True),
        Col("started", keep=True),
        Col("msgs", right=True, keep=True),
        Col("tools", right=True, wide=True),
        Col("edits", right=True, drop=20),
        Col("tokens", right=True, keep=True),
        Col("$", right=True, drop=9),
        Col("title", cut="end", min=12, drop=15),
        Col("project", cut="start", min=10, drop=10),
        Col("model", cut="end", wide=True),
        Col("in", right=True, wide=True),
        Col("out", right=True, wide=True),
        Col("cache r/w", right=True, wide=True),
    ]
    lines = []
    for r in rows:
        total = r["input_tokens"] + r["output_tokens"]
        total += r["cache_read_tokens"] + r["cache_write_tokens"]
        started = (r["started"] or "—").replace("T", " ")
        lines.append(
            [
                str(r["id"]),
                r["agent"],
                r["short_id"],
                r["native_id"],
                started[:16] if wide else started[:10],
                str(r["messages"]),
                str(r["tool_calls"]),
                str(r["file_edits"]),
                _short(total),
                "?" if r["agent_usd"] is None else f"{r['agent_usd']:.2f}",
                " ".join((r["title"] or "").split()),
                r["cwd"] or "",
                ",".join(m.removeprefix("claude-") for m in r["models"]),
                _short(r["input_tokens"]),
                _short(r["output_tokens"]),
                f"{_short(r['cache_read_tokens'])}/{_short(r['cache_write_tokens'])}",
            ]
        )
    if wide:  # the full id says it all; the short one would repeat it
        cols, lines = cols[:2] + cols[3:], [line[:2] + line[3:] for line in lines]
    print_table(console, cols, lines, wide=wide)
    console.print(f"{len(rows)} threads", style="dim")


def search_table(rows: list[dict]) -> None:
    """Search hits: thread, agent, time, role and the words around the match."""
    cols = [
        Col("thread", keep=True),
        Col("agent", keep=True),
        Col("time", keep=True),
        Col("role", drop=5),
        Col("match", cut="end", min=20, keep=True),
    ]
    lines = [
        [
            r["thread"],
            r["agent"],
            (r["time"] or "—").replace("T", " ")[:16],
            r["role"],
            r["snippet"],
        ]
        for r in rows
    ]
    print_table(console, cols, lines)
    console.print(f"{len(rows)} messages", style="dim")


def checkpoints_table(rows: list[dict]) -> None:
    """A thread's checkpoints: the message id `prompt --at` takes, the gate, the verdicts."""
    # Message ids whole: they are there to be copied into `prompt --at`.
    cols = [
        Col("at", keep=True),
        Col("kind", keep=True),
        Col("tools", right=True),
        Col("edits", right=True),
        Col("gate", cut="end", min=12),
        Col("verdicts", cut="end", min=12),
    ]
    lines = []
    for r in rows:
        gate = ("audit" if r["gate"]["audit"] else "skip") + f": {r['gate']['reason']}"
        if not r["gate"]["stored"]:
            gate += " (now)"
        said = []
        for v in r["verdicts"]:
            what = (
                v["status"]
                if v["status"] != "ok"
                else ("correction" if v["needs_correction"] else "silent")
            )
            said.append(f"{v['observer']}: {what}")
        lines.append(
            [
                r["at"],
                r["kind"],
                str(r["tool_calls"]),
                str(r["file_edits"]),
                gate,
                ", ".join(said) or "—",
            ]
        )
    print_table(console, cols, lines)
    console.print(f"{len(rows)} checkpoints", style="dim")


def runs_table(rows: list[dict], wide: bool = False) -> None:
    """Runs as a table that fits the terminal; each run's note (how it ended, what went wrong)
    on its own line under the table, where prose may take the room it needs."""
    cols = [
        Col("id", right=True, keep=True),
        Col("started", keep=True),
        Col("status", keep=True),
        Col("observer", cut="end", min=12),
        Col("audited", right=True),
        Col("corrections", right=True, drop=20),  # left out before errors: a failed run shows
        Col("errors", right=True, keep=True),
        Col("cost", right=True, keep=True),
    ]
    lines, notes = [], []
    for r in rows:
        lines.append(
            [
                str(r["id"]),
                (r["started_at"] or "")[:16].replace("T", " "),
                r["status"],
                f"{r['observer']} {r['model']}",
                str(r["audited"]),
                str(r["corrections"]),
                str(r["errors"]),
                f"${r['cost_usd']:.4f}",
            ]
        )
        kind = f"hook {r['hook']}" if r["hook"] else "dry run" if r["dry_run"] else ""
        note = "; ".join(x for x in (kind, r["error"] or "") if x)
        if note:
            notes.append(f"run {r['id']}: {printable(note)}")
    print_table(console, cols, lines, wide=wide)
    for note in notes:
        console.print(note, highlight=False, markup=False)
    console.print(f"{len(rows)} runs", style="dim")


def plugins_table(infos: list[dict], formats: dict, failures: list[dict]) -> None:
    table = Table(header_style="bold")
    for col in ("plugin", "module", "package", "hooks"):
        table.add_column(col)
    for i in infos:
        pkg = f"{i['dist']} {i['version']}" if i["dist"] else ""
        table.add_row(i["name"], i["module"], pkg, ", ".join(i["hooks"]))
    console.print(table)
    console.print("formats: " + ", ".join(f"{n} ({f['agent']})" for n, f in formats.items()))
    for f in failures:
        err_console.print(f"[red]failed to load[/red] {f['name']}: {f['error']}")


def _clip(text: str, limit: int, full: bool) -> str:
    if full or len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n… [{len(text) - limit} characters cut] …\n{text[-half:]}"


def show_thread(
    thread, messages, full: bool = False, notes: dict | None = None, redact: bool = True
) -> None:
    """Print a thread: user messages highlighted, tools abbreviated, and course corrections set
    apart in a magenta frame under a dimmed header saying who inserted them.

    `notes` maps a message's native id to what happened at the checkpoint it ends (see
    `auditor.store.verdict_rows.checkpoint_notes`): its signals and verdicts are shown right after it.
    A message with nothing to show (an empty text, a bare thinking block) gets no header.
    Secrets are redacted unless `redact` is False; terminal control sequences never get through.
    """
    from rich.panel import Panel

    from ..redact import shown

    notes = notes or {}
    clean = shown(redact)
    head = Text.assemble((thread.agent, "bold"), " ", clean(thread.native_id))
    if thread.cwd:
        head.append("  " + clean(thread.cwd), style="dim")
    if thread.parent_native_id:
        head.append("\nsidechain of " + clean(thread.parent_native_id), style="dim")
    console.print(Panel(head, expand=False))
    for m in messages:
        when = m.timestamp.strftime("%Y-%m-%d %H:%M:%S") if m.timestamp else ""
        label = clean(
            f"{m.role}"
            + (f" · {m.source_type}" if m.source_type else "")
            + f"  [{m.native_id}] {when}"
        )
        parts: list[str] = []
        for b in m.blocks:
            if b.kind == "text" and b.text:
                parts.append(_clip(clean(b.text), 4000, full))
            elif b.kind == "thinking" and b.text:
                parts.append("(thinking) " + _clip(clean(b.text), 300, full))
            elif b.kind == "tool_use":
                raw = (
                    b.tool_input
                    if isinstance(b.tool_input, str)
                    else orjson.dumps(b.tool_input).decode()
                )
                mark = " ✎" if b.is_file_edit else ""
                parts.append(f"→ {clean(b.tool_name or '')}{mark} {_clip(clean(raw), 300, full)}")
            elif b.kind == "tool_result":
                mark = "✗" if b.is_error else "←"
                parts.append(f"{mark} {_clip(clean(b.text or ''), 500, full)}")
            elif b.kind == "image":
                parts.append("[image]")
        note = notes.get(m.native_id)
        if not parts:
            if note:
                _show_note(note, clean)
            continue
        body = Text("\n".join(parts))
        if m.source_type == SOURCE_COURSE_CORRECTION:
            # Amp's own observer also inserts corrections; everywhere else it was auditor.
            who = "Amp's observer" if thread.agent == "amp" else "auditor"
            title = Text(
                f"inserted by {who} · course correction  [{clean(m.native_id)}] {when}",
                style="dim italic",
            )
            console.print(Panel(body, title=title, title_align="left", border_style="bold magenta"))
        elif m.role == "user" and m.source_type in (SOURCE_TYPED, None):
            console.print(
                Panel(body, title=Text(label), title_align="left", border_style="bold cyan")
            )
        else:
            console.print(Text(label, style="dim"))
            console.print(body)
        if note:
            _show_note(note, clean)
    console.print(f"{len(messages)} messages", style="dim")


_VERDICT_STYLE = {"correction": "bold yellow", "no correction": "green"}


def _show_note(note, clean) -> None:
    """Print a checkpoint's signals (one dim line each) and its verdicts (a frame each)."""
    from rich.panel import Panel

    from ..store.verdict_rows import facts, outcome

    for sig in note.signals:
        console.print(Text(f"⚑ signal {clean(sig.summary())}", style="yellow"))
    for v in note.verdicts:
        kind = outcome(v)
        # The facts (observer, cost, delivery) go in the frame, where they wrap: a frame's title
        # is cut at the terminal's edge, and the delivery comes last.
        title = Text(f"verdict {v['id']}: {kind}", style="bold")
        text = v["message"] if v["status"] == "ok" else v["problem"]
        body = Text(clean(facts(v)) + "\n", style="dim")
        body.append(clean(text or "") or "(no message)", style="" if text else "dim")
        style = _VERDICT_STYLE.get(kind.removeprefix("second pass: "), "red")
        console.print(Panel(body, title=title, title_align="left", border_style=style))


class EnvPager(Pager):
    """$PAGER (else less), given colours and told to quit at once when the text fits (LESS=FRX,
    unless LESS is set); straight to stdout when there is no such program."""

    def show(self, content: str) -> None:
        import shlex
        import shutil
        import subprocess

        command = os.environ.get("PAGER") or "less"
        words = shlex.split(command)
        if not words or shutil.which(words[0]) is None:
            sys.stdout.write(content)
            return
        env = {**os.environ, "LESS": os.environ.get("LESS", "FRX")}
        proc = subprocess.Popen(command, shell=True, stdin=subprocess.PIPE, env=env)
        proc.communicate(content.encode("utf-8", "replace"))  # a reader quitting early is fine


@contextlib.contextmanager
def paged(enabled: bool = True) -> Iterator[None]:
    """Send what is printed inside through a pager when stdout is a terminal."""
    if not (enabled and console.is_terminal):
        yield
        return
    with console.pager(EnvPager(), styles=True):
        yield


def write_err(line: str) -> None:
    sys.stderr.write(line + "\n")


@contextlib.contextmanager
def run_progress(enabled: bool = True, every: float | None = None) -> Iterator:
    """Yield a callback showing calls done of those planned, corrections, cost so far and ETA.

    A bar where stderr is a terminal, else a line every `every` seconds (`PROGRESS_EVERY`).
    While checkpoints are still being gated the total is shown as `N+`; the ETA is the
    remaining calls at the run's own pace so far.
    """
    if not enabled:
        yield None
        return
    if not err_console.is_terminal:
        lines = _Lines(_progress_every(every))

        def as_line(summary) -> None:
            done, total = summary.finished, summary.queued
            if not done:
                return
            now = monotonic()
            eta = "-:--:--"
            if not summary.planning:
                eta = _clock((now - lines.started) / done * (total - done))
            lines.line(
                f"audit: {done}/{total}{'+' if summary.planning else ''} calls, "
                f"{summary.corrections + summary.critique_corrections} corrections, "
                f"${summary.cost_usd:.4f}, {{elapsed}} elapsed, ETA {eta}",
                final=not summary.planning and done == total,
                now=now,
            )

        yield as_line
        return
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("[bold]audit"),
        BarColumn(bar_width=24),
        TextColumn("{task.fields[count]} calls"),
        TextColumn("{task.fields[corr]} corrections"),
        TextColumn("${task.fields[usd]:.4f}"),
        TimeElapsedColumn(),
        TextColumn("ETA {task.fields[eta]}"),
        console=err_console,
        transient=True,
    ) as progress:
        task = progress.add_task("", total=None, count="0/0+", corr=0, usd=0.0, eta="-:--:--")

        def callback(summary) -> None:
            done, total = summary.finished, summary.queued
            elapsed = progress.tasks[0].elapsed or 0.0
            eta = "-:--:--"
            if done and not summary.planning:
                eta = _clock(elapsed / done * (total - done))
            progress.update(
                task,
                completed=done,
                total=None if summary.planning else total,
                count=f"{done}/{total}{'+' if summary.planning else ''}",
                corr=summary.corrections + summary.critique_corrections,
                usd=summary.cost_usd,
                eta=eta,
                refresh=True,
            )

        yield callback


def _clock(seconds: float) -> str:
    seconds = int(seconds + 0.5)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def _span(seconds: float) -> str:
    """A duration as a person reads it: 40 s, 12 min, 3 h 20 min."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 120 else f"{minutes // 60} h {minutes % 60} min"


def _first_line(text: str | None, width: int = 100) -> str:
    line = next((ln.strip() for ln in (text or "").splitlines() if ln.strip()), "")
    return line if len(line) <= width else line[: width - 1] + "…"


def run_summary(summary, dry_run: bool, short_ids: dict[str, str] | None = None) -> None:
    """Print what a run did; `short_ids` maps the threads of its corrections to the short
    forms that are unique in the store (`threads.short_ids`)."""
    short_ids = short_ids or {}
    gated_out = ", ".join(f"{k} {v}" for k, v in sorted(summary.gated_out.items())) or "none"
    console.print(
        f"checkpoints: {summary.checkpoints}; passed the gate: {summary.gated_in}; gated out: {gated_out}"
    )
    if dry_run:
        cost = (
            "unknown (model not in the price table)"
            if summary.est_cost_usd is None
            else f"${summary.est_cost_usd:.4f}"
        )
        console.print(
            f"dry run: {summary.audited} observer calls would be made ({summary.reused} already answered), "
            f"~{summary.est_input_tokens:,} input tokens, estimated cost {cost} with {summary.observer} {summary.model}"
            + (" at the batch price" if summary.batch_price else "")
        )
        if summary.budget_note:
            console.print(summary.budget_note, markup=False)
        if summary.est_seconds is not None:
            at_once = (
                "one at a time" if summary.est_at_once == 1 else f"{summary.est_at_once} at once"
            )
            console.print(
                f"time: about {_span(summary.est_seconds)} ({summary.audited} calls {at_once}, "
                f"{_span(summary.est_call_seconds or 0)} each: {summary.est_seconds_source})",
                markup=False,
            )
        elif summary.audited and not summary.batch_price:
            console.print("time: unknown (no answers of this model recorded yet)")
        return
    ids = summary.run_ids or [summary.run_id]  # one run per observer when agents' vendors differ
    runs = f"run {ids[0]}" if len(ids) == 1 else f"runs {', '.join(map(str, ids))}"
    console.print(
        f"{runs}: {summary.audited} audited, {summary.corrections} corrections, "
        f"{summary.invalid} invalid, {summary.errors} errors, {summary.reused} already answered; "
        f"cost ${summary.cost_usd:.4f}"
        + (f" ({summary.unpriced} calls unpriced)" if summary.unpriced else "")
    )
    if summary.batch is not None:
        for line in summary.batch.lines():
            console.print(line)
    if summary.budget_note:
        console.print(summary.budget_note)
    if summary.found:
        console.print(
            f"corrections ({len(summary.found)}; in full: "
            + " and ".join(f"auditor verdicts -c --run {i}" for i in ids)
            + "):",
            markup=False,
        )
        for c in summary.found:
            second = " (second pass)" if c["critique"] else ""
            console.print(
                f"  {short_ids.get(c['thread']) or short_thread_id(c['thread'])} at {c['message_id'][:8]}{second}: "
                f"{_first_line(c['message'])}",
                markup=False,
                highlight=False,
            )


def interrupted_lines(summary, command: str) -> str:
    """What to tell the user when Ctrl-C or SIGTERM stopped a run: what was kept, how to resume."""
    of = f"{summary.finished} of {summary.queued}{'+' if summary.planning else ''}"
    n = summary.abandoned
    gave_up = (
        f"; {'the call' if n == 1 else f'{n} calls'} in flight abandoned (sent again on resume)"
        if n
        else ""
    )
    return (
        f"Interrupted: run {summary.run_id} stopped after {of} calls; every answer received "
        f"is stored{gave_up}.\nTo resume, run the same command again (answered checkpoints are not sent "
        f"again):\n  {command}"
    )
