"""Codex's hook trust: Codex runs a hook handler only once the user has reviewed it.

Codex (0.169) keeps, in the user's `config.toml` (`$CODEX_HOME`, else `~/.codex`), one table per
reviewed handler:

    [hooks.state."/abs/path/.codex/hooks.json:post_tool_use:0:0"]
    trusted_hash = "sha256:..."

The key names the hooks file, the event (snake_case), the matcher group's index and the
handler's index in it. The hash is SHA-256 over the handler's identity as compact JSON with
sorted keys: the event's label, the group's matcher (left out where absent, and always for
UserPromptSubmit and Stop) and the one handler, normalized: `type`, `command`, `timeout`
(600 when unset, at least 1), `async` (false when unset) and `statusMessage` when set. A
handler whose hash is not recorded, or differs, is skipped without a word, so changing a
handler's command or timeout untrusts it until it is reviewed again. Codex's `/hooks` review
screen records exactly these tables; `auditor hook install codex` records them for auditor's
own handlers (never for anyone else's) and `auditor hook status` reads them back.

The file is edited with tomlkit, keeping the user's comments and layout.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from ..atomic_files import replace_atomically
from ..errors import AuditorError

# Codex's labels for the events of a hooks file (its `hook_event_key_label`).
LABELS = {
    "PreToolUse": "pre_tool_use",
    "PermissionRequest": "permission_request",
    "PostToolUse": "post_tool_use",
    "PreCompact": "pre_compact",
    "PostCompact": "post_compact",
    "SessionStart": "session_start",
    "SessionEnd": "session_end",
    "UserPromptSubmit": "user_prompt_submit",
    "SubagentStart": "subagent_start",
    "SubagentStop": "subagent_stop",
    "Stop": "stop",
}
NO_MATCHER = ("UserPromptSubmit", "Stop")  # Codex drops a matcher on these events


def codex_home() -> Path:
    """Where Codex keeps the user's config: $CODEX_HOME, else ~/.codex."""
    home = os.environ.get("CODEX_HOME")
    return Path(home).expanduser() if home else Path.home() / ".codex"


def config_path() -> Path:
    return codex_home() / "config.toml"


def handler_hash(event: str, group: dict, handler: dict) -> str:
    """The hash Codex records for `handler` of matcher `group` under `event`."""
    normalized: dict = {
        "type": "command",
        "command": handler["command"],
        "timeout": max(1, int(handler.get("timeout") or 600)),
        "async": bool(handler.get("async", False)),
    }
    if handler.get("statusMessage"):
        normalized["statusMessage"] = handler["statusMessage"]
    identity: dict = {"event_name": LABELS[event], "hooks": [normalized]}
    if group.get("matcher") is not None and event not in NO_MATCHER:
        identity["matcher"] = group["matcher"]
    data = json.dumps(identity, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(data.encode()).hexdigest()


@dataclass(frozen=True)
class Handler:
    """One of auditor's handlers in a Codex hooks file, as Codex keys and hashes it."""

    event: str
    keys: tuple[str, ...]  # the same handler under each spelling of the file's path
    hash: str
    command: str


def keys_for(hooks_file: Path) -> list[str]:
    """The spellings of `hooks_file` Codex may key its trust by: the path as given and, when
    it differs, the path with its links resolved (Codex canonicalizes $CODEX_HOME)."""
    given = os.path.abspath(hooks_file)
    real = os.path.realpath(hooks_file)
    return list(dict.fromkeys([given, real]))


def auditor_handlers(hooks_file: Path, settings: dict, is_ours) -> list[Handler]:
    """auditor's handlers in `settings` (a hooks file's content)."""
    out = []
    hooks = settings.get("hooks") if isinstance(settings, dict) else None
    for event, groups in (hooks or {}).items():
        if event not in LABELS or not isinstance(groups, list):
            continue
        for gi, group in enumerate(groups):
            handlers = group.get("hooks") if isinstance(group, dict) else None
            for hi, handler in enumerate(handlers if isinstance(handlers, list) else []):
                if not is_ours(handler):
                    continue
                keys = tuple(f"{b}:{LABELS[event]}:{gi}:{hi}" for b in keys_for(hooks_file))
                out.append(
                    Handler(event, keys, handler_hash(event, group, handler), handler["command"])
                )
    return out


def _load(path: Path):
    import tomlkit

    if not path.exists():
        return tomlkit.document()
    try:
        return tomlkit.parse(path.read_text(encoding="utf-8"))
    except Exception as exc:  # noqa: BLE001 - tomlkit's parse errors have no common public base
        raise AuditorError(
            f"{path} is not valid TOML ({exc}); fix it first, Codex's hook trust was not recorded"
        ) from None


def recorded(path: Path | None = None) -> dict[str, str]:
    """The trusted hashes recorded in Codex's config, by key."""
    path = path or config_path()
    try:
        doc = _load(path)
    except AuditorError:
        return {}
    state = doc.get("hooks", {}).get("state", {})
    return {
        str(k): str(v.get("trusted_hash"))
        for k, v in state.items()
        if isinstance(v, dict) and v.get("trusted_hash")
    }


def record(handlers: list[Handler], path: Path | None = None) -> bool:
    """Record `handlers` as trusted in Codex's config; return whether the file changed."""
    import tomlkit

    path = path or config_path()
    doc = _load(path)
    hooks = doc.get("hooks")
    if hooks is None:
        hooks = tomlkit.table(is_super_table=True)
        doc["hooks"] = hooks
    state = hooks.get("state")
    if state is None:
        state = tomlkit.table(is_super_table=True)
        hooks["state"] = state
    changed = False
    for h in handlers:
        for key in h.keys:
            entry = state.get(key)
            if entry is None:
                entry = tomlkit.table()
                state[key] = entry
            if entry.get("trusted_hash") != h.hash:
                entry["trusted_hash"] = h.hash
                changed = True
    if changed:
        path.parent.mkdir(parents=True, exist_ok=True)
        replace_atomically(path, tomlkit.dumps(doc).encode())
    return changed


def status(handler: Handler, have: dict[str, str]) -> str:
    """`trusted`, `modified` (another hash recorded: Codex skips it) or `untrusted`, given the
    recorded hashes `have`."""
    got = [have[k] for k in handler.keys if k in have]
    return "trusted" if handler.hash in got else "modified" if got else "untrusted"


def project_trusted(project_dir: Path, path: Path | None = None) -> bool:
    """Whether Codex loads `project_dir`'s own `.codex/` (hooks included): only for a project
    the user trusts, `[projects."DIR"] trust_level = "trusted"` for it or a folder above it
    (`codex exec --trust` records it; otherwise Codex warns that the project's configuration
    is disabled and runs none of its hooks)."""
    path = path or config_path()
    try:
        projects = _load(path).get("projects", {})
    except AuditorError:
        return False
    want = [Path(os.path.realpath(project_dir)), Path(os.path.abspath(project_dir))]
    for name, table in projects.items():
        if not isinstance(table, dict) or table.get("trust_level") != "trusted":
            continue
        where = Path(str(name))
        if any(w == where or where in w.parents for w in want):
            return True
    return False
