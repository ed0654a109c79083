"""`auditor hook status`: where the hooks are installed, whether they will run, what they did.

For each agent and settings file (the project's, Claude Code's local one, the user's) that holds
auditor's handlers: the events they cover and every reason they would not run that can be seen
from here (Codex's trust in each handler and in the project, the command's `auditor` missing or
not on PATH, the observer not ready, an agent version auditor was not tested with). Then what
happened: the latest events each session's spool received, and from the store the corrections
handed over and those held back, with why.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import AuditorError
from ..model import LiveHooks

VARIANT_NOTES = {
    "rewake": "wakes Claude with the end-of-turn correction",
    "wait": "waits for the end-of-turn audit",
    "sync": "audits while the agent waits",
}


@dataclass
class Install:
    agent: str
    scope: str
    path: str
    events: dict[str, list[str]] = field(default_factory=dict)  # event -> handler variants
    problems: list[str] = field(default_factory=list)  # each one keeps (some) handlers from running
    notes: list[str] = field(default_factory=list)

    @property
    def runs(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict:
        return {
            "agent": self.agent,
            "scope": self.scope,
            "path": self.path,
            "events": self.events,
            "runs": self.runs,
            "problems": self.problems,
            "notes": self.notes,
        }


def variant(handler: dict) -> str:
    from .install import _first_command

    argv = _first_command(handler["command"])  # without Claude Code's exit-status guard
    for flag in ("rewake", "wait", "sync"):
        if f"--{flag}" in argv:
            return flag
    return "fast"


def installs(project_dir: Path, agents: dict[str, LiveHooks], plugins=None) -> list[Install]:
    """Every settings file of the `agents` (as their formats declare them) holding auditor's
    handlers, with what would keep them from running."""
    from .install import _variant, read_settings, settings_path

    out = []
    for agent, hooks in agents.items():
        seen = set()
        for scope in hooks.settings:
            path = settings_path(agent, hooks, scope, project_dir)
            if not path.exists() or path in seen:
                continue  # in the home directory, the project's file is the user's
            seen.add(path)
            found = Install(agent, scope, str(path))
            try:
                settings = read_settings(path)
            except AuditorError as exc:
                found.problems.append(str(exc))
                out.append(found)
                continue
            commands = []
            for event, groups in (settings.get("hooks") or {}).items():
                for group in groups if isinstance(groups, list) else []:
                    for handler in (group.get("hooks") or []) if isinstance(group, dict) else []:
                        if _variant(handler, agent) is None:
                            continue
                        found.events.setdefault(event, []).append(variant(handler))
                        commands.append(handler["command"])
            if not found.events:
                continue
            _check_commands(found, commands, plugins)
            if agent == "codex":
                _check_codex_trust(found, path, project_dir)
            out.append(found)
    return out


def _check_commands(found: Install, commands: list[str], plugins) -> None:
    from .install import _first_command

    for command in dict.fromkeys(commands):
        argv = _first_command(command)
        exe = argv[0]
        where = exe if os.sep in exe else shutil.which(exe)
        if where is None:
            found.problems.append(f"`{exe}` is not on PATH: the agent cannot start the hook")
        elif not (os.path.isfile(where) and os.access(where, os.X_OK)):
            found.problems.append(f"{exe} is gone or not executable: reinstall auditor's hooks")
    if plugins is None:
        return
    from ..audit.observer_choice import choose_for

    names = set()
    for command in dict.fromkeys(commands):
        argv = _first_command(command)
        name = next(
            (argv[i + 1] for i, a in enumerate(argv[:-1]) if a in ("--observer", "-o")), None
        )
        names.add((name, "--allow-same-vendor" in argv))
    for name, allowed in names:
        try:  # chosen for this agent's vendor, as its hook will choose
            chosen = choose_for(plugins, name, [found.agent], allowed).observer
            problem = plugins.observer(chosen).check({})
        except AuditorError as exc:
            chosen, problem = name or "?", str(exc)
        if problem:
            found.problems.append(f"observer {chosen} not ready: {problem}")
        else:
            found.notes.append(f"observer {chosen} ready")


def _check_codex_trust(found: Install, path: Path, project_dir: Path) -> None:
    from . import codex_trust as hook_trust
    from .install import codex_handlers

    have = hook_trust.recorded()
    handlers = codex_handlers(path)
    states = [hook_trust.status(h, have) for h in handlers]
    trusted = states.count("trusted")
    if trusted < len(states):
        modified = states.count("modified")
        found.problems.append(
            f"Codex trusts {trusted} of auditor's {len(states)} handlers"
            + (f" ({modified} changed since reviewed)" if modified else "")
            + f" in {hook_trust.config_path()}: Codex skips the others without a word; "
            "run `auditor hook install codex"
            + (" --user" if found.scope == "user" else f" --dir {project_dir}")
            + "` again (it records the trust) or review them in Codex (/hooks)"
        )
    else:
        found.notes.append(f"Codex trusts all {trusted} handlers")
    if found.scope == "project" and not hook_trust.project_trusted(project_dir):
        found.problems.append(
            f"Codex reads {project_dir}/.codex/ only in a trusted project: run `codex exec "
            "--trust` there once (or accept Codex's prompt), or install with --user"
        )


def agent_version(agent: str, hooks: LiveHooks, timeout: float = 10.0) -> dict:
    """The agent's version on PATH and whether auditor was tested with it (`LiveHooks.tested`;
    an agent that declares no tested version is looked for under its own name)."""
    program, tested = hooks.tested or (agent, None)
    exe = shutil.which(program)
    if exe is None:
        return {"program": program, "found": False, "tested": tested}
    try:
        out = subprocess.run(
            [exe, "--version"], capture_output=True, text=True, timeout=timeout, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        out = ""
    m = re.search(r"\d+\.\d+\.\d+", out)
    version = m.group(0) if m else None
    return {
        "program": program,
        "found": True,
        "path": exe,
        "version": version,
        "tested": tested,
        "known": tested is not None and version == tested,
    }


def activity(engine, root: str, agent: str, sessions: int = 3, events: int = 3) -> dict:
    """What the hooks of `agent` did: the newest sessions' latest events (from the spool) and
    the corrections handed over and held back (from the store)."""
    spool = Path(root) / agent
    found = []
    for sdir in spool.iterdir() if spool.is_dir() else ():
        log = sdir / "events.jsonl"
        try:
            found.append((log.stat().st_mtime, sdir))
        except OSError:
            continue
    out_sessions = []
    for _, sdir in sorted(found, reverse=True)[:sessions]:
        lines = _tail(sdir / "events.jsonl", events)
        out_sessions.append(
            {
                "session": sdir.name,
                "events": [
                    {
                        "event": e.get("hook_event_name"),
                        "at": e.get("t"),
                        "tool": e.get("tool_name"),
                    }
                    for e in lines
                ],
                "waiting": len(list((sdir / "outbox").glob("*.json"))),
            }
        )
    return {"sessions": out_sessions, **_injections(engine, agent)}


def _tail(path: Path, n: int) -> list[dict]:
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, fh.seek(0, os.SEEK_END) - 64 * 1024))
            lines = fh.read().splitlines()[-n:]
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def _injections(engine, agent: str, last: int = 5) -> dict:
    if engine is None:
        return {"delivered": 0, "held_back": []}
    from sqlalchemy import text

    with engine.connect() as conn:
        delivered = conn.execute(
            text(
                "SELECT count(*) FROM injections i JOIN threads t ON t.id = i.thread_id "
                "WHERE t.agent = :a AND i.status = 'delivered'"
            ),
            {"a": agent},
        ).scalar_one()
        held = conn.execute(
            text(
                "SELECT i.verdict_id, i.error, i.created_at FROM injections i "
                "JOIN threads t ON t.id = i.thread_id WHERE t.agent = :a AND i.status = 'skipped' "
                "ORDER BY i.id DESC LIMIT :n"
            ),
            {"a": agent, "n": last},
        ).all()
    return {
        "delivered": int(delivered),
        "held_back": [
            {"verdict": r.verdict_id, "why": r.error, "at": str(r.created_at)[:19]} for r in held
        ],
    }


def ago(t: float | None) -> str:
    if not t:
        return "?"
    s = max(0, time.time() - float(t))
    return (
        f"{s:.0f}s ago"
        if s < 120
        else f"{s / 60:.0f} min ago"
        if s < 7200
        else f"{s / 3600:.0f} h ago"
    )
