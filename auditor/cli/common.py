"""What every `auditor` command shares: the context, the error handling, the parameter types
and the observer/gate options. The command modules import this one and never each other."""

from __future__ import annotations

import contextvars
import functools
import traceback
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import click
import orjson

from ..errors import AuditorError

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from ..audit.run_types import RunConfig
    from ..plugins import Plugins
    from ..store.sql_text import SqliteStore, SqliteWriter


class Context:
    """Per-invocation state: the database option and lazily opened resources."""

    def __init__(self, db: str | None, debug: bool):
        self.db_option = db
        self.debug = debug
        self._engine: Engine | None = None
        self._plugins: Plugins | None = None
        self.config = None  # the config file (auditor.config.Config), read at start-up
        self.config_error = None  # why it could not be read, for commands that must not fail

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            from ..store.db import open_db

            self._engine = open_db(self.db_option)
        return self._engine

    @property
    def writer(self) -> Engine | SqliteWriter:
        """The store for an ingest: through sqlite3 alone when it is a SQLite file at the
        current schema or a new one, else the engine."""
        if self._engine is not None:
            return self._engine
        from ..store.db import open_for_writing

        return open_for_writing(self.db_option)

    @property
    def reader(self) -> Engine | SqliteStore:
        """The store for a report that reads (and refreshes its sums): through sqlite3 alone
        when it is a SQLite file at the current schema, else the engine."""
        if self._engine is not None:
            return self._engine
        from ..store.db import open_for_reading

        return open_for_reading(self.db_option)

    @property
    def plugins(self) -> Plugins:
        if self._plugins is None:
            from ..plugins import get_plugin_manager

            self._plugins = get_plugin_manager()
        return self._plugins


pass_ctx = click.make_pass_decorator(Context)


class CommandError(click.ClickException):
    """An AuditorError as click shows it: `Error: MESSAGE` on stderr, exit status 2."""

    exit_code = 2


class AuditorGroup(click.Group):
    """The root group: an AuditorError raised by any command below it becomes one line on
    stderr and exit status 2 (with its traceback first under --debug)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except AuditorError as exc:
            state = ctx.find_object(Context)
            if state is not None and state.debug:
                traceback.print_exc()
            raise CommandError(str(exc)) from exc
        except Exception as exc:
            # The store failing under any command (a full disk, a server restarted): one line.
            from ..store.db import store_trouble

            state = ctx.find_object(Context)
            line = store_trouble(exc, state.db_option if state is not None else None)
            if line is None:
                raise
            if state is not None and state.debug:
                traceback.print_exc()
            raise CommandError(line) from exc


# How a listing prints its rows when asked for data rather than a table: json (one indented
# document), csv or nl (one JSON object a line). Set by `row_formats` for the command running.
_ROWS_AS: contextvars.ContextVar[str] = contextvars.ContextVar("auditor_rows_as", default="json")


def echo_json(value: Any) -> None:
    """Print `value` as indented JSON, or a list of rows as CSV or JSON lines under `--csv` and
    `--nl` (`row_formats`)."""
    how = _ROWS_AS.get()
    if how == "json" or not isinstance(value, list):
        option = orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS
        click.echo(orjson.dumps(value, option=option).decode())
    elif how == "nl":
        for row in value:
            click.echo(orjson.dumps(row, option=orjson.OPT_NON_STR_KEYS).decode())
    else:
        click.echo(_csv(value), nl=False)


def _csv(rows: list) -> str:
    """Rows (dicts) as CSV with a header: nested values as JSON, None empty, booleans lower."""
    import csv
    import io

    columns: dict[str, None] = {}
    for row in rows:
        columns.update(dict.fromkeys(row))

    def cell(value: Any) -> Any:
        if value is None:
            return ""
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, dict | list):
            return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()
        return value

    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([cell(row.get(c)) for c in columns])
    return out.getvalue()


def row_formats(fn):
    """Add --csv and --nl to a listing that has --json (its `as_json` parameter): the same rows
    as CSV, or as one JSON object a line."""

    @click.option("--nl", "as_nl", is_flag=True, help="Print one JSON object a line.")
    @click.option("--csv", "as_csv", is_flag=True, help="Print CSV with a header row.")
    @functools.wraps(fn)
    def wrapper(*args, as_csv: bool, as_nl: bool, **kwargs):
        if as_csv and as_nl:
            raise click.UsageError("--csv and --nl do not go together: choose one")
        if not (as_csv or as_nl):
            return fn(*args, **kwargs)
        token = _ROWS_AS.set("csv" if as_csv else "nl")
        try:
            return fn(*args, **{**kwargs, "as_json": True})
        finally:
            _ROWS_AS.reset(token)

    return wrapper


class Duration(click.ParamType):
    """A span of time: 90s, 15m, 12h, 7d, 2w (see `auditor.durations`)."""

    name = "duration"

    def convert(self, value: Any, param, ctx) -> timedelta:
        if isinstance(value, timedelta):
            return value
        from ..durations import parse_duration

        try:
            return parse_duration(value)
        except AuditorError as exc:
            self.fail(str(exc), param, ctx)


class Since(click.ParamType):
    """A point in time: an ISO date or time (UTC), or a Duration back from now."""

    name = "when"

    def convert(self, value: Any, param, ctx) -> datetime:
        if isinstance(value, datetime):
            return value
        from ..durations import parse_since

        try:
            return parse_since(value)
        except AuditorError as exc:
            self.fail(str(exc), param, ctx)


class Until(click.ParamType):
    """An end in time: an ISO date (up to the end of that day) or time, UTC."""

    name = "when"

    def convert(self, value: Any, param, ctx) -> datetime | None:
        if isinstance(value, datetime):
            return value
        from ..reports import parse_until

        try:
            return parse_until(value)
        except AuditorError as exc:
            self.fail(str(exc), param, ctx)


DURATION, SINCE, UNTIL = Duration(), Since(), Until()


def _apply(fn, options: list):
    for opt in reversed(options):
        fn = opt(fn)
    return fn


def observer_options(fn):
    """The options every command that calls an observer takes."""
    return _apply(
        fn,
        [
            click.option(
                "--observer",
                "-o",
                metavar="NAME",
                help="Observer backend (see `auditor observers`). Default: $AUDITOR_OBSERVER, else for each agent's threads the first ready observer of another vendor than the agent's: an API key (gemini, claude), then a logged-in CLI (gemini-cli, claude-cli, codex-cli), then the offline embedded model.",
            ),
            click.option(
                "--allow-same-vendor",
                is_flag=True,
                help="When only an observer of the agent's own vendor is ready, let it audit that agent's threads (recorded on the verdicts) instead of leaving them unaudited.",
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
                show_default=True,  # shows a config file's value; without one, the help says
                help="Seconds per observer call (default: what the observer suits: 120, the "
                "embedded model 600).",
            ),
        ],
    )


def mode_option(fn):
    """--mode: which checkpoints there are."""
    return click.option(
        "--mode",
        type=click.Choice(["end-turn", "every-inference"]),
        default="end-turn",
        show_default=True,
        help="end-turn: audit where the agent ended its turn; every-inference: also after each round of tool results.",
    )(fn)


def gate_options(fn):
    """The gate's options, with --mode and the formatter's token budget."""
    fn = prompt_token_options(fn)
    return mode_option(
        _apply(
            fn,
            [
                click.option(
                    "--min-tool-calls",
                    type=int,
                    default=None,
                    show_default=True,  # shows a config file's value; without one, the help says
                    help="Gate: tool calls needed since the last user message (default 5 in "
                    "end-turn mode; 0 in every-inference mode, which looks after every round).",
                ),
                click.option(
                    "--require-edit/--no-require-edit",
                    default=None,
                    show_default=True,
                    help="Gate: audit only when a file was edited since the last user message "
                    "(default: on in end-turn mode, off in every-inference mode).",
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
            ],
        )
    )


def prompt_token_options(fn):
    """The formatter's token budget."""
    return _apply(
        fn,
        [
            click.option(
                "--min-prompt-tokens",
                type=int,
                default=None,
                help="Formatter: token budget of a turn without tool calls (default 7500); it grows by 60 tokens for each tool call of the turn being judged.",
            ),
            click.option(
                "--max-prompt-tokens",
                type=int,
                default=None,
                help="Formatter: the most tokens the rendered thread may take (default 24000).",
            ),
        ],
    )


