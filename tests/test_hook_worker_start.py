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


def post_tool_use(n: int, transcript: str) -> str:
    return json.dumps(
        {
            "session_id": SESSION,
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


def test_ten_events_at_once_on_one_session_start_one_worker(tmp_path):
    transcript = str(tmp_path / "rollout-missing.jsonl")  # nothing to audit: workers just idle
    hooks = [
        subprocess.Popen(
            [*auditor_argv(), "hook", "codex", "--verbose", "--idle", "1"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(10)
    ]
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
