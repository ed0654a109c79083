"""The `auditor` command line: a thin layer over the library."""

from __future__ import annotations

import functools
import sys
import traceback
from datetime import UTC

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
        self.config = None  # the config file (auditor.config.Config), read at start-up
        self.config_error = None  # why it could not be read, for commands that must not fail

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
    from .config import ConfigError, load

    try:
        ctx.obj.config = load()
    except ConfigError as exc:
        if ctx.invoked_subcommand not in ("hook", "config", "inject"):
            click.echo(f"Error: {exc}", err=True)
            sys.exit(2)
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
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option("--quiet", "-q", is_flag=True, help="Print only errors.")
@pass_ctx
@handle_errors
def ingest(
    ctx: Context, paths: tuple[str, ...], format_name: str | None, as_json: bool, quiet: bool
) -> None:
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
@click.option(
    "--agent",
    metavar="NAME",
    help="Only threads of this agent (claude-code, codex, amp, gemini-cli, openai).",
)
@click.option(
    "--wide",
    "-w",
    is_flag=True,
    help="Every column (full thread id, time, tool calls, models, token breakdown), in full.",
)
@pass_ctx
@handle_errors
def threads(ctx: Context, as_json: bool, limit: int | None, agent: str | None, wide: bool) -> None:
    """List stored threads, newest first, with counts and token totals.

    The table fits the terminal: a thread id is shortened to what tells it apart (a prefix
    `auditor show` takes, or SESSION/SUBAGENT), a project path keeps its end.
    """
    from .render import threads_table
    from .threads import check_agent, empty_store_hint, list_threads

    if agent:
        check_agent(ctx.engine, agent, (f.agent for f in ctx.plugins.formats().values()))
    rows = list_threads(ctx.engine, limit=limit, agent=agent)
    if as_json:
        _echo_json(rows)
    else:
        threads_table(rows, wide=wide)
    if not rows and (hint := empty_store_hint(ctx.engine)):
        click.echo(hint, err=True)


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
@handle_errors
def show(ctx: Context, thread: str, full: bool, no_pager: bool, no_redact: bool) -> None:
    """Render THREAD (database id, native id or a unique prefix) readably.

    At each checkpoint come the signals that fire there and every verdict given on it: what
    the observer said, what it cost, and whether the correction reached the agent. On a
    terminal the thread goes through $PAGER (less, which quits at once when it fits).
    Secrets are shown as [REDACTED:kind] (--no-redact shows them) and terminal control
    sequences in the transcript (a title, a screen clear) are left out.
    """
    from .render import paged, show_thread
    from .threads import find_thread, load_messages
    from .verdicts import checkpoint_notes

    th = find_thread(ctx.engine, thread)
    messages = load_messages(ctx.engine, th.id)
    notes = checkpoint_notes(ctx.engine, ctx.plugins, th, messages)
    with paged(not no_pager):
        show_thread(th, messages, full=full, notes=notes, redact=not no_redact)


def _parse_since(value: str | None):
    if not value:
        return None
    from datetime import datetime, timedelta

    units = {"m": 60, "h": 3600, "d": 86400, "w": 604800}
    if value[:-1].isdigit() and value[-1] in units:
        return datetime.now(UTC) - timedelta(seconds=int(value[:-1]) * units[value[-1]])
    try:
        dt = datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(
            f"{value!r}: use an ISO date (2026-11-01) or a span like 12h, 7d"
        ) from None
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


def observer_options(fn):
    """The options every command that calls an observer takes."""
    opts = [
        click.option(
            "--observer",
            "-o",
            metavar="NAME",
            help="Observer backend (see `auditor observers`). Default: $AUDITOR_OBSERVER, else gemini if GEMINI_API_KEY is set, else claude if ANTHROPIC_API_KEY is set, else the offline embedded model.",
        ),
        click.option("--model", "-m", help="Observer model (default: the backend's own)."),
        click.option(
            "--key",
            "api_key",
            metavar="KEY",
            help="API key (default: the provider's environment variable). Never stored.",
        ),
        click.option(
            "--base-url",
            help="Provider base URL (e.g. a local OpenAI-compatible server for --observer local).",
        ),
        click.option(
            "--max-retries",
            type=int,
            default=3,
            show_default=True,
            help="Retries on 429/5xx/timeouts, with backoff.",
        ),
        click.option(
            "--timeout",
            type=float,
            default=120.0,
            show_default=True,
            help="Seconds per observer call.",
        ),
    ]
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


