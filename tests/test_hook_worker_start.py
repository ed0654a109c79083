"""How many workers a burst of hook events starts: the real `auditor hook codex` command, ten
events of one session at once (Codex runs a session's tool calls in parallel and fires a
PostToolUse for each). One session, one worker: the first event takes the session's worker lock
and hands it to the worker it starts; the others find it held and start nothing."""

from __future__ import annotations

import json
import os
import subprocess
import time

from helpers.live import auditor_argv

from auditor.live.fast_path import session_dir, state_root, worker_alive

SESSION = "01a21ac5-8b99-7b80-9916-9e5f8db522aa"


def post_tool_use(n: int, transcript: str, session: str = SESSION) -> str:
    return json.dumps(
        {
            "session_id": session,
            "turn_id": "turn-1",
            "transcript_path": transcript,
            "cwd": "/path/to/project",
            "hook_event_name": "PostToolUse",
            "model": "gpt-5.5",
            "permission_mode": "bypassPermissions",
            "tool_name": "Bash",
            "tool_input": {"command": f"echo {n}"},
            "tool_response": f"{n}\n",
            "tool_use_id": f"call_{n}",
        }
    )


def _hook_process() -> subprocess.Popen:
    """A Codex hook event command started and waiting for its event on stdin."""
    return subprocess.Popen(
        [*auditor_argv(), "hook", "codex", "--verbose", "--idle", "1"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_ten_events_at_once_on_one_session_start_one_worker(tmp_path):
    transcript = str(tmp_path / "rollout-missing.jsonl")  # nothing to audit: workers just idle
    hooks = [_hook_process() for _ in range(10)]
    for n, hook in enumerate(hooks):  # all started before any is fed: they run at once
        assert hook.stdin is not None
        hook.stdin.write(post_tool_use(n, transcript))
        hook.stdin.close()
    said = []
    for hook in hooks:
        assert hook.stderr is not None
        said.append(hook.stderr.read())
        assert hook.wait(30) == 0, said[-1]
    started = [line for line in said if "worker" in line and "started" in line]
    sdir = session_dir(state_root(), "codex", SESSION)
    assert len(started) == 1, "\n".join(said)
    events = open(os.path.join(sdir, "events.jsonl")).read().splitlines()
    assert len(events) == 10  # every event recorded all the same
    deadline = time.monotonic() + 20
    while worker_alive(sdir) and time.monotonic() < deadline:
        time.sleep(0.1)
    log = open(os.path.join(sdir, "worker.log")).read()
    assert log.count("serving") == 1, log


def test_events_of_many_sessions_at_once_start_one_worker_each(tmp_path):
    """The storm at scale: 8 sessions with 4 events each, all at once (32 hook processes on
    the machine together): 8 workers start, one a session, and every event is recorded."""
    transcript = str(tmp_path / "rollout-missing.jsonl")
    sessions = [f"01a21ac5-8b99-7b80-9916-{n:012x}" for n in range(8)]
    feeds = [(s, n) for n in range(4) for s in sessions]
    hooks = [_hook_process() for _ in feeds]
    for (session, n), hook in zip(feeds, hooks, strict=True):
        assert hook.stdin is not None
        hook.stdin.write(post_tool_use(n, transcript, session))
        hook.stdin.close()
    said = []
    for hook in hooks:
        assert hook.stderr is not None
        said.append(hook.stderr.read())
        assert hook.wait(60) == 0, said[-1]
    started = [line for line in said if "worker" in line and "started" in line]
    assert len(started) == len(sessions), "\n".join(said)
    for session in sessions:
        sdir = session_dir(state_root(), "codex", session)
        events = open(os.path.join(sdir, "events.jsonl")).read().splitlines()
        assert len(events) == 4
        deadline = time.monotonic() + 30
        while worker_alive(sdir) and time.monotonic() < deadline:
            time.sleep(0.1)
        log = open(os.path.join(sdir, "worker.log")).read()
        assert log.count("serving") == 1, log
