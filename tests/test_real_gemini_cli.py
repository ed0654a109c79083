"""auditor's live hooks and chat-log reader on the real Gemini CLI (0.61.0 from npm), offline.

The model is a scripted Gemini API server on 127.0.0.1 (helpers/gemini_api_server.py), the
observer a stand-in Anthropic server answering by what it reads (helpers/wire.py): an agent is
never audited by its own vendor. The hooks are installed by `auditor hook install gemini-cli
--user` exactly as a user would. Five headless prompts make one session (`gemini -p`, then
`gemini --resume latest -p`):

1. two tool rounds: the first is audited while the model goes on and its correction reaches the
   model once, as `<hook_context>` in the second round's tool result (AfterTool);
2. an answer that ends the turn: AfterAgent waits for the end-of-turn audit and its correction
   reaches the model once, as the next prompt;
3. a tool round whose correction is ready when Gemini CLI is killed: the prompt typed next, in
   the resumed session (4), takes it back (BeforeAgent);
4. a tool round still under audit when Gemini CLI is killed again: the next prompt (5) cancels
   the audit. Neither correction ever reaches the model.

Then the chat log is ingested: messages, tool calls with their results and the tokens are
those the model server sent.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from helpers.agents import GEMINI_CLI, require
from helpers.gemini_api_server import MODEL, GeminiApiServer, Turn, call, say, think
from helpers.live import auditor_argv, rows
from helpers.store import stored_thread
from helpers.wire import Reply, Stub, anthropic_response

from auditor.live.delivery import CORRECTION_MARKER
from auditor.live.fast_path import state_root
from auditor.store import schema as s
from auditor.store.db import open_db

MID = "You read config.ini but the task names settings.ini; read the right file."
END = "You say the port is set, yet you never wrote settings.ini; write it before you stop."
TAKEN = "You are renaming files without reading them first; read them before changing more."
CANCELLED = "You read b.txt but the user asked for a.txt; go back to a.txt."
PROMPTS = (
    "Which port does settings.ini set?",
    "Set the port to 8080.",
    "Now tidy the folder.",
    "Look at b.txt instead.",
    "Stop, leave the folder as it is.",
)
FILES = {
    "config.ini": "port=1 # t1-config\n",
    "settings.ini": "port=2 # t1-settings\n",
    "a.txt": "t3a-content\n",
    "b.txt": "t3b-content\n",
}


@pytest.fixture(autouse=True)
def the_agents_own_folders(monkeypatch):
    """The hooks take the transcripts from where the agent really writes them (no
    AUDITOR_TRANSCRIPT_DIRS, which the other tests set to tmp_path)."""
    monkeypatch.delenv("AUDITOR_TRANSCRIPT_DIRS", raising=False)


def wait_for(what, why: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {why}")
        time.sleep(0.05)


def correction(text: str, delay: float = 0.0) -> Reply:
    return Reply(200, anthropic_response({"needsCorrection": True, "message": text}), delay=delay)


class Session:
    """One Gemini CLI session in a private HOME, with auditor's hooks installed."""

    def __init__(self, tmp_path: Path, model: GeminiApiServer, observer: Stub):
        self.gemini = require(GEMINI_CLI)
        self.home = Path(os.environ["HOME"])
        settings = self.home / ".gemini" / "settings.json"
        settings.parent.mkdir()
        # An API key login, no usage statistics or update checks: nothing leaves 127.0.0.1.
        settings.write_text(
            json.dumps(
                {
                    "security": {"auth": {"selectedType": "gemini-api-key"}},
                    "privacy": {"usageStatisticsEnabled": False},
                    "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
                }
            )
        )
        # The gate's defaults want five tool calls and an edit before an audit; this session's
        # rounds are single reads.
        config = self.home / ".config" / "auditor" / "config.toml"
        config.parent.mkdir(parents=True)
        config.write_text("[gate]\nmin_tool_calls = 1\nrequire_edit = false\n")
        self.project = tmp_path / "project"
        self.project.mkdir()
        for name, text in FILES.items():
            (self.project / name).write_text(text)
        self.env = {
            **os.environ,
            "GOOGLE_GEMINI_BASE_URL": model.url,
            "GEMINI_API_KEY": "AIza-scripted-test",
            "ANTHROPIC_BASE_URL": observer.url,
            "ANTHROPIC_API_KEY": "sk-ant-test-dummy",
            "AUDITOR_WORKER_IDLE": "30",
        }
        self.runs = 0

    def install(self) -> str:
        done = subprocess.run(
            [*auditor_argv(), "hook", "install", "gemini-cli", "--user", "--observer", "claude"],
            capture_output=True,
            text=True,
            env=self.env,
            cwd=self.project,
            check=True,
        )
        return done.stdout

    def argv(self, prompt: str) -> list[str]:
        resume = ["--resume", "latest"] if self.runs else []
        self.runs += 1
        return [str(self.gemini), "--skip-trust", "-m", MODEL, *resume, "-p", prompt]

    def run(self, prompt: str) -> str:
        done = subprocess.run(
            self.argv(prompt),
            capture_output=True,
            text=True,
            env=self.env,
            cwd=self.project,
            stdin=subprocess.DEVNULL,
            timeout=90,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    def start(self, prompt: str) -> subprocess.Popen:
        return subprocess.Popen(
            self.argv(prompt),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=self.env,
            cwd=self.project,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # Gemini CLI runs itself again as a child: kill them both
        )

    def spool(self) -> Path:
        [sdir] = (Path(state_root()) / "gemini-cli").iterdir()
        return sdir

    def staged(self) -> bool:
        return any(Path(state_root()).glob("gemini-cli/*/outbox/*.json"))

    def events(self) -> list[dict]:
        return [json.loads(x) for x in (self.spool() / "events.jsonl").read_text().splitlines()]

    def logs(self) -> list[str]:
        """The session's chat logs: a resumed session is appended to its log, and Gemini CLI
        also starts a new log holding the whole history."""
        return sorted(str(p) for p in (self.home / ".gemini" / "tmp").glob("*/chats/*.jsonl"))

    def stop_worker(self) -> None:
        try:
            pid = int((self.spool() / "worker.lock").read_text().split()[0])
            os.kill(pid, signal.SIGTERM)
        except (OSError, ValueError, IndexError):
            pass


def texts(body: dict) -> list[str]:
    """Every text the model was sent: text parts and tool results."""
    out = []
    for content in body["contents"]:
        for part in content["parts"]:
            if "text" in part:
                out.append(part["text"])
            elif "functionResponse" in part:
                response = part["functionResponse"]["response"]
                out.append(response.get("output") or json.dumps(response))
    return out


def hook_contexts(body: dict) -> list[str]:
    return [t for t in texts(body) if "<hook_context>" in t]


def test_the_real_gemini_cli_runs_the_hooks_and_is_handed_each_correction_once(
    tmp_path,
):
    interrupted = [threading.Event(), threading.Event()]
    audits_b = threading.Event()

    def judge(body) -> Reply:
        seen = json.dumps(body)
        ok = Reply(200, anthropic_response({"needsCorrection": False, "message": None}))
        if "Left the folder as it is" in seen:
            return ok
        if "t3b-content" in seen:  # still under audit when the user types again
            audits_b.set()
            return correction(CANCELLED, delay=20)
        if "t3a-content" in seen:  # ready, not yet handed over, when the user types again
            return correction(TAKEN)
        if "The port is set to 8080" in seen and "I wrote it" not in seen:
            return correction(END)
        if "t1-config" in seen and "t1-settings" not in seen:
            return correction(MID)
        return ok

    observer = Stub(Reply(200, anthropic_response()), answer=judge)
    session: Session | None = None

    def until_staged() -> None:
        assert session is not None
        wait_for(session.staged, "the first tool round's correction to be staged")

    def until_interrupted(n: int):
        def held() -> bool:
            interrupted[n].wait(60)
            return False  # Gemini CLI was killed: this call is never answered

        return held

    script = [
        # prompt 1: a round audited while the model goes on, its correction at the next round
        Turn([think("Reading the config."), call("read_file", file_path="config.ini")]),
        Turn([call("read_file", file_path="settings.ini")], before=until_staged),
        Turn([say("settings.ini sets port 2.")]),
        # prompt 2: the end of the turn audited while Gemini CLI waits at AfterAgent
        Turn([call("read_file", file_path="settings.ini")]),
        Turn([say("The port is set to 8080.")]),
        Turn([say("I wrote it now: settings.ini has port=8080.")]),  # after the correction
        # prompt 3: killed with its tool round's correction ready
        Turn([call("read_file", file_path="a.txt")]),
        Turn([say("(never sent)")], before=until_interrupted(0)),
        # prompt 4, typed after the kill: killed again with its tool round under audit
        Turn([call("read_file", file_path="b.txt")]),
        Turn([say("(never sent)")], before=until_interrupted(1)),
        # prompt 5, typed after the second kill
        Turn([say("Left the folder as it is.")]),
    ]
    model = GeminiApiServer(script)
    try:
        session = Session(tmp_path, model, observer)
        said = session.install()
        assert said.startswith(f"installed in {session.home / '.gemini' / 'settings.json'}")
        started = time.monotonic()

        session.run(PROMPTS[0])
        assert hook_contexts(model.requests[1]) == []
        [context] = hook_contexts(model.requests[2])
        assert context.endswith(f"<hook_context>{CORRECTION_MARKER} {MID}</hook_context>")

        session.run(PROMPTS[1])
        after_block = model.requests[5]
        assert [t for t in texts(after_block) if END in t] == [f"{CORRECTION_MARKER} {END}"]
        # Prompt 1's, in the history only (a resumed Gemini CLI 0.61.0 sends every earlier tool
        # result twice: from the reply's calls and from the user turn that carried them).
        assert set(hook_contexts(after_block)) == {context}

        third = session.start(PROMPTS[2])
        wait_for(lambda: len(model.requests) >= 8, "prompt 3's last model call", 60)
        wait_for(session.staged, "prompt 3's correction to be staged")
        os.killpg(third.pid, signal.SIGKILL)  # the user ends Gemini CLI...
        third.wait(30)
        interrupted[0].set()
        fourth = session.start(PROMPTS[3])  # ...and types again: the correction is taken back
        wait_for(lambda: len(model.requests) >= 10, "prompt 4's last model call", 60)
        wait_for(audits_b.is_set, "prompt 4's tool round to be under audit")
        assert not session.staged()
        os.killpg(fourth.pid, signal.SIGKILL)
        fourth.wait(30)
        interrupted[1].set()
        session.run(PROMPTS[4])  # the next prompt cancels the audit under way
        wait_for(
            lambda: any(v.status == "cancelled" for v in rows(open_db(), s.Verdict)),
            "the cancelled audit",
        )
        session.stop_worker()
        took = time.monotonic() - started

        # Every event reached auditor, under Claude Code's names.
        events = session.events()
        names = [e["hook_event_name"] for e in events]
        prompts = [e["typed"] for e in events if e["hook_event_name"] == "UserPromptSubmit"]
        # BeforeAgent: the five typed prompts, and the AfterAgent correction coming back
        assert prompts == [True, True, False, True, True, True]
        assert names.count("PostToolUse") == 5  # AfterTool
        assert names.count("Stop") == 4  # AfterAgent: prompts 1, 2 (twice), 5
        assert names.count("SessionEnd") == 3  # not for the runs that were killed
        assert {e.get("agent_event") for e in events} >= {"AfterTool", "BeforeAgent", "AfterAgent"}
        assert model.unscripted == 0 and model.other == []
        # Nothing taken back ever reached the model.
        assert not any(TAKEN in json.dumps(r) or CANCELLED in json.dumps(r) for r in model.requests)

        # The chat log ingests: its messages, tool calls with results, and the server's tokens.
        done = subprocess.run(
            [*auditor_argv(), "ingest", *session.logs()],
            capture_output=True,
            text=True,
            env=session.env,
            check=True,
        )
        assert "0 with problems" in done.stdout + done.stderr
        engine = open_db()
        [native] = {e["session_id"] for e in events}
        thread = stored_thread(engine, "gemini-cli", native)
        assert thread.thread["cwd"] == str(session.project)
        sent_calls = [p["functionCall"] for t in script[:9] for p in t.parts if "functionCall" in p]
        assert [c.name for c in thread.calls.values()] == [c["name"] for c in sent_calls]
        assert all(c.result_message_id is not None for c in thread.calls.values())
        results = [m for m in thread.messages if m.role == "tool"]
        assert [json.loads(m.blocks)[0]["text"].strip() for m in results] == [
            FILES[c["args"]["file_path"]].strip() for c in sent_calls
        ]
        kinds = [(m.role, m.source_type) for m in thread.messages]
        assert kinds.count(("user", "user")) == 5
        assert kinds.count(("user", "course-correction")) == 2  # hook context, AfterAgent's
        answered = model.usages
        assert thread.tokens.bills == len(answered) == 9
        assert thread.tokens.input == sum(u.prompt - u.cached for u in answered)
        assert thread.tokens.cache_read == sum(u.cached for u in answered)
        assert thread.tokens.output == sum(u.candidates + u.thoughts for u in answered)
        assert thread.tokens.reasoning == sum(u.thoughts for u in answered)

        # The store's record: two corrections delivered, one taken back, one audit cancelled.
        held = [i.error for i in rows(engine, s.Injection) if i.status == "skipped"]
        assert [e.split(":")[0] for e in held] == ["user-wrote-again"]
        delivered = [(i.status, i.target) for i in rows(engine, s.Injection)]
        assert ("delivered", "hook AfterTool") in delivered
        assert ("delivered", "hook AfterAgent-wait") in delivered
        assert len([v for v in rows(engine, s.Verdict) if v.status == "cancelled"]) == 1
        # `auditor hook status` tells the same story.
        path = f"{session.gemini.parent}{os.pathsep}{session.env['PATH']}"
        told = subprocess.run(
            [*auditor_argv(), "hook", "status", "--json", "--dir", str(session.project)],
            capture_output=True,
            text=True,
            env={**session.env, "PATH": path},
            check=False,
        )
        assert told.returncode == 0, told.stdout
        report = json.loads(told.stdout)
        assert report["agents"]["gemini-cli"]["known"] is True
        assert report["activity"]["gemini-cli"]["delivered"] == 2
        print(
            f"\nfive prompts, {len(model.requests)} model calls, {len(events)} hook events: {took:.1f}s"
        )
    finally:
        for event in interrupted:
            event.set()
        if session is not None:
            session.stop_worker()
        model.close()
        observer.close()
