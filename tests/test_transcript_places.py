"""A hook reads a transcript only where the agent keeps its transcripts (Claude Code's
~/.claude/projects, Codex's ~/.codex/sessions, Gemini CLI's ~/.gemini/tmp), or where
AUDITOR_TRANSCRIPT_DIRS allows: any other path in the hook's input (a file elsewhere, a link
from the agent's folder to /etc/passwd) is never read. Through the real `auditor hook` command.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.live import run_cli

from auditor.live.fast_path import state_root
from auditor.live.transcript_places import PLACES_ENV
from auditor.store.db import open_db

RECORD = {
    "type": "user",
    "uuid": "u-1",
    "sessionId": "s1",
    "timestamp": "2026-11-01T10:00:00Z",
    "cwd": "/work",
    "message": {"role": "user", "content": "Fix the failing test"},
}


@pytest.fixture(autouse=True)
def agents_folders_only(monkeypatch):
    monkeypatch.delenv(PLACES_ENV)


def write(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(RECORD) + "\n")
    return path


def hook(agent: str, path, *args: str, event: str = "PostToolUse", env=None) -> str:
    data = {"session_id": "s1", "transcript_path": str(path), "hook_event_name": event}
    done = run_cli("hook", agent, "--verbose", *args, stdin=json.dumps(data), env=env)
    assert done.returncode == 0, done.stderr
    return done.stderr.strip()


def spooled() -> list[Path]:
    return list(Path(state_root()).rglob("events.jsonl"))


def test_a_transcript_outside_the_agents_folders_is_never_read(tmp_path):
    elsewhere = write(tmp_path / "elsewhere" / "s1.jsonl")
    said = hook("claude-code", elsewhere)
    assert said.startswith(
        f"auditor hook claude-code: ignored: transcript_path '{elsewhere}' is not in "
        f"claude-code's transcript folders ({Path.home()}/.claude/projects): not read; name "
        f"other folders in {PLACES_ENV} to allow them"
    ), said
    assert spooled() == []


def test_a_link_in_the_agents_folder_to_a_file_elsewhere_is_never_read(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("root:x:0:0:root:/root:/bin/bash\n")
    link = Path.home() / ".claude" / "projects" / "-work" / "s1.jsonl"
    link.parent.mkdir(parents=True)
    link.symlink_to(secret)
    assert "is not in claude-code's transcript folders" in hook("claude-code", link)
    assert spooled() == []


@pytest.mark.parametrize(
    ("agent", "folder"),
    [
        ("claude-code", ".claude/projects/-work"),
        ("codex", ".codex/sessions/2026/11/27"),
        ("gemini-cli", ".gemini/tmp/0a1b2c/chats"),
    ],
)
def test_a_transcript_in_the_agents_own_folder_is_taken(agent, folder):
    path = write(Path.home() / folder / "s1.jsonl")
    event = "AfterTool" if agent == "gemini-cli" else "PostToolUse"
    assert "ignored" not in hook(agent, path, event=event)
    [events] = spooled()
    assert json.loads(events.read_text())["transcript_path"] == str(path)


def test_the_agents_own_home_settings_and_the_allowed_folders_are_followed(tmp_path):
    config = write(tmp_path / "claude-config" / "projects" / "-work" / "s1.jsonl")
    assert "ignored" not in hook(
        "claude-code", config, env={"CLAUDE_CONFIG_DIR": str(config.parents[2])}
    )
    mine = write(tmp_path / "my-transcripts" / "s1.jsonl")
    assert "is not in" in hook("claude-code", mine)
    assert "ignored" not in hook("claude-code", mine, env={PLACES_ENV: str(mine.parent)})


def test_the_sync_hook_never_reads_a_transcript_elsewhere(tmp_path, store_url):
    elsewhere = write(tmp_path / "elsewhere" / "s1.jsonl")
    data = {"session_id": "s1", "transcript_path": str(elsewhere), "hook_event_name": "Stop"}
    done = run_cli("hook", "claude-code", "--sync", stdin=json.dumps(data))
    assert done.returncode == 0, done.stderr
    with open_db(store_url).connect() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM messages").scalar_one() == 0
        [source] = conn.exec_driver_sql("SELECT count(*) FROM source_files").one()
    assert source == 0
