"""The `auditor` command line: a thin layer over the library."""

from __future__ import annotations

import functools
import sys
import traceback

import click
import orjson

from . import __version__
from .errors import AuditorError


class Context:
    """Per-invocation state: the database option and lazily opened resources."""

    def __init__(self, db: str | None, debug: bool):
        self.db_option = db
        self.debug = debug
        self._engine = None
        self._plugins = None

    @property
    def engine(self):
        if self._engine is None:
            from .db import open_db

            self._engine = open_db(self.db_option)
        return self._engine

    @property
    def plugins(self):
        if self._plugins is None:
            from .plugins import get_plugin_manager

            self._plugins = get_plugin_manager()
        return self._plugins


pass_ctx = click.make_pass_decorator(Context)


def _echo_json(value) -> None:
    click.echo(orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode())


def handle_errors(fn):
    """Turn AuditorError into one line on stderr and exit 2 (traceback with --debug)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except AuditorError as exc:
            ctx = click.get_current_context().find_object(Context)
            if ctx is not None and ctx.debug:
                traceback.print_exc()
            click.echo(f"Error: {exc}", err=True)
            sys.exit(2)

    return wrapper


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
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


@cli.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--format", "format_name", metavar="NAME", help="Force a transcript format instead of detecting it (see `auditor plugins`).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option("--quiet", "-q", is_flag=True, help="Print only errors.")
@pass_ctx
@handle_errors
def ingest(ctx: Context, paths: tuple[str, ...], format_name: str | None, as_json: bool, quiet: bool) -> None:
    """Read transcripts under PATHS into the store, incrementally.

    PATHS are files or directories (walked for *.jsonl and *.json). Files already read and
    unchanged are skipped; files that grew are read from where the last ingest stopped.
    Problems are printed one per line as FILE:LINE: MESSAGE and kept in the ingest_errors
    table. Exit status: 0 when every file was read, 1 when any file had a problem.
    """
    from .ingest import ingest as run_ingest
    from .render import ingest_progress

    engine, plugins = ctx.engine, ctx.plugins
    with ingest_progress(enabled=not (as_json or quiet)) as progress:
        summary = run_ingest(engine, plugins, paths, format_name, progress)
    if as_json:
        _echo_json(summary.as_dict())
    else:
        for line in summary.errors:
            click.echo(line, err=True)
        if not quiet:
            click.echo(
                f"{summary.files_seen} files: {summary.new} new, {summary.grown} grown, "
                f"{summary.rewritten} rewritten, {summary.skipped} unchanged, "
                f"{summary.empty} empty, {summary.failed} with problems; "
                f"{summary.messages} messages added to {summary.threads} threads"
            )
    sys.exit(0 if summary.ok else 1)


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option("--limit", type=int, default=None, help="Show at most N threads (newest first).")
@click.option("--agent", help="Only threads of this agent (claude-code, codex, amp, openai).")
@pass_ctx
@handle_errors
def threads(ctx: Context, as_json: bool, limit: int | None, agent: str | None) -> None:
    """List stored threads, newest first, with counts and token totals."""
    from .render import threads_table
    from .threads import list_threads

    rows = list_threads(ctx.engine, limit=limit, agent=agent)
    if as_json:
        _echo_json(rows)
    else:
        threads_table(rows)


@cli.command()
@click.argument("thread")
@click.option("--full", is_flag=True, help="Do not shorten tool inputs and results.")
@pass_ctx
@handle_errors
def show(ctx: Context, thread: str, full: bool) -> None:
    """Render THREAD (database id, native id or a unique prefix) readably."""
    from .render import show_thread
    from .threads import find_thread, load_messages

    th = find_thread(ctx.engine, thread)
    show_thread(th, load_messages(ctx.engine, th.id), full=full)


@cli.group()
def db() -> None:
    """Inspect or migrate the database."""


@db.command("path")
@pass_ctx
def db_path(ctx: Context) -> None:
    """Print the database URL in use."""
    from sqlalchemy.engine import make_url

    from .db import resolve_url

    click.echo(make_url(resolve_url(ctx.db_option)).render_as_string(hide_password=True))


@db.command("current")
@pass_ctx
@handle_errors
def db_current(ctx: Context) -> None:
    """Print the schema revision of the database and the newest this code knows."""
    from .db import create, current_revision, head_revision, resolve_url

    engine = create(resolve_url(ctx.db_option))
    click.echo(f"current: {current_revision(engine) or '(empty)'}")
    click.echo(f"head:    {head_revision()}")


@db.command("upgrade")
@pass_ctx
@handle_errors
def db_upgrade(ctx: Context) -> None:
    """Migrate the database to the newest schema (also done automatically on open)."""
    from .db import current_revision

    click.echo(f"at revision {current_revision(ctx.engine)}")


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
@handle_errors
def plugins(ctx: Context, as_json: bool) -> None:
    """List installed plugins, their hooks, and the transcript formats they add."""
    pl = ctx.plugins
    infos = [vars(i) for i in pl.describe()]
    formats = {name: {"agent": f.agent, "appendable": f.appendable} for name, f in pl.formats().items()}
    failures = [vars(f) for f in pl.failures]
    if as_json:
        _echo_json({"plugins": infos, "formats": formats, "failed": failures})
        return
    from .render import plugins_table

    plugins_table(infos, formats, failures)


def main() -> None:
    cli(prog_name="auditor")
