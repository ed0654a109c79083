"""What a hook event may carry is bounded before anything is kept: a session_id of `.` or `..`
stays inside the spool's own folders, a transcript_path that is no transcript (`/etc/passwd`)
is never read, a huge input is not copied into the spool. Each through the real `auditor hook`
command, as the agents run it.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from helpers.live import auditor_argv, run_cli

from auditor.live.fast_path import FIELD_KEPT, state_root


def hook(payload: dict | str) -> str:
    stdin = payload if isinstance(payload, str) else json.dumps(payload)
    done = run_cli("hook", "claude-code", "--verbose", stdin=stdin)
    assert done.returncode == 0, done.stderr
    return done.stderr.strip()


def event(tmp_path: Path, **fields) -> dict:
    transcript = tmp_path / "projects" / "-work" / "s1.jsonl"
    transcript.parent.mkdir(parents=True, exist_ok=True)
    transcript.touch()
    return {
        "session_id": "s1",
        "transcript_path": str(transcript),
        "cwd": "/work",
        "hook_event_name": "UserPromptSubmit",
        "prompt": "go on",
        **fields,
    }


@pytest.mark.parametrize("session", [".", ".."])
def test_a_session_id_of_dots_stays_inside_the_spools_folders(tmp_path, session):
    said = hook(event(tmp_path, session_id=session))
    assert "recorded" in said, said
    agent_dir = Path(state_root()) / "claude-code"
    [events] = list(Path(state_root()).rglob("events.jsonl"))
    assert events.parent.parent == agent_dir  # one session folder below the agent's
    assert events.parent.name not in (".", "..")


def test_a_transcript_path_that_is_no_transcript_is_never_read(tmp_path):
    said = hook(event(tmp_path, transcript_path="/etc/passwd", hook_event_name="Stop"))
    assert said.startswith("auditor hook claude-code: ignored: transcript_path '/etc/passwd'")
    assert not list(Path(state_root()).rglob("events.jsonl"))


def test_a_huge_field_is_cut_and_a_huge_input_ignored(tmp_path):
    hook(event(tmp_path, cwd="/work/" + "d" * 50_000_000))
    [events] = list(Path(state_root()).rglob("events.jsonl"))
    assert events.stat().st_size < FIELD_KEPT + 2_000  # not 50 MB
    too_big = json.dumps(event(tmp_path, tool_response="x" * (65 << 20)))
    said = hook(too_big)
    assert "the hook input is over 64 MB: ignored" in said
    assert events.stat().st_size < 2 * (FIELD_KEPT + 2_000)


@pytest.mark.parametrize(
    "raw_id", [b"s\xff\xfe1", b"s\\ud8001"], ids=["invalid-utf8", "lone-surrogate"]
)
def test_a_session_id_that_is_no_valid_text_is_still_recorded(tmp_path, raw_id):
    body = json.dumps(event(tmp_path, session_id="SESSION")).encode()
    done = subprocess.run(
        [*auditor_argv(), "hook", "claude-code", "--verbose"],
        input=body.replace(b"SESSION", raw_id),  # bytes, as the agent writes them
        capture_output=True,
        timeout=60,
        check=False,
    )
    said = done.stderr.decode()
    assert "recorded" in said, said
    [events] = list(Path(state_root()).rglob("events.jsonl"))
    recorded = json.loads(events.read_text())
    recorded["thread"].encode("utf-8")  # storable as the thread's id
