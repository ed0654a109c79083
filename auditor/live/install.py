"""`auditor hook install`: add auditor's hook entries to an agent's settings file, merging.

What is installed where is what the agent's transcript format declares (`LiveHooks`, see
`auditor.api`): the settings file of each scope (`settings`), the events that run the
non-blocking hook (`hook_events`), how timeouts are counted and whether the agent can be woken
after a turn. This module knows the hook names and the handlers' shape, never an agent. The
agents so far (Claude Code, Codex, Gemini CLI) use one shape, event -> groups -> handlers:

    {"hooks": {"PostToolUse": [{"hooks": [{"type": "command", "command": "...", "timeout": 10}]}]}}

A group without `matcher` applies to every tool. Installed (see docs/live-hooks.md):
- every declared event runs the non-blocking hook;
- the end of a turn (the event the spool records as `Stop`) of an agent that can be woken
  (`rewake`, Claude Code) also runs `auditor hook AGENT --rewake` as an `asyncRewake` handler,
  which waits in the background for the end-of-turn audit and wakes the agent with its
  correction (exit 2, the message on stderr) unless the user wrote first; each of its commands
  is guarded (`GUARD`): it exits 2 only when auditor decided to deliver;
- that of any other agent (Codex, Gemini CLI) runs `auditor hook AGENT --wait` instead, which
  waits (up to the deadline) for the end-of-turn audit and blocks with its correction: such an
  agent cannot be woken once the turn has ended. Codex runs only hooks the user has reviewed;
  the install records that trust in Codex's config (see `codex_trust`);
- with `--sync`: only the stops, running the hook that audits while the agent waits.

The file is merged, never clobbered: other keys, other events and other hooks stay as they
are; an auditor entry already there is updated in place, so installing twice changes nothing.
The new file replaces the old one atomically.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from pathlib import Path

from ..atomic_files import replace_atomically
from ..errors import AuditorError
from ..model import LiveHooks
from .fast_path import STOPS

FAST_TIMEOUT = 10  # seconds: the non-blocking hook never waits for anything
# `${VAR:-DEFAULT}` at the start of a declared user settings path: $VAR's folder, else DEFAULT.
DEFAULTED = re.compile(r"^\$\{(\w+):-([^}]*)\}")


# Claude Code reads a hook's exit status 2 as a "blocking error": at a Stop it makes Claude go
# on with stderr (an asyncRewake handler wakes it), at UserPromptSubmit it erases the prompt,
# at PostToolUse it feeds stderr to Claude. Python exits 2 for a script it cannot open and
# click for a usage error (an older auditor that does not know an option), so a broken
# install could loop Claude on its own error message. The installed command therefore runs
# through this shell form: auditor's own "deliver" status (DELIVER) becomes 2, success stays
# 0, and every other status (a missing executable's 127 included) becomes 1, which Claude Code
# shows the user as a non-blocking hook error and otherwise ignores.
GUARD = "; s=$?; [ $s = {deliver} ] && exit 2; [ $s = 0 ]"
GUARD_FAST = "; [ $? = 0 ]"


def guarded(hooks: LiveHooks, command: str, rewake: bool = False) -> str:
    """`command` in the shell form that exits 2 only when auditor decided to deliver, for an
    agent that reads a handler's exit status 2 (`LiveHooks.rewake`)."""
    if not hooks.rewake:
        return command
    from .fast_path import DELIVER

    return command + (GUARD.format(deliver=DELIVER) if rewake else GUARD_FAST)


def stops(hooks: LiveHooks) -> tuple[str, ...]:
    """The agent's names of its events that the spool records as stops (`--sync` hooks them)."""
    return tuple(e for e in hooks.hook_events if hooks.events.get(e, e) in STOPS)


def entries(
    hooks: LiveHooks, command: str, timeout: int, sync: bool = False, wait: bool = True
) -> dict[str, list[dict]]:
    """The handlers auditor installs for an agent with these `hooks`, by event (`wait`: the
    handler of the end of a turn of an agent that cannot be woken waits for its audit)."""
    unit = hooks.timeout_unit
    if sync:
        entry = {
            "type": "command",
            "command": guarded(hooks, f"{command} --sync"),
            "timeout": timeout * unit,
        }
        return {event: [entry] for event in stops(hooks)}
    fast = {"type": "command", "command": guarded(hooks, command), "timeout": FAST_TIMEOUT * unit}
    out = {event: [fast] for event in hooks.hook_events}
    end = next((e for e in hooks.hook_events if hooks.events.get(e, e) == "Stop"), None)
    if end is None:
        return out
    if hooks.rewake:
        rewake = {
            "type": "command",
            "command": guarded(hooks, f"{command} --rewake", rewake=True),
            "timeout": timeout * unit,
            "asyncRewake": True,
        }
        out[end] = [fast, rewake]
    elif wait:
        # An agent that cannot be woken once a turn has ended: the handler of the end of a
        # turn waits for its audit.
        out[end] = [{"type": "command", "command": f"{command} --wait", "timeout": timeout * unit}]
    return out


