"""`auditor hook install`: add the Stop hook entry to an agent's settings file, merging.

Claude Code reads hooks from `.claude/settings.json` (project), `.claude/settings.local.json`
(project, uncommitted) or `~/.claude/settings.json` (user); Codex from `.codex/hooks.json` or
`~/.codex/hooks.json`. Both use the same shape:

    {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "...", "timeout": 45}]}]}}

`Stop` takes no matcher. The file is merged, never clobbered: other keys, other events and
other hooks stay as they are; an auditor entry already there is updated in place, so
installing twice changes nothing. The new file replaces the old one atomically.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

from .errors import AuditorError
from .files import replace_atomically

EVENTS = {"claude-code": ("Stop", "SubagentStop"), "codex": ("Stop",)}


def settings_path(agent: str, scope: str, project_dir: Path) -> Path:
    """Where `agent` reads hooks for `scope` (project, local or user)."""
    home = Path.home()
    if agent == "claude-code":
        if scope == "user":
            return home / ".claude" / "settings.json"
        name = "settings.local.json" if scope == "local" else "settings.json"
        return project_dir / ".claude" / name
    if agent == "codex":
        if scope == "local":
            raise AuditorError("Codex has no local hooks file; use --project or --user")
        return (home if scope == "user" else project_dir) / ".codex" / "hooks.json"
    raise AuditorError(f"{agent!r} has no hook to install. Available: claude-code, codex")


def auditor_executable() -> str:
    """The auditor script beside this Python, else `auditor` on PATH at hook time."""
    beside = Path(sys.executable).parent / "auditor"
    return str(beside) if beside.is_file() and os.access(beside, os.X_OK) else "auditor"


def hook_command(agent: str, extra: list[str], db: str | None = None) -> str:
    """The shell command the agent runs: `auditor [--db PATH] hook AGENT [options]`."""
    argv = [auditor_executable()]
    if db:
        argv += ["--db", db]
    argv += ["hook", agent, *extra]
    return " ".join(shlex.quote(a) for a in argv)


def _ours(handler: object, agent: str) -> bool:
    if not isinstance(handler, dict) or not isinstance(handler.get("command"), str):
        return False
    try:
        argv = shlex.split(handler["command"])
    except ValueError:
        return False
    return any(Path(a).name == "auditor" for a in argv[:1]) and "hook" in argv and agent in argv


def merge(settings: dict, agent: str, command: str, timeout: int) -> tuple[dict, bool]:
    """Return `settings` with auditor's Stop hook entries, and whether anything changed."""
    hooks = settings.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise AuditorError("the settings file's 'hooks' is not an object; fix it by hand first")
    entry = {"type": "command", "command": command, "timeout": timeout}
    changed = False
    for event in EVENTS[agent]:
        groups = hooks.setdefault(event, [])
        if not isinstance(groups, list):
            raise AuditorError(
                f"the settings file's hooks.{event} is not a list; fix it by hand first"
            )
        found = False
        for group in groups:
            handlers = group.get("hooks") if isinstance(group, dict) else None
            for i, handler in enumerate(handlers if isinstance(handlers, list) else []):
                if _ours(handler, agent):
                    if found:
                        continue
                    found = True
                    if handler != entry:
                        handlers[i] = entry
                        changed = True
        if not found:
            groups.append({"hooks": [entry]})
            changed = True
    return settings, changed


def install(path: Path, agent: str, command: str, timeout: int) -> bool:
    """Merge auditor's hook into the settings file at `path`; return whether it changed."""
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
    settings, changed = merge(settings, agent, command, timeout)
    if not changed:
        return False
    Path(os.path.realpath(path)).parent.mkdir(parents=True, exist_ok=True)  # through a link, too
    data = (json.dumps(settings, indent=2, ensure_ascii=False) + "\n").encode()
    replace_atomically(path, data)
    return True
