"""Commands for live re-injection (`auditor hook ...`, `inject`, `config`)."""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path

import click

from ..live.sync_hook import DEADLINE, LAG_WAIT
from .common import Context, echo_json, pass_ctx, run_options

COMMANDS: list = []


class HookGroup(click.Group):
    """`auditor hook`: install, status, and one event command per agent that a transcript
    format declares live hooks for (`LiveHooks`), made when it is asked for."""

    def _agents(self, ctx: click.Context) -> list[str]:
        from ..live.fast_path import AGENT_EVENTS

        found = ctx.find_object(Context)
        try:
            if found is None:
                from ..plugins import get_plugin_manager

                return sorted(get_plugin_manager().live_agents())
            return sorted(found.plugins.live_agents())
        except Exception:  # noqa: BLE001 - the hook must run to record what is wrong (fail open)
            return list(AGENT_EVENTS)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *self._agents(ctx)})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is None and cmd_name in self._agents(ctx):
            from ..config import EVENT_COMMANDS

            command = _event_command(cmd_name)
            # Every agent's event command has the same defaults (the config's [hook] section).
            command.context_settings["default_map"] = (ctx.default_map or {}).get(EVENT_COMMANDS)
        return command


@click.group(cls=HookGroup)
def hook() -> None:
    """Agent hooks: audit the agent's turns while it works and hand it the corrections.

    Install with `auditor hook install claude-code` (or `codex`, `gemini-cli`); the agent then
    runs `auditor hook AGENT` after each tool round, when the user writes and when it stops.
    """


def _deadline_options(command):
    """The options of the hooks that audit: the deadline, the loop guard, the transcript lag."""
    command = click.option(
        "--lag-wait",
        type=float,
        default=LAG_WAIT,
        show_default=True,
        help="Seconds to wait for a transcript file that lags behind the hook input.",
    )(command)
    command = click.option(
        "--max-corrections",
        type=int,
        default=2,
        show_default=True,
        help="Corrections in a row between two messages the user typed.",
    )(command)
    return click.option(
        "--deadline",
        type=float,
        default=DEADLINE,
        show_default=True,
        help="Seconds the whole hook may take; past it the agent stops normally and the miss is recorded.",
    )(command)


def _event_command(agent: str) -> click.Command:
    """`auditor hook AGENT`: the event command the agent runs (its handlers' modes as flags,
    as `auditor hook install` writes them into the agent's settings)."""
    help_text = f"""The {agent} hook: note the event, audit in the background, hand over corrections.

    Reads the hook input (JSON) on stdin, or as PAYLOAD, and returns without waiting for the
    observer. After a tool round (PostToolUse) or at the end of a turn (Stop) the new tail of
    the transcript is read into the store and the checkpoint goes through the gate and the
    observer in a background worker, all recorded like `auditor run`. A correction already
    finished, if the loop guards let it through, goes out as hook context at the next tool
    round, or at a stop as {{"decision": "block", "reason": MESSAGE}}. When the user writes
    (UserPromptSubmit), the audits under way are cancelled. With --sync the Stop hook audits
    while the agent waits, up to --deadline. Exits 0 (--rewake: 2 with a correction): any
    error, a missing key or a deadline passed lets the agent go on and is recorded.
    """

    @click.command(agent, help=help_text)
    @click.argument("payload", required=False)
    @run_options
    @_deadline_options
    @click.option(
        "--verbose",
        "-v",
        is_flag=True,
        help="Say on stderr what the hook did and how long each step took.",
    )
    @click.option(
        "--sync",
        is_flag=True,
        help="Audit in the hook itself and answer with its correction (the agent waits for the "
        "observer, up to --deadline); without it the hook returns at once and audits in the "
        "background.",
    )
    @click.option(
        "--rewake",
        is_flag=True,
        help="Claude Code's asyncRewake Stop handler: wait in the background for the end-of-turn "
        "audit and exit 2 with its correction on stderr, unless the user wrote first.",
    )
    @click.option(
        "--wait",
        is_flag=True,
        help="The Stop handler of Codex (Gemini CLI: AfterAgent): record the stop, wait (up to "
        '--deadline) for its end-of-turn audit and answer with its correction as {"decision": '
        '"block"}.',
    )
    @click.option(
        "--idle",
        type=float,
        hidden=True,
        help="Seconds without an event before the session's worker exits (passed on to it).",
    )
    @pass_ctx
    def command(
        ctx: Context, payload, config, deadline, max_corrections, lag_wait, verbose, sync, **_
    ):
        if sync:
            _sync_hook(ctx, agent, payload, config, deadline, max_corrections, lag_wait, verbose)
        # The CLI reached without the console script's fast path (e.g. from Python): the same
        # non-blocking event handling.
        from ..live.fast_path import main as hook_event

        argv = [*(["--db", ctx.db_option] if ctx.db_option else []), "hook", agent]
        argv += _passed_options(click.get_current_context())
        if payload is not None:
            sys.stdin = io.StringIO(payload)
        try:  # the agent's event names as its format declares them
            declared = {agent: ctx.plugins.live_agent(agent)[1].events}
        except Exception:  # noqa: BLE001 - the hook must record the event (fail open)
            from ..live.fast_path import AGENT_EVENTS as declared
        hook_event(argv, declared)  # exits

    return command