def gate_options(fn):
    opts = [
        click.option(
            "--mode",
            type=click.Choice(["end-turn", "every-inference"]),
            default="end-turn",
            show_default=True,
            help="end-turn: audit where the agent ended its turn; every-inference: also after each round of tool results.",
        ),
        click.option(
            "--min-tool-calls",
            type=int,
            default=5,
            show_default=True,
            help="Gate: tool calls needed since the last user message.",
        ),
        click.option(
            "--no-require-edit",
            is_flag=True,
            help="Gate: audit even when no file was edited since the last user message.",
        ),
        click.option(
            "--include-sidechains", is_flag=True, help="Gate: audit subagent threads too."
        ),
        click.option(
            "--project",
            "projects",
            multiple=True,
            metavar="PATH",
            help="Gate: only threads whose cwd starts with PATH (repeatable).",
        ),
        click.option(
            "--agent",
            "agents",
            multiple=True,
            metavar="NAME",
            help="Gate: only threads of these agents (repeatable).",
        ),
    ]
    for opt in reversed(opts):
        fn = opt(fn)
    return prompt_token_options(fn)


def prompt_token_options(fn):
    opts = [
        click.option(
            "--min-prompt-tokens",
            type=int,
            default=None,
            help="Formatter: token budget of a turn without tool calls (default 8000); it grows by 60 tokens for each tool call of the turn being judged.",
        ),
        click.option(
            "--max-prompt-tokens",
            type=int,
            default=None,
            help="Formatter: the most tokens the rendered thread may take (default 24000).",
        ),
    ]
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


def formatter_config(min_prompt_tokens: int | None, max_prompt_tokens: int | None) -> dict:
    """Return the formatter's budget options given on the command line."""
    pairs = (("min_tokens", min_prompt_tokens), ("max_tokens", max_prompt_tokens))
    return {key: value for key, value in pairs if value}


def _gate_config(
    mode, min_tool_calls, no_require_edit, include_sidechains, projects, agents
) -> dict:
    return {
        "mode": mode,
        "min_tool_calls": min_tool_calls,
        "require_edit": not no_require_edit,
        "include_sidechains": include_sidechains,
        "projects": list(projects) or None,
        "agents": list(agents) or None,
    }


