"""The `auditor` command line: a thin layer over the library.

The root group and the commands over the store (`ingest`, `threads`, `show`, `db`,
`observers`, `plugins`); the others live in cli_audit, cli_live and cli_reports, and all of
them share cli_common.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from .. import __version__
from . import audit_commands as cli_audit
from . import batch_commands as cli_batch
from . import live_commands as cli_live
from . import report_commands as cli_reports
from . import serve_command as cli_serve
from .common import SINCE, AuditorGroup, Context, echo_json, pass_ctx, row_formats


@click.group(cls=AuditorGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="auditor")
@click.option(
    "--db",
    metavar="PATH_OR_URL",
    envvar="AUDITOR_DB",
    help="Database file or SQLAlchemy URL. Default: $AUDITOR_DB, else auditor.db in the "
    "per-user data directory (see `auditor db path`).",
)
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.pass_context
def cli(ctx: click.Context, db: str | None, debug: bool) -> None:
    """Audit coding-agent transcripts with an observer model from another vendor.

    Start with `auditor ingest ~/.claude/projects`, then `auditor threads`.
    """
    ctx.obj = Context(db, debug)
    from ..config import ConfigError, load

    try:
        ctx.obj.config = load()
    except ConfigError as exc:
        if ctx.invoked_subcommand not in ("hook", "config", "inject"):
            raise
        ctx.obj.config_error = exc  # the Stop hooks must fail open: they record it instead
    else:
        ctx.default_map = ctx.obj.config.default_map()


@cli.command()
# readable=False: an unreadable path is reported by ingest as PATH: problem, the rest still read.
@click.argument("paths", nargs=-1, required=True, type=click.Path(readable=False))
@click.option(
    "--format",
    "format_name",
    metavar="NAME",
    help="Force a transcript format instead of detecting it (see `auditor plugins`).",
)
@click.option(
    "--source",
    metavar="NAME",
    help="The machine the files are on, for a store several machines share "
    "(default: $AUDITOR_SOURCE, else the host name). The same path from two sources is two files.",
)
@click.option(
    "--include-forgotten",
    is_flag=True,
    help="Bring back the threads `auditor forget` removed: their files are read again.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option("--quiet", "-q", is_flag=True, help="Print only errors.")
@pass_ctx
def ingest(
    ctx: Context,
    paths: tuple[str, ...],
    format_name: str | None,
    source: str | None,
    include_forgotten: bool,
    as_json: bool,
    quiet: bool,
) -> None:
    """Read transcripts under PATHS into the store, incrementally.

    PATHS are files or directories (walked for *.jsonl and *.json). Files already read and
    unchanged are skipped; files that grew are read from where the last ingest stopped.
    Problems are printed one per line as FILE:LINE: MESSAGE and kept in the ingest_errors
    table. Exit status: 0 when every file was read, 1 when any file had a problem.
    """
    from ..ingest.ingester import ingest as run_ingest

    engine, plugins = ctx.writer, ctx.plugins
    if as_json or quiet:  # no progress shown: the terminal library is not loaded either
        summary = run_ingest(engine, plugins, paths, format_name, None, source, include_forgotten)
    else:
        from .render import ingest_progress

        with ingest_progress() as progress:
            summary = run_ingest(
                engine, plugins, paths, format_name, progress, source, include_forgotten
            )
    if as_json:
        echo_json(summary.as_dict())
    else:
        for line in summary.errors:
            click.echo(line, err=True)
        if not quiet:
            for line in summary.notes:  # no problems: what a reader said of a file it read
                click.echo(line, err=True)
            click.echo(
                f"{summary.files_seen} files: {summary.new} new, {summary.grown} grown, "
                f"{summary.rewritten} rewritten, {summary.skipped} unchanged, "
                f"{summary.empty} empty, {summary.failed} with problems; "
                f"{summary.messages} messages added to {summary.threads} threads"
                + (f" ({summary.known} read were stored already)" if summary.known else "")
            )
    sys.exit(0 if summary.ok else 1)


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option("--limit", type=int, default=None, help="Show at most N threads (newest first).")
@click.option(
    "--agent",
    metavar="NAME",
    help="Only threads of this agent (claude-code, codex, amp, gemini-cli, openai).",
)
@click.option("--since", type=SINCE, help="Only threads active since WHEN (ISO date, or 12h / 7d).")
@click.option("--project", metavar="TEXT", help="Only threads whose project path contains TEXT.")
@click.option(
    "--query", "-q", metavar="TEXT", help="Only threads whose id, title or project contains TEXT."
)
@click.option(
    "--wide",
    "-w",
    is_flag=True,
    help="Every column (full thread id, time, tool calls, models, token breakdown), in full.",
)
@row_formats
@pass_ctx
def threads(
    ctx: Context,
    as_json: bool,
    limit: int | None,
    agent: str | None,
    since,
    project: str | None,
    query: str | None,
    wide: bool,
) -> None:
    """List stored threads, newest first: title, counts, tokens and what the agent's calls cost
    ($, at the price table; `?` for a model it does not know).

    The table fits the terminal: a thread id is shortened to what tells it apart (a prefix
    `auditor show` takes, or SESSION/SUBAGENT), a project path keeps its end.
    """
    from ..store.threads import check_agent, empty_store_hint, list_threads
    from .render import threads_table

    if agent:
        check_agent(ctx.engine, agent, (f.agent for f in ctx.plugins.formats().values()))
    rows = list_threads(
        ctx.engine, limit=limit, agent=agent, since=since, project=project, query=query
    )
    if as_json:
        echo_json(rows)
    elif rows:
        threads_table(rows, wide=wide)
    if not rows:
        hint = empty_store_hint(ctx.engine)
        if hint or not as_json:
            click.echo(hint or "No thread matches these filters.", err=True)


@cli.command()
@click.argument("thread", required=False)
@click.option("--project", metavar="TEXT", help="Every thread whose project path contains TEXT.")
@click.option("--agent", metavar="NAME", help="Every thread of this agent.")
@click.option(
    "--samples", is_flag=True, help="The sample transcripts shipped with auditor (data/samples)."
)
@pass_ctx
def forget(
    ctx: Context, thread: str | None, project: str | None, agent: str | None, samples: bool
) -> None:
    """Remove THREAD (with its sub-agents), or every thread of --project, --agent or --samples,
    from the store: messages, usage, checkpoints, verdicts. A tombstone keeps each out of later
    ingests; `auditor ingest --include-forgotten PATHS` brings them back."""
    from ..store.forget import forget as forget_threads
    from ..store.forget import select_threads
    from ..store.threads import find_thread

    if not (thread or project or agent or samples):
        raise click.UsageError("say what to forget: give THREAD, --project, --agent or --samples")
    ids = [find_thread(ctx.engine, thread).id] if thread else []
    chosen = select_threads(
        ctx.engine, thread_ids=ids, project=project, agent=agent, samples=samples
    )
    if not chosen:
        click.echo("No thread matches: nothing forgotten.", err=True)
        return
    done = forget_threads(ctx.engine, chosen)
    click.echo(
        f"forgot {done.threads} thread{'s' if done.threads != 1 else ''} ({done.messages} "
        "messages); `auditor ingest --include-forgotten PATHS` brings them back"
    )


@cli.command()
@click.argument("thread")
@click.option("--full", is_flag=True, help="Do not shorten tool inputs and results.")
@click.option(
    "--no-pager", is_flag=True, help="Print straight to the terminal, not through $PAGER."
)
@click.option(
    "--no-redact",
    is_flag=True,
    help="Show secrets (keys, tokens, passwords) as the transcript has them, not [REDACTED:kind].",
)
@pass_ctx
def show(ctx: Context, thread: str, full: bool, no_pager: bool, no_redact: bool) -> None:
    """Render THREAD (database id, native id or a unique prefix) readably.

    At each checkpoint come the signals that fire there and every verdict given on it: what
    the observer said, what it cost, and whether the correction reached the agent. On a
    terminal the thread goes through $PAGER (less, which quits at once when it fits).
    Secrets are shown as [REDACTED:kind] (--no-redact shows them) and terminal control
    sequences in the transcript (a title, a screen clear) are left out.
    """
    from ..audit.checkpoint_plan import CheckpointPlanner
    from ..live.delivery import check_pending
    from ..store.threads import find_thread, load_messages
    from ..store.verdict_rows import checkpoint_notes
    from .render import paged, show_thread

    th = find_thread(ctx.engine, thread)
    messages = load_messages(ctx.engine, th.id)
    notes = checkpoint_notes(ctx.engine, CheckpointPlanner(ctx.plugins).signals, th, messages)
    check_pending(ctx.engine, [v for note in notes.values() for v in note.verdicts])
    with paged(not no_pager):
        show_thread(th, messages, full=full, notes=notes, redact=not no_redact)


@cli.command()
@click.argument("text", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option("--agent", metavar="NAME", help="Only threads of this agent.")
@click.option("--project", metavar="TEXT", help="Only threads whose project path contains TEXT.")
@click.option("--since", type=SINCE, help="Only messages since WHEN (ISO date, or 12h / 7d).")
@click.option("--limit", type=int, default=20, show_default=True, help="Show at most N messages.")
@row_formats
@pass_ctx
def search(
    ctx: Context,
    text: tuple[str, ...],
    as_json: bool,
    agent: str | None,
    project: str | None,
    since,
    limit: int,
) -> None:
    """Find the messages and tool results holding every word of TEXT (whole words, any case),
    newest first: thread, agent, time and the words around the match, secrets redacted.

    Messages ingested since the last search are found too; forgotten threads are not.
    """
    from ..redact import shown
    from ..store.search import search as search_store
    from ..store.search import snippet
    from ..store.threads import check_agent, short_ids
    from .render import search_table

    if agent:
        check_agent(ctx.engine, agent, (f.agent for f in ctx.plugins.formats().values()))
    query = " ".join(text)
    hits = search_store(
        ctx.engine, query, agent=agent, project=project, since=since, limit=max(limit, 0)
    )
    shorts = short_ids(ctx.engine, {h["native_id"] for h in hits})
    clean = shown(True)  # secrets redacted in the whole text, before any of it is cut
    words = query.split()
    rows = [
        {
            "thread": shorts[h["native_id"]],
            "thread_id": h["thread_id"],
            "message_id": h["message_id"],
            "agent": h["agent"],
            "time": h["time"],
            "role": h["role"],
            "project": h["project"],
            "snippet": snippet(clean(h["body"]), words),
        }
        for h in hits
    ]
    if as_json:
        echo_json(rows)
    elif rows:
        search_table(rows)
    if not rows and not as_json:
        click.echo(
            f"No message holds {query!r}"
            + (" with these filters." if (agent or project or since) else "."),
            err=True,
        )


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@row_formats
@pass_ctx
def observers(ctx: Context, as_json: bool) -> None:
    """List the observer backends: whose model each runs (its vendor), its default model, and
    whether it is usable now, else what to do. An agent CLI (claude-cli, codex-cli, gemini-cli)
    is ready when it is installed and logged in, found without a model call."""
    rows: list[dict[str, Any]] = []
    for name, obs in sorted(ctx.plugins.observers().items()):
        try:
            problem = obs.check({})
        except Exception as exc:  # noqa: BLE001 - a backend's check must not hide the others
            problem = f"{type(exc).__name__}: {exc}"
        rows.append(
            {
                "name": name,
                "vendor": getattr(getattr(obs, "needs", None), "vendor", None),
                "default_model": obs.default_model,
                "ready": problem is None,
                "problem": problem,
            }
        )
    if as_json:
        echo_json(rows)
        return
    import shutil
    import textwrap

    width = max(40, shutil.get_terminal_size().columns)
    for r in rows:
        click.echo(
            f"{r['name']:<10} {r['vendor'] or '?':<9} {r['default_model']:<28} "
            f"{'ready' if r['ready'] else 'not ready'}"
        )
        if not r["ready"]:  # what to do, wrapped under the row
            text = textwrap.fill(
                r["problem"], width, initial_indent="    ", subsequent_indent="    "
            )
            click.echo(text)


@cli.group()
def db() -> None:
    """Inspect or migrate the database."""


@db.command("path")
@click.option("--url", "as_url", is_flag=True, help="Print the SQLAlchemy URL instead.")
@pass_ctx
def db_path(ctx: Context, as_url: bool) -> None:
    """Print where the database is: the file of a SQLite store (`sqlite3 "$(auditor db path)"`
    opens it), else its URL. Passwords are hidden."""
    from sqlalchemy.engine import make_url

    from ..store.db import location, resolve_url

    url = resolve_url(ctx.db_option)
    click.echo(make_url(url).render_as_string(hide_password=True) if as_url else location(url))


@db.command("current")
@pass_ctx
def db_current(ctx: Context) -> None:
    """Print the schema revision of the database and the newest this code knows."""
    from ..store.db import create, current_revision, head_revision, resolve_url

    engine = create(resolve_url(ctx.db_option))
    click.echo(f"current: {current_revision(engine) or '(empty)'}")
    click.echo(f"head:    {head_revision()}")


@db.command("upgrade")
@pass_ctx
def db_upgrade(ctx: Context) -> None:
    """Migrate the database to the newest schema (also done automatically on open)."""
    from ..store.db import current_revision

    click.echo(f"at revision {current_revision(ctx.engine)}")


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
def plugins(ctx: Context, as_json: bool) -> None:
    """List installed plugins, their hooks, and the transcript formats they add."""
    pl = ctx.plugins
    infos = [vars(i) for i in pl.describe()]
    formats = {
        name: {"agent": f.agent, "appendable": f.appendable} for name, f in pl.formats().items()
    }
    failures = [vars(f) for f in pl.failures]
    if as_json:
        echo_json({"plugins": infos, "formats": formats, "failed": failures})
        return
    from .render import plugins_table

    plugins_table(infos, formats, failures)


for _command in (
    cli_audit.COMMANDS
    + cli_batch.COMMANDS
    + cli_reports.COMMANDS
    + cli_live.COMMANDS
    + cli_serve.COMMANDS
):
    cli.add_command(_command)


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    click.echo(f"Warning: {message}", err=True)


def main() -> None:
    import warnings

    warnings.showwarning = _show_warning
    cli(prog_name="auditor")