def _sync_hook(ctx: Context, agent, payload, config, deadline, max_corrections, lag_wait, verbose):
    """`--sync`: audit the turn that just ended in the hook itself; exits."""
    from ..live.sync_hook import HookOptions, run_hook

    config.concurrency = 1  # one call at a time: the checkpoint that just ended
    raw = payload if payload is not None else sys.stdin.read()

    def engine(wait_until: float):
        from ..store.db import open_db

        return open_db(ctx.db_option, wait_until=wait_until)

    def plugins():
        if ctx.config_error is not None:
            raise ctx.config_error  # recorded as the hook's failure; the agent stops normally
        return ctx.plugins

    outcome = run_hook(
        agent,
        raw,
        sys.stdout,
        engine_factory=engine,
        plugins_factory=plugins,
        run_config=config,
        options=HookOptions(deadline, max_corrections, lag_wait),
    )
    if verbose or not outcome.recorded:  # a failure the store could not take is said here
        steps = ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in outcome.timings.items())
        click.echo(f"auditor hook {agent}: {outcome.status}: {outcome.detail} ({steps})", err=True)
    # Everything is answered and stored: skip the interpreter's teardown (hundreds of ms
    # once an SDK is loaded), which the agent would wait for.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


@hook.command("worker", hidden=True)
@click.argument("agent")
@click.argument("spool", type=click.Path(file_okay=False))
@run_options
@_deadline_options
@click.option("--verbose", "-v", is_flag=True, hidden=True)
@click.option("--rewake", is_flag=True, hidden=True)
@click.option(
    "--idle",
    type=float,
    default=120.0,
    envvar="AUDITOR_WORKER_IDLE",
    help="Seconds without an event before it exits.",
)
@pass_ctx
def worker(ctx: Context, agent, spool, config, deadline, max_corrections, lag_wait, idle, **_):
    """Serve one session's spool: the worker the hooks start (internal; the event command's
    options are passed on to it)."""
    from ..live.worker import LAG, WorkerOptions, run_worker

    config.concurrency = 1  # one call at a time: the checkpoint that just ended

    def open_store():
        from ..store.db import open_db

        return open_db(ctx.db_option)

    def load_plugins():
        if ctx.config_error is not None:
            raise ctx.config_error
        return ctx.plugins

    options = WorkerOptions(deadline, max_corrections, idle, max(lag_wait, LAG))
    code = run_worker(spool, agent, open_store, load_plugins, config, options)
    sys.stdout.flush()
    os._exit(code)