def formatter_config(min_prompt_tokens: int | None, max_prompt_tokens: int | None) -> dict:
    """Return the formatter's budget options given on the command line."""
    pairs = (("min_tokens", min_prompt_tokens), ("max_tokens", max_prompt_tokens))
    return {key: value for key, value in pairs if value}


_RUN_PARAMS = (
    "observer",
    "allow_same_vendor",
    "model",
    "api_key",
    "base_url",
    "max_retries",
    "timeout",
    "mode",
    "min_tool_calls",
    "require_edit",
    "include_sidechains",
    "projects",
    "agents",
    "min_prompt_tokens",
    "max_prompt_tokens",
)


def run_config(
    *,
    observer: str | None,
    allow_same_vendor: bool,
    model: str | None,
    api_key: str | None,
    base_url: str | None,
    max_retries: int,
    timeout: float | None,
    mode: str,
    min_tool_calls: int | None,
    require_edit: bool | None,
    include_sidechains: bool,
    projects: tuple[str, ...],
    agents: tuple[str, ...],
    min_prompt_tokens: int | None,
    max_prompt_tokens: int | None,
) -> RunConfig:
    """Return the RunConfig of the observer, gate and formatter options."""
    from ..audit.run_types import RunConfig

    options: dict[str, Any] = {"max_retries": max_retries}
    if api_key:
        options["api_key"] = api_key
    if base_url:
        options["base_url"] = base_url
    return RunConfig(
        observer=observer,
        allow_same_vendor=allow_same_vendor,
        model=model,
        observer_options=options,
        timeout=timeout,
        gate={
            "mode": mode,
            "min_tool_calls": min_tool_calls,
            "require_edit": require_edit,
            "include_sidechains": include_sidechains,
            "projects": list(projects) or None,
            "agents": list(agents) or None,
        },
        formatter=formatter_config(min_prompt_tokens, max_prompt_tokens),
    )


def run_options(fn):
    """Add the observer, gate and formatter options; the command gets them as one
    `config` argument, a RunConfig built by `run_config`."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        values = {name: kwargs.pop(name) for name in _RUN_PARAMS}
        return fn(*args, config=run_config(**values), **kwargs)

    return observer_options(gate_options(wrapper))