def settings_path(agent: str, hooks: LiveHooks, scope: str, project_dir: Path) -> Path:
    """Where `agent` reads hooks for `scope` (project, local or user), as its format declares
    (`LiveHooks.settings`)."""
    where = hooks.settings.get(scope)
    if where is None:
        if not hooks.settings:
            raise AuditorError(
                f"{agent} declares no settings file for hooks: auditor cannot install them"
            )
        scopes = " or ".join(f"--{s}" for s in hooks.settings)
        raise AuditorError(f"{agent} has no {scope} settings file for hooks; use {scopes}")
    if scope != "user":
        return project_dir / where
    where = DEFAULTED.sub(lambda m: os.environ.get(m[1]) or m[2], where)
    return Path(where).expanduser()


def auditor_executable() -> str:
    """`auditor` when the PATH finds this installation's script, else that script's full path
    (the agent would not find it: a venv that is not activated), else `auditor`."""
    import shutil

    beside = Path(sys.executable).parent / "auditor"
    if not (beside.is_file() and os.access(beside, os.X_OK)):
        return "auditor"
    found = shutil.which("auditor")
    if found and os.path.realpath(found) == os.path.realpath(beside):
        return "auditor"
    return str(beside)


def store_for_command(db: str | None, explicit: bool) -> tuple[str | None, str | None]:
    """The `--db` value to write into the agent's settings, and a note saying what was done.

    A settings file is often committed, so nothing secret goes in: a store named by $AUDITOR_DB
    is left to the environment the agent runs the hook in (the hook reads $AUDITOR_DB there,
    as it reads the observer's key), and a URL given with --db is written without its password,
    which the PostgreSQL driver then takes from PGPASSWORD or ~/.pgpass.
    """
    if not db:
        return None, None
    if not explicit:
        return None, (
            "The hook uses the store that $AUDITOR_DB names in the agent's environment (not "
            "written into the settings file): start the agent where AUDITOR_DB is set."
        )
    if "://" not in db:
        return str(Path(db).expanduser().resolve()), None
    from sqlalchemy.engine import make_url

    url = make_url(db)
    if url.password is None:
        return db, None
    return url._replace(password=None).render_as_string(hide_password=False), (
        "The store's password is not written into the settings file: the hook's connection "
        "takes it from PGPASSWORD or ~/.pgpass in the agent's environment (or set AUDITOR_DB "
        "there and install without --db)."
    )


def hook_command(agent: str, extra: list[str], db: str | None = None) -> str:
    """The shell command the agent runs: `auditor [--db PATH] hook AGENT [options]`."""
    argv = [auditor_executable()]
    if db:
        argv += ["--db", db]
    argv += ["hook", agent, *extra]
    return " ".join(shlex.quote(a) for a in argv)


def _first_command(command: str) -> list[str]:
    """The words of `command` up to its first `;`, `&&` or `||` (the guard that follows)."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    words: list[str] = []
    for word in lexer:
        if word in (";", "&&", "||", "&", "|"):
            break
        words.append(word)
    return words


def _variant(handler: object, agent: str) -> str | None:
    """Which of auditor's handlers `handler` is (fast, rewake, sync), or None if not ours."""
    if not isinstance(handler, dict) or not isinstance(handler.get("command"), str):
        return None
    try:
        argv = _first_command(handler["command"])
    except ValueError:
        return None
    if not (any(Path(a).name == "auditor" for a in argv[:1]) and "hook" in argv and agent in argv):
        return None
    return "rewake" if "--rewake" in argv else "sync" if "--sync" in argv else "fast"


def merge(
    settings: dict,
    agent: str,
    declared: LiveHooks,
    command: str,
    timeout: int,
    sync: bool = False,
    wait: bool = True,
) -> tuple[dict, bool]:
    """Return `settings` with auditor's hook entries, and whether anything changed.

    Each of auditor's handlers already there is updated in place; the fast and synchronous
    handlers replace each other (one of them per event), and a `--rewake` handler is left out
    where it is not wanted.
    """
    hooks = settings.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise AuditorError("the settings file's 'hooks' is not an object; fix it by hand first")
    changed = False
    wanted = entries(declared, command, timeout, sync, wait)
    for event in dict.fromkeys([*wanted, *declared.hook_events]):
        if event not in wanted and event not in hooks:
            continue
        groups = hooks.setdefault(event, [])
        if not isinstance(groups, list):
            raise AuditorError(
                f"the settings file's hooks.{event} is not a list; fix it by hand first"
            )
        emptied: list = []
        todo = {
            ("rewake" if "--rewake" in _first_command(e["command"]) else "main"): e
            for e in wanted.get(event, [])
        }
        for group in groups:
            handlers = group.get("hooks") if isinstance(group, dict) else None
            if not isinstance(handlers, list):
                continue
            for i in range(len(handlers) - 1, -1, -1):
                variant = _variant(handlers[i], agent)
                if variant is None:
                    continue
                slot = "rewake" if variant == "rewake" else "main"
                entry = todo.pop(slot, None)
                if entry is None:  # not wanted (any more), or a second copy
                    del handlers[i]
                    changed = True
                    if not handlers:
                        emptied.append(group)
                elif handlers[i] != entry:
                    handlers[i] = entry
                    changed = True
        for g in emptied:
            groups.remove(g)
        for entry in todo.values():
            groups.append({"hooks": [entry]})
            changed = True
        if not groups:
            del hooks[event]
    return settings, changed