def _passed_options(ctx: click.Context) -> list[str]:
    """The options given on the command line, as arguments again (for the fast path)."""
    out: list[str] = []
    for param in ctx.command.params:
        if not isinstance(param, click.Option) or param.name == "sync":
            continue
        if ctx.get_parameter_source(param.name) != click.core.ParameterSource.COMMANDLINE:
            continue
        value = ctx.params[param.name]
        flag = max(param.opts, key=len)
        if param.is_flag:
            out += [flag] if value else []
        elif param.multiple:
            for v in value:
                out += [flag, str(v)]
        else:
            out += [flag, str(value)]
    return out


def _store_if_any(ctx: Context):
    """The store's engine when it exists (installing a hook creates no store), else None."""
    from ..store.db import location, resolve_url

    where = location(resolve_url(ctx.db_option))
    if not ("://" in where or Path(where).is_file()):
        return None
    try:
        return ctx.engine
    except Exception:  # noqa: BLE001 - a store out of reach: judged by the backend's figure
        return None


@hook.command("install")
@click.argument("agent")
@click.option(
    "--project",
    "scope",
    flag_value="project",
    default=True,
    help="In the project's settings (.claude/settings.json, .codex/hooks.json, "
    ".gemini/settings.json). The default.",
)
@click.option(
    "--local",
    "scope",
    flag_value="local",
    help="Claude Code: in .claude/settings.local.json (not committed).",
)
@click.option(
    "--user",
    "scope",
    flag_value="user",
    help="In your user settings (~/.claude/settings.json, ~/.codex/hooks.json, "
    "~/.gemini/settings.json).",
)
@click.option(
    "--dir",
    "project_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=".",
    show_default=True,
    help="The project directory.",
)
@click.option(
    "--observer",
    "-o",
    metavar="NAME",
    help="Observer the hook uses (else the usual fallback order).",
)
@click.option("--model", "-m", help="Observer model.")
@click.option(
    "--allow-same-vendor",
    is_flag=True,
    help="Let an observer of the agent's own vendor audit it when no other is ready.",
)
@click.option(
    "--deadline",
    type=float,
    default=DEADLINE,
    show_default=True,
    help="The hook's deadline in seconds.",
)
@click.option(
    "--sync",
    is_flag=True,
    help="Install only the stop hooks, auditing while the agent waits (the behaviour before "
    "the non-blocking hooks).",
)
@click.option(
    "--no-wait",
    is_flag=True,
    help="Codex: a Stop handler that does not wait for the end-of-turn audit (the turn ends at "
    "once; corrections then reach Codex only at its next tool round).",
)
@click.option(
    "--no-trust",
    is_flag=True,
    help="Codex: do not record your trust in the handlers (Codex skips them until you review "
    "them in its /hooks screen).",
)
@click.option(
    "--print", "print_only", is_flag=True, help="Print the merged settings instead of writing them."
)
@pass_ctx
def install(
    ctx: Context,
    agent: str,
    scope: str,
    project_dir: Path,
    observer,
    model,
    allow_same_vendor: bool,
    deadline: float,
    sync: bool,
    no_wait: bool,
    no_trust: bool,
    print_only: bool,
) -> None:
    """Add the hooks running `auditor hook AGENT` to the agent's settings file.

    AGENT is one whose transcript format declares live hooks (`auditor hook --help` lists
    them); what is installed where is what it declares. As shipped:

    Claude Code: PostToolUse, UserPromptSubmit, Stop and SubagentStop run the non-blocking
    hook, and Stop also runs `auditor hook claude-code --rewake` in the background
    (asyncRewake) to wake Claude with an end-of-turn correction. Codex: PostToolUse and
    UserPromptSubmit run the non-blocking hook, and Stop runs `auditor hook codex --wait`,
    which holds the end of the turn until its audit is done (up to --deadline) and answers
    with the correction (--no-wait: it does not wait); Codex runs only hooks you have
    reviewed, so the install records that trust in Codex's config.toml as its /hooks screen
    does (--no-trust: it does not). Gemini CLI: AfterTool, BeforeAgent and SessionEnd run the
    non-blocking hook and AfterAgent runs `auditor hook gemini-cli --wait` (timeouts in
    milliseconds, as Gemini CLI counts them). Merges into the file: other settings and hooks
    are kept, an auditor entry already there is
    updated in place, so installing twice changes nothing. The waiting handlers' timeout is
    the deadline plus 15 seconds.
    """
    import json

    from ..live.install import (
        deadline_warning,
        hook_command,
        merge,
        observer_for,
        readiness_warning,
        settings_path,
        store_for_command,
    )
    from ..live.install import install as install_hook

    extra = []
    if observer:
        extra += ["--observer", observer]
    if model:
        extra += ["--model", model]
    if allow_same_vendor:
        extra += ["--allow-same-vendor"]
    if deadline != DEADLINE:
        extra += ["--deadline", f"{deadline:g}"]
    source = click.get_current_context().find_root().get_parameter_source("db")
    db, store_note = store_for_command(
        ctx.db_option, source == click.core.ParameterSource.COMMANDLINE
    )
    hooks = ctx.plugins.live_agent(agent)[1]
    command = hook_command(agent, extra, db)
    path = settings_path(agent, hooks, scope, project_dir.resolve())
    timeout = int(deadline + 15)
    if print_only:
        current = json.loads(path.read_text()) if path.exists() else {}
        merged = merge(current, agent, hooks, command, timeout, sync, not no_wait)[0]
        click.echo(json.dumps(merged, indent=2))
    else:
        changed = install_hook(path, agent, hooks, command, timeout, sync, not no_wait)
        click.echo(f"{'installed in' if changed else 'already installed in'} {path}: {command}")
        if agent == "codex":
            _codex_trust(path, no_trust)
            if scope == "project":
                from ..live.codex_trust import project_trusted

                if not project_trusted(project_dir.resolve()):
                    click.echo(
                        "Codex reads a project's .codex/ only once you trust the project: run "
                        f"`codex exec --trust` in {project_dir.resolve()} (or accept Codex's "
                        "prompt), or install with --user."
                    )
    if store_note:
        click.echo(store_note, err=True)
    if not observer and (line := observer_for(ctx.plugins, agent, allow_same_vendor)):
        click.echo(line, err=True)  # chosen for this agent, as the hook will choose it
    if warning := readiness_warning(ctx.plugins, observer, model, agent, allow_same_vendor):
        click.echo(warning, err=True)
    if warning := deadline_warning(
        _store_if_any(ctx), ctx.plugins, observer, model, deadline, agent
    ):
        click.echo(warning, err=True)