@cli.command()
@observer_options
@gate_options
@click.option(
    "--thread", "threads", multiple=True, metavar="THREAD", help="Only this thread (repeatable)."
)
@click.option(
    "--since", metavar="WHEN", help="Only threads active since WHEN (ISO date, or 12h / 7d)."
)
@click.option("--limit", type=int, help="Make at most N observer calls.")
@click.option(
    "--concurrency",
    "-j",
    type=int,
    default=4,
    show_default=True,
    help="Observer calls in flight at once.",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Gate and format only: print how many checkpoints pass and the estimated tokens and cost, calling no model.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option(
    "--every",
    metavar="SPAN",
    help="Repeat until Ctrl-C: ingest the sources, then run, every SPAN (15m, 1h, 90s).",
)
@click.option(
    "--source",
    "sources",
    multiple=True,
    type=click.Path(),
    metavar="PATH",
    help="With --every: ingest PATH on each tick (repeatable; default: `sources` in the config file).",
)
@click.option(
    "--signal",
    "signal_options",
    multiple=True,
    metavar="NAME.KEY=VALUE",
    help="Signal option, e.g. tool-loop.min_repeats=4; NAME=off turns a signal off (repeatable; see docs/plugins.md).",
)
@click.option(
    "--audit-on",
    "audit_on",
    multiple=True,
    metavar="SIGNAL",
    help="Gate: always audit where SIGNAL fires, under the thresholds too (repeatable; default: claimed-success-after-failure; `none` for none).",
)
@click.option(
    "--skip-quiet-below",
    type=int,
    default=0,
    show_default=True,
    metavar="N",
    help="Gate: skip checkpoints where no signal fired and fewer than N files were edited (0: off).",
)
@click.option(
    "--critique",
    is_flag=True,
    help="Second pass: where the observer stayed silent but a signal scored high, ask it again with a more critical prompt (a separate verdict, with its own cost).",
)
@click.option(
    "--critique-min-score",
    type=float,
    default=0.7,
    show_default=True,
    help="With --critique: the signal score that calls for a second pass.",
)
@click.option(
    "--budget",
    type=float,
    metavar="USD",
    help="Spend at most USD on this run: no observer call starts whose estimate (prompt tokens and the answer's max tokens at the model's price) would cross it.",
)
@click.option(
    "--budget-per-day",
    type=float,
    metavar="USD",
    help="Spend at most USD on verdicts recorded since midnight UTC, by any run (config: budget_per_day in [run]).",
)
@click.option(
    "--allow-unpriced",
    is_flag=True,
    help="Under a budget, still call a model the price table does not know (its cost counts as unknown).",
)
@click.option(
    "--batch",
    is_flag=True,
    help="Through the provider's batch API (gemini, claude), at the batch price: record the answers of finished batches, then submit the checkpoints that still need one. Run it again later to collect.",
)
@click.option(
    "--collect",
    is_flag=True,
    help="Only record the answers of finished batches; submit nothing.",
)
@click.option(
    "--batch-size",
    type=click.IntRange(min=1),
    default=1000,
    show_default=True,
    help="With --batch: at most N requests a batch.",
)
@pass_ctx
@handle_errors
def run(
    ctx: Context,
    observer,
    model,
    api_key,
    base_url,
    max_retries,
    timeout,
    mode,
    min_tool_calls,
    no_require_edit,
    include_sidechains,
    projects,
    agents,
    min_prompt_tokens,
    max_prompt_tokens,
    threads,
    since,
    limit,
    concurrency,
    dry_run,
    as_json,
    every,
    sources,
    signal_options,
    audit_on,
    skip_quiet_below,
    critique,
    critique_min_score,
    budget,
    budget_per_day,
    allow_unpriced,
    batch,
    collect,
    batch_size,
) -> None:
    """Audit stored threads: gate -> format -> observe -> record.

    Every checkpoint's gate decision is recorded with its reason; every observer call is
    recorded with its verdict, raw answer, tokens and cost. Re-running never pays twice for
    a checkpoint already answered with the same observer, model, prompt and thread content,
    and a run stopped at any moment keeps every answer it had. Runs at the same time over one
    database share the work: each observer call is leased to one of them.

    With --every, ingest + run repeat on a schedule; the first Ctrl-C lets the calls in
    flight finish and stops, a second one stops at once.
    """
    import shlex
    import signal

    from .render import interrupted_lines, run_progress, run_summary
    from .run import RunConfig, RunInterrupted
    from .run import run as run_audit

    options = {"max_retries": max_retries}
    if api_key:
        options["api_key"] = api_key
    if base_url:
        options["base_url"] = base_url
    config = RunConfig(
        observer=observer,
        model=model,
        observer_options=options,
        threads=list(threads),
        since=_parse_since(since),
        limit=limit,
        concurrency=concurrency,
        timeout=timeout,
        dry_run=dry_run,
        gate=_gate_config(
            mode, min_tool_calls, no_require_edit, include_sidechains, projects, agents
        ),
        formatter=formatter_config(min_prompt_tokens, max_prompt_tokens),
    )
    from .signals import parse_options

    config.signals = parse_options(signal_options)
    config.critique, config.critique_min_score = critique, critique_min_score
    config.budget, config.budget_per_day = budget, budget_per_day
    config.allow_unpriced = allow_unpriced
    config.batch, config.collect, config.batch_size = batch, collect, batch_size
    if audit_on:
        config.gate["audit_on_signals"] = [a for a in audit_on if a.lower() != "none"]
    config.gate["skip_quiet_below_edits"] = skip_quiet_below

    if every:
        from .schedule import run_every

        paths = list(sources) or (ctx.config.sources if ctx.config else [])
        try:
            run_every(
                ctx.engine,
                ctx.plugins,
                config,
                every,
                paths,
                report=lambda line: click.echo(line, err=True),
            )
        except KeyboardInterrupt:
            click.echo("Stopped at once: every answer received so far is stored.", err=True)
            sys.exit(130)
        sys.exit(0)

    def _terminate(signum, frame):
        # As Ctrl-C: inside the event loop, asyncio's SIGINT handler cancels the run cleanly.
        signal.raise_signal(signal.SIGINT)

    signal.signal(signal.SIGTERM, _terminate)
    interrupted = None
    with run_progress(
        enabled=not as_json and not dry_run and not batch and not collect
    ) as progress:
        try:
            summary = run_audit(ctx.engine, ctx.plugins, config, progress)
        except RunInterrupted as exc:
            interrupted = exc.summary
        except KeyboardInterrupt:  # before the run started
            click.echo("Interrupted before the run started; nothing was sent.", err=True)
            sys.exit(130)
    if interrupted is not None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # a second Ctrl-C ends the process at once
        if as_json:
            _echo_json(interrupted.as_dict())
        else:
            run_summary(interrupted, False)
        command = shlex.join(["auditor", *sys.argv[1:]])
        click.echo(interrupted_lines(interrupted, command), err=True)
        sys.exit(130)
    if as_json:
        _echo_json(summary.as_dict())
    else:
        for line in summary.messages:
            click.echo(line, err=True)
        run_summary(summary, dry_run)
        if not summary.checkpoints:
            from .threads import empty_store_hint

            if hint := empty_store_hint(ctx.engine):
                click.echo(hint, err=True)
        if critique:
            click.echo(
                f"critique: {summary.critique_candidates} checkpoints with strong signals; "
                f"{summary.critiques} second passes, {summary.critique_corrections} corrections"
            )
    sys.exit(1 if summary.errors else 0)


@cli.command()
@click.argument("thread")
@click.option(
    "--at",
    "at",
    required=True,
    metavar="MESSAGE_ID",
    help="Native id of the message the checkpoint ends at (e.g. a Claude Code uuid).",
)
@prompt_token_options
@click.option("--mode", type=click.Choice(["end-turn", "every-inference"]), default="end-turn")
@pass_ctx
@handle_errors
def prompt(ctx: Context, thread: str, at: str, min_prompt_tokens, max_prompt_tokens, mode) -> None:
    """Print the exact system prompt and user content the observer would get at a checkpoint."""
    from .checkpoints import checkpoint_at
    from .errors import UnknownName
    from .plan import plan
    from .prompt import load_prompt
    from .threads import find_thread, load_messages

    th = find_thread(ctx.engine, thread)
    messages = load_messages(ctx.engine, th.id)
    try:
        cp = checkpoint_at(th.id, messages, at, mode)
    except KeyError:
        raise UnknownName(f"message of thread {th.native_id}", at, []) from None
    with ctx.engine.connect() as conn:
        p = plan(
            conn,
            ctx.plugins,
            cp,
            th,
            messages,
            gate={"mode": mode},
            formatter=formatter_config(min_prompt_tokens, max_prompt_tokens),
            signals={},
            render=True,
        )
    system = load_prompt()
    signals, decision, user = p.signals, p.decision, p.user
    click.echo(
        f"<!-- prompt {system.version} sha256:{system.sha256[:16]}; gate: {decision.reason} -->",
        err=True,
    )
    from .signals import format_signals

    click.echo("<!-- signals: " + "; ".join(format_signals(signals)) + " -->", err=True)
    click.echo("=== system ===")
    click.echo(system.text)
    click.echo("=== user ===")
    click.echo(user)


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
@handle_errors
def observers(ctx: Context, as_json: bool) -> None:
    """List installed observer backends, their default models, and whether each is usable now."""
    rows = []
    for name, obs in sorted(ctx.plugins.observers().items()):
        try:
            problem = obs.check({})
        except Exception as exc:  # a backend's check must not hide the others
            problem = f"{type(exc).__name__}: {exc}"
        rows.append(
            {
                "name": name,
                "default_model": obs.default_model,
                "ready": problem is None,
                "problem": problem,
            }
        )
    if as_json:
        _echo_json(rows)
        return
    for r in rows:
        state = "ready" if r["ready"] else r["problem"]
        click.echo(f"{r['name']:<10} {r['default_model']:<28} {state}")


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option(
    "--type",
    "types",
    multiple=True,
    metavar="TYPE",
    help="Only events of this type (repeatable): ingested, gated, audited, critiqued, corrected, injected, injection-failed, run-started, run-finished, error.",
)
@click.option(
    "--limit",
    type=int,
    default=50,
    show_default=True,
    help="Show at most N events, newest first (0: all).",
)
@click.option("--thread", metavar="THREAD", help="Only events about this thread.")
@click.option("--run", "run_id", type=int, metavar="ID", help="Only events of this run.")
@click.option("--since", metavar="WHEN", help="Only events since WHEN (ISO date, or 12h / 7d).")
@pass_ctx
@handle_errors
def events(ctx: Context, as_json: bool, types, limit: int, thread, run_id, since) -> None:
    """Show the event log: what auditor did (ingested, gated, audited, corrected...), newest first."""
    from .events import format_event, list_events
    from .threads import find_thread

    thread_id = find_thread(ctx.engine, thread).id if thread else None
    rows = list_events(
        ctx.engine, list(types), limit or None, _parse_since(since), thread_id, run_id
    )
    if as_json:
        _echo_json(rows)
        return
    for row in rows:
        click.echo(format_event(row))


@cli.command()
@click.option(
    "--corrections", "-c", is_flag=True, help="Only verdicts that asked for a correction."
)
@click.option("--thread", metavar="THREAD", help="Only verdicts on this thread.")
@click.option("--observer", "-o", metavar="NAME", help="Only this observer's verdicts.")
@click.option("--model", "-m", metavar="MODEL", help="Only this observer model's verdicts.")
@click.option("--run", "run_id", type=int, metavar="ID", help="Only verdicts of this run.")
@click.option("--since", metavar="WHEN", help="Only verdicts since WHEN (ISO date, or 12h / 7d).")
@click.option(
    "--query", "-q", metavar="TEXT", help="Only verdicts whose message or problem contains TEXT."
)
@click.option(
    "--status",
    type=click.Choice(["ok", "invalid", "error"]),
    help="Only answers (ok), answers that broke the contract (invalid) or failed calls (error).",
)
@click.option(
    "--limit",
    "-n",
    type=int,
    default=10,
    show_default=True,
    help="Show at most N verdicts, newest first (0: all).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
@handle_errors
def verdicts(
    ctx: Context, corrections, thread, observer, model, run_id, since, query, status, limit, as_json
) -> None:
    """Show what the observers said, newest first: each verdict with its thread and checkpoint,
    the message, the cost, and whether the correction reached the agent.

    `auditor verdicts -c` lists the corrections; `auditor show THREAD` shows them in place.
    """
    from .threads import empty_store_hint, find_thread
    from .verdicts import format_verdict, list_verdicts

    rows = list_verdicts(
        ctx.engine,
        corrections=corrections,
        thread_id=find_thread(ctx.engine, thread).id if thread else None,
        observer=observer,
        model=model,
        run_id=run_id,
        since=_parse_since(since),
        query=query,
        status=status,
        limit=limit or None,
    )
    if as_json:
        _echo_json(rows)
    elif rows:
        click.echo("\n\n".join(format_verdict(v) for v in rows))
    if not rows and not as_json:
        filtered = any((corrections, thread, observer, model, run_id, since, query, status))
        hint = empty_store_hint(ctx.engine) or (
            "No verdict matches these filters."
            if filtered
            else "No verdicts yet: `auditor run` audits the stored threads."
        )
        click.echo(hint, err=True)


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option(
    "--limit",
    type=int,
    default=20,
    show_default=True,
    help="Show at most N runs, newest first (0: all).",
)
@pass_ctx
@handle_errors
def runs(ctx: Context, as_json: bool, limit: int) -> None:
    """List audit runs, newest first: status, totals, cost. A run killed before it could finish
    is shown as interrupted, with when it was last heard of."""
    from .runs import list_runs

    rows = list_runs(ctx.engine, limit or None)
    if as_json:
        _echo_json(rows)
        return
    from .render import runs_table

    runs_table(rows)


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

    from .db import location, resolve_url

    url = resolve_url(ctx.db_option)
    click.echo(make_url(url).render_as_string(hide_password=True) if as_url else location(url))


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
    formats = {
        name: {"agent": f.agent, "appendable": f.appendable} for name, f in pl.formats().items()
    }
    failures = [vars(f) for f in pl.failures]
    if as_json:
        _echo_json({"plugins": infos, "formats": formats, "failed": failures})
        return
    from .render import plugins_table

    plugins_table(infos, formats, failures)


def _add_commands() -> None:
    from . import cli_live, cli_reports

    for command in cli_reports.COMMANDS + cli_live.COMMANDS:
        cli.add_command(command)


_add_commands()


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    click.echo(f"Warning: {message}", err=True)


def main() -> None:
    import warnings

    warnings.showwarning = _show_warning
    cli(prog_name="auditor")