def read_settings(path: Path) -> dict:
    """The settings file at `path` ({} when absent or empty); an error when not a JSON object."""
    settings: dict = {}
    if path.exists():
        text = path.read_text(encoding="utf-8")
        if text.strip():
            try:
                settings = json.loads(text)
            except ValueError as exc:
                raise AuditorError(
                    f"{path} is not valid JSON ({exc}); fix it first, nothing was changed"
                ) from None
            if not isinstance(settings, dict):
                raise AuditorError(f"{path} does not hold a JSON object; nothing was changed")
    return settings


def install(
    path: Path,
    agent: str,
    hooks: LiveHooks,
    command: str,
    timeout: int,
    sync: bool = False,
    wait: bool = True,
) -> bool:
    """Merge auditor's hook into the settings file at `path`; return whether it changed."""
    settings, changed = merge(read_settings(path), agent, hooks, command, timeout, sync, wait)
    if not changed:
        return False
    Path(os.path.realpath(path)).parent.mkdir(parents=True, exist_ok=True)  # through a link, too
    data = (json.dumps(settings, indent=2, ensure_ascii=False) + "\n").encode()
    replace_atomically(path, data)
    return True


def codex_handlers(path: Path):
    """auditor's handlers in the Codex hooks file at `path`, as Codex keys and hashes them."""
    from .codex_trust import auditor_handlers

    return auditor_handlers(path, read_settings(path), lambda h: _variant(h, "codex") is not None)


def trust_codex(path: Path) -> tuple[int, bool]:
    """Record Codex's trust in auditor's handlers of the hooks file at `path`, as Codex's own
    review screen does; return (how many handlers, whether the config changed)."""
    from .codex_trust import record

    handlers = codex_handlers(path)
    return len(handlers), record(handlers)


def observer_for(plugins, agent: str, allow_same_vendor: bool) -> str | None:
    """The line saying which observer the hook of `agent` will use, chosen for that agent's
    vendor as the hook chooses it (see `auditor.audit.observer_choice`), or None when none can be
    (`readiness_warning` says why)."""
    from ..audit.observer_choice import choose_for

    try:
        choice = choose_for(plugins, None, [agent], allow_same_vendor)
    except AuditorError:
        return None
    return f"observer for {agent}: {choice.observer} ({choice.why})"


def readiness_warning(
    plugins,
    observer: str | None,
    model: str | None,
    agent: str | None = None,
    allow_same_vendor: bool = False,
) -> str | None:
    """A warning when the observer the hook of `agent` will use cannot be called now (no key,
    no SDK, not logged in), or when only the agent's own vendor's could be."""
    from ..audit.observer_choice import choose_for

    try:
        choice = choose_for(plugins, observer, [agent] if agent else None, allow_same_vendor)
        name = choice.observer
        backend = plugins.observer(name)
    except AuditorError as exc:
        return f"Warning: {exc}"
    problem = backend.check({"model": model or backend.default_model})
    if not problem:
        return None
    return (
        f"Warning: the hook's {name} observer cannot be used from here: {problem} The hook runs "
        "in the agent's environment: set it there before starting the agent, or every audit "
        "fails (see `auditor runs`)."
    )


def deadline_warning(
    engine,
    plugins,
    observer: str | None,
    model: str | None,
    deadline: float,
    agent: str | None = None,
):
    """A warning when the observer the hook of `agent` will use cannot answer inside
    `deadline`, or None."""
    from ..audit.observer_choice import choose_for

    try:
        name = choose_for(plugins, observer, [agent] if agent else None, True).observer
        backend = plugins.observer(name)
    except AuditorError:
        return None  # the hook records that problem itself
    model = model or backend.default_model
    from ..audit.answer_times import answer_seconds

    found = answer_seconds(engine, backend, name, model)
    if found is None or found[0] <= deadline:
        return None
    seconds, source = found
    return (
        f"Warning: the {name} observer ({model}) takes about {seconds:.1f}s to answer ({source}), "
        f"longer than the hook's {deadline:g}s deadline: its answers would come too late and be "
        "dropped. Use a faster observer (--observer gemini or claude with an API key, or local "
        "with a server on a GPU) or a longer --deadline."
    )