@hook.command("status")
@click.option(
    "--dir",
    "project_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=".",
    show_default=True,
    help="The project directory.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
def status(ctx: Context, project_dir: Path, as_json: bool) -> None:
    """Where auditor's hooks are installed, whether they will run, and what they did.

    For each agent and settings file (project, local, user): the events covered, and what
    would keep them from running (Codex's trust in the handlers and in the project, `auditor`
    not found, the observer not ready, an agent version auditor was not tested with). Then the
    latest events each session's spool received, and the corrections handed over and held
    back, with why. Exit status 1 when an installed hook will not run.
    """
    from ..live import status as hs
    from ..live.fast_path import state_root

    plugins = ctx.plugins if ctx.config_error is None else None
    declared = {agent: hooks for agent, (_, hooks) in ctx.plugins.live_agents().items()}
    found = hs.installs(project_dir.resolve(), declared, plugins)
    agents = sorted({i.agent for i in found})
    versions = {a: hs.agent_version(a, declared[a]) for a in agents}
    engine = _store_if_any(ctx)
    root = state_root(ctx.db_option)
    done = {a: hs.activity(engine, root, a) for a in agents}
    if as_json:
        echo_json(
            {
                "installs": [i.as_dict() for i in found],
                "agents": versions,
                "activity": done,
                "spool": root,
            }
        )
        sys.exit(0 if all(i.runs for i in found) else 1)
    if not found:
        click.echo(
            "auditor's hooks are not installed for this project or user "
            "(auditor hook install claude-code, or codex)"
        )
        return
    for i in found:
        click.echo(f"{i.agent} ({i.scope}): {i.path}")
        events = ", ".join(
            e + "".join(f" ({hs.VARIANT_NOTES[v]})" for v in vs if v in hs.VARIANT_NOTES)
            for e, vs in i.events.items()
        )
        click.echo(f"  events: {events}")
        click.echo(f"  will run: {'yes' if i.runs else 'no'}")
        for problem in i.problems:
            click.echo(f"  - {problem}")
        for note in i.notes:
            click.echo(f"  + {note}")
    for agent in agents:
        v = versions[agent]
        if v["tested"] is None:  # an agent of a plugin that declares no tested version
            line = f"{v['program']} {'found' if v['found'] else 'is not on PATH here'}"
        elif not v["found"]:
            line = f"{v['program']} is not on PATH here (auditor is tested with {v['tested']})"
        elif v.get("known"):
            line = f"{v['program']} {v['version']}: the version auditor's hooks are tested with"
        else:
            line = (
                f"{v['program']} {v.get('version') or '(version unknown)'}: not the version "
                f"auditor's hooks are tested with ({v['tested']}); check `auditor hook status` "
                "after a session"
            )
        click.echo(f"{agent}: {line}")
        act = done[agent]
        for sess in act["sessions"]:
            last = "; ".join(
                f"{e['event']}{' ' + e['tool'] if e.get('tool') else ''} {hs.ago(e['at'])}"
                for e in sess["events"]
            )
            waiting = f", {sess['waiting']} correction(s) waiting" if sess["waiting"] else ""
            click.echo(f"  session {sess['session']}: {last}{waiting}")
        held = act["held_back"]
        click.echo(f"  corrections: {act['delivered']} delivered, {len(held)} held back (latest)")
        for h in held:
            click.echo(f"  - verdict {h['verdict']} at {h['at']}: {h['why']}")
    sys.exit(0 if all(i.runs for i in found) else 1)


def _codex_trust(path: Path, no_trust: bool) -> None:
    """Record (or, with --no-trust, say how to record) Codex's trust in auditor's handlers."""
    import shlex

    from ..live.codex_trust import config_path
    from ..live.install import codex_handlers, trust_codex

    if no_trust:
        again = [a for a in sys.argv[1:] if a != "--no-trust"]
        click.echo(
            f"Codex skips the {len(codex_handlers(path))} handlers until you trust them: review "
            "them in Codex (/hooks), or run: " + shlex.join(["auditor", *again])
        )
        return
    n, changed = trust_codex(path)
    done = "recorded" if changed else "already recorded"
    click.echo(
        f"Codex runs only hooks you have reviewed: {done} your trust in auditor's {n} handlers "
        f"in {config_path()} ([hooks.state], as Codex's /hooks review does)."
    )


COMMANDS.append(hook)


@click.command()
@click.option("--run", "run_id", type=int, metavar="ID", help="Only the corrections of this run.")
@click.option(
    "--injector",
    "-i",
    "via",
    default="stdout",
    show_default=True,
    metavar="NAME",
    help="How to deliver: stdout, webhook, amp-thread, or a plugin's injector.",
)
@click.option("--url", help="webhook: the URL to POST each correction to.")
@click.option(
    "--path",
    "target_path",
    type=click.Path(dir_okay=False),
    help="amp-thread: the thread file (default: the file the thread was read from).",
)
@click.option("--timeout", type=float, help="webhook: seconds per attempt.")
@click.option("--retries", type=int, help="webhook: attempts after the first failure.")
@click.option(
    "--max-corrections",
    type=int,
    default=2,
    show_default=True,
    help="Corrections in a row between two messages the user typed.",
)
@click.option(
    "--dry-run", is_flag=True, help="Say what would be delivered; deliver and record nothing."
)
@pass_ctx
def inject(
    ctx: Context, run_id, via, url, target_path, timeout, retries, max_corrections, dry_run
) -> None:
    """Deliver the pending corrections of stored verdicts (e.g. from a scheduled run).

    A correction is pending until an injector delivered it or a loop guard held it back;
    every attempt is recorded in the injections table, and failed attempts are retried by
    the next `auditor inject`. Exit status 1 when a delivery failed.
    """
    from ..errors import AuditorError
    from ..live.delivery import DELIVERED, DRY_RUN, FAILED, inject_pending

    if ctx.config_error is not None:
        raise ctx.config_error
    injector = ctx.plugins.injector(via)
    if injector.live:
        usable = sorted(n for n, i in ctx.plugins.injectors().items() if not i.live)
        raise AuditorError(
            f"{via!r} delivers only from inside the agent's Stop hook (`auditor hook {via}`). "
            f"For stored corrections use one of: {', '.join(usable)}"
        )
    options = ctx.config.injector_options(via) if ctx.config else {}
    for key, value in (
        ("url", url),
        ("path", target_path),
        ("timeout", timeout),
        ("retries", retries),
    ):
        if value is not None:
            options[key] = value
    deliveries = inject_pending(
        ctx.engine,
        injector,
        options,
        run_id=run_id,
        max_consecutive=max_corrections,
        dry_run=dry_run,
    )
    counts: dict[str, int] = {}
    for d in deliveries:
        counts[d.status] = counts.get(d.status, 0) + 1
        c = d.correction
        where = f"verdict {c.verdict_id} (thread {c.thread})"
        if d.status == DRY_RUN:
            click.echo(f"would deliver {where} via {via}: {c.message}")
        elif d.status == DELIVERED:
            click.echo(f"delivered {where} to {d.target}", err=True)
        else:
            click.echo(f"{d.status} {where}: {d.error}", err=True)
    summary = (
        ", ".join(f"{n} {status}" for status, n in sorted(counts.items())) or "nothing pending"
    )
    click.echo(f"{via}: {summary}", err=True)
    sys.exit(1 if counts.get(FAILED) else 0)


COMMANDS.append(inject)


@click.command("config")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--example", is_flag=True, help="Print an example config file.")
@pass_ctx
def config_command(ctx: Context, as_json: bool, example: bool) -> None:
    """Show where the config file is and what it sets.

    The file is TOML, at $AUDITOR_CONFIG, else config.toml in the per-user config
    directory. It lists the sources `auditor run --every` ingests and the defaults of the
    commands' options; the command line always wins over it. The last line names the price
    overrides file ($AUDITOR_PRICES, else prices.json beside config.toml).
    """

    from ..config import ENV_VAR, EXAMPLE, load
    from ..pricing.model_prices import overrides_path

    if example:
        click.echo(EXAMPLE, nl=False)
        return
    if ctx.config_error is not None:
        raise ctx.config_error
    cfg = ctx.config or load()
    if as_json:
        echo_json(
            {
                "path": str(cfg.path),
                "exists": cfg.exists,
                "settings": cfg.data,
                "defaults": cfg.default_map(),
                "prices": {"path": str(overrides_path()), "exists": overrides_path().is_file()},
            }
        )
        return
    where = "from $AUDITOR_CONFIG" if os.environ.get(ENV_VAR) else "the per-user default"
    state = (
        "found"
        if cfg.exists
        else "not found: every setting has its built-in default (auditor config --example shows one)"
    )
    click.echo(f"config file: {cfg.path} ({where}; {state})")
    if cfg.exists:
        click.echo(f"sources: {', '.join(cfg.sources) or '(none)'}")
    for section, values in cfg.data.items() if cfg.exists else ():
        if section == "sources":
            continue
        if section == "injectors":
            for name, table in values.items():
                click.echo(
                    f"[injectors.{name}] " + ", ".join(f"{k} = {v!r}" for k, v in table.items())
                )
            continue
        click.echo(f"[{section}] " + ", ".join(f"{k} = {v!r}" for k, v in values.items()))
    prices = overrides_path()
    found = "found" if prices.is_file() else "not found: genai-prices' table only"
    click.echo(f"price overrides: {prices} ({found})")


COMMANDS.append(config_command)
