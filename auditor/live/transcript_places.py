"""Where each agent keeps its transcripts: a hook reads a `transcript_path` only there.

A hook's input names the file auditor reads and stores as the session's transcript. Any
process that can run the hook command can put any path in it (`/etc/passwd`, another user's
files it can read, a device): auditor takes only a `.jsonl` or `.json` file under the agent's
own folders, as the agents themselves place them:

- Claude Code: `~/.claude/projects` (`$CLAUDE_CONFIG_DIR/projects` when that is set);
- Codex: `~/.codex/sessions` and `~/.codex/archived_sessions` (under `$CODEX_HOME` when set);
- Gemini CLI: `~/.gemini/tmp` (`$GEMINI_CLI_HOME/.gemini/tmp` when that is set).

Other places are taken when named in `AUDITOR_TRANSCRIPT_DIRS` (folders separated by `:`, as
in PATH). Paths are compared once symbolic links are resolved, so a link inside the agent's
folder to a file elsewhere is refused too. Standard library only: the hook's fast path uses it.
"""

from __future__ import annotations

import os

PLACES_ENV = "AUDITOR_TRANSCRIPT_DIRS"
SUFFIXES = (".jsonl", ".json")


def agent_folders(agent: str, environ=None) -> list[str]:
    """The folders `agent` writes its transcripts in (they need not exist)."""
    env = os.environ if environ is None else environ
    home = env.get("HOME") or os.path.expanduser("~")
    if agent == "claude-code":
        return [
            os.path.join(env.get("CLAUDE_CONFIG_DIR") or os.path.join(home, ".claude"), "projects")
        ]
    if agent == "codex":
        base = env.get("CODEX_HOME") or os.path.join(home, ".codex")
        return [os.path.join(base, "sessions"), os.path.join(base, "archived_sessions")]
    if agent == "gemini-cli":
        return [os.path.join(env.get("GEMINI_CLI_HOME") or home, ".gemini", "tmp")]
    return []


def allowed_folders(agent: str, environ=None) -> list[str]:
    """The agent's folders and those `AUDITOR_TRANSCRIPT_DIRS` names."""
    env = os.environ if environ is None else environ
    more = [p for p in (env.get(PLACES_ENV) or "").split(os.pathsep) if p.strip()]
    return agent_folders(agent, env) + [os.path.expanduser(p) for p in more]


def refusal(agent: str, key: str, path, environ=None) -> str | None:
    """Why the hook must not read `path` as `agent`'s transcript, in one line; None when it
    may (a .jsonl/.json file, or one not written yet, under an allowed folder)."""
    shown = repr(str(path)[:200])
    if not isinstance(path, str) or not path.endswith(SUFFIXES):
        return f"{key} {shown} is not a .jsonl/.json file"
    try:
        if os.path.exists(path) and not os.path.isfile(path):
            return f"{key} {shown} is not a file"
        real = os.path.realpath(path)
    except ValueError:  # a NUL in the path
        return f"{key} {shown} is not a file's path"
    folders = allowed_folders(agent, environ)
    for folder in folders:
        root = os.path.realpath(folder)
        if os.path.commonpath([root, real]) == root and real != root:
            return None
    where = ", ".join(folders[:3])
    return (
        f"{key} {shown} is not in {agent}'s transcript folders ({where}): not read; name other "
        f"folders in {PLACES_ENV} to allow them"
    )
