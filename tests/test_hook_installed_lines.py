"""Hooks installed by an earlier auditor keep running: the agent's settings file holds the
command lines `auditor hook install` wrote then, and the agent runs them as they are.

The lines below are those the install wrote before the hook command was split into the event
command, the worker command and `--sync` (the claude-code event and asyncRewake handlers, the
`--sync` Stop handler, Codex's and Gemini CLI's waiting Stop handlers). They are run here
through the shell, as the agents run them, on a real Claude Code transcript from the corpus.
"""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest
from helpers.live import auditor_argv, stored
from helpers.wire import Reply, Stub, anthropic_response
from test_hook_live import FINAL, KEY, MID, WRITE, Session, context

from auditor.live.fast_path import DELIVER, note
from auditor.store import schema as s

pytestmark = [pytest.mark.corpus]

EARLIER = {
    "claude-code": [
        "{auditor} hook claude-code --observer claude; [ $? = 0 ]",
        "{auditor} hook claude-code --observer claude --rewake; s=$?; [ $s = 42 ] && exit 2; "
        "[ $s = 0 ]",
    ],
    "claude-code --sync": ["{auditor} hook claude-code --observer claude --sync; [ $? = 0 ]"],
    "codex": [
        "{auditor} hook codex --observer claude",
        "{auditor} hook codex --observer claude --wait",
    ],
    "gemini-cli": [
        "{auditor} hook gemini-cli --observer claude",
        "{auditor} hook gemini-cli --observer claude --wait",
    ],
}


@pytest.mark.parametrize("agent", sorted(EARLIER))
def test_the_install_still_writes_the_lines_it_wrote_before(agent, tmp_path):
    name, *flags = agent.split()
    out = subprocess.run(
        [*auditor_argv(), "hook", "install", name, "--observer", "claude", "--print", *flags],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "HOME": str(tmp_path)},
        check=True,
    ).stdout
    settings = json.loads(out)
    lines = {
        h["command"] for groups in settings["hooks"].values() for g in groups for h in g["hooks"]
    }
    (executable,) = {line.split(" hook ")[0] for line in lines}
    assert lines == {line.format(auditor=executable) for line in EARLIER[agent]}


class Installed(Session):
    """The session's hooks run as the earlier install wrote them, through the shell."""

    def line(self, which: str, *extra: str) -> str:
        base = " ".join(auditor_argv())
        return which.format(auditor=base).replace(
            " --observer claude",
            f" --observer claude --base-url {self.stub.url} --max-retries 0{''.join(' ' + e for e in extra)}",
        )

    def run_line(self, line: str, event: str, **extra) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["sh", "-c", line],
            input=json.dumps(self.payload(event, **extra)),
            capture_output=True,
            text=True,
            env={**os.environ, **KEY},
            timeout=90,
            check=False,
        )


@pytest.fixture
def installed(corpus, tmp_path):
    server = Stub(Reply(200, anthropic_response({"needsCorrection": True, "message": MID})))
    session = Installed(corpus, tmp_path, server)
    yield session
    session.stop_worker()
    server.close()


def test_an_earlier_event_line_audits_in_the_worker_and_hands_the_correction_over(installed):
    event, rewake = EARLIER["claude-code"]
    installed.grow(WRITE)
    done = installed.run_line(installed.line(event), "PostToolUse")
    assert (done.returncode, done.stdout) == (0, "")
    installed.wait_until(installed.staged, why="the worker to stage the correction")
    done = installed.run_line(installed.line(event), "PostToolUse", tool_name="TodoWrite")
    assert json.loads(done.stdout) == context(MID)
    installed.wait_until(lambda: len(stored(s.Injection)) == 1, why="the hand-over's record")


def test_an_earlier_rewake_line_wakes_claude_with_the_end_of_turn_correction(installed):
    event, rewake = EARLIER["claude-code"]
    installed.grow(FINAL)
    waiter = subprocess.Popen(
        ["sh", "-c", installed.line(rewake)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **KEY},
    )
    time.sleep(0.2)
    assert installed.run_line(installed.line(event), "Stop").returncode == 0
    out, err = waiter.communicate(json.dumps(installed.payload("Stop")), timeout=90)
    assert (waiter.returncode, err) == (2, note(MID, "Stop") + "\n")
    assert DELIVER != 2  # the guard in the line turns auditor's own status into Claude's 2


def test_an_earlier_sync_line_audits_while_the_agent_waits_and_blocks(installed):
    (sync,) = EARLIER["claude-code --sync"]
    installed.grow(FINAL)
    done = installed.run_line(installed.line(sync), "Stop")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["decision"] == "block"
    assert MID in json.loads(done.stdout)["reason"]
    [verdict] = stored(s.Verdict)
    assert (verdict.status, verdict.message) == ("ok", MID)
