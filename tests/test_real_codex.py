"""auditor's live hooks on the real Codex CLI (0.169.0 from npm), driven offline.

The model is a scripted Responses API server on 127.0.0.1 (helpers/openai_responses_server.py),
the observer a stand-in Gemini server answering by what it reads (helpers/wire.py), and the hooks
are installed by `auditor hook install codex --user` exactly as a user would, trust included.
Five prompts make one session (`codex exec`, then `codex exec resume`):

1. a tool round with five commands and an edit, audited while the model goes on: its correction
   reaches the model once, as hook context at the next tool round;
2. an edit and a final answer: the Stop handler waits for the end-of-turn audit and the model is
   handed its correction once, as the Stop hook's block;
3. a tool round whose correction is ready but not yet handed over when the user, having
   interrupted Codex, types again (4.): the correction is taken back;
4. a tool round still being audited when the user interrupts and types again (5.): the audit
   is cancelled.

Then the rollout is ingested: the tool calls and the tokens are those the model server reported,
and each correction the model was handed is stored as auditor's course correction.
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
from helpers.agents import CODEX, require
from helpers.live import auditor_argv, rows
from helpers.openai_responses_server import ResponsesServer, Turn, patch, say, shell, think
from helpers.store import stored_thread
from helpers.wire import Reply, Stub, gemini_response

from auditor.live.delivery import CORRECTION_MARKER
from auditor.live.fast_path import session_dir, state_root
from auditor.reports.followup import followup_report
from auditor.store import schema as s
from auditor.store.db import open_db

MID = "You changed add() but never ran the tests; run pytest before saying it works."
END = "You say negatives are handled, yet no test covers them; add one and run it."
TAKEN = "You are refactoring without running the tests first; run them before changing more."
PROMPTS = (
    "Fix add() in calc.py so that the tests pass.",
    "Also handle negative numbers.",
    "Refactor calc.py.",
    "Stop, leave calc.py as it was.",
    "Never mind, carry on.",
)
FIX = "*** Begin Patch\n*** Update File: calc.py\n@@\n-    return a - b\n+    return a + b\n*** End Patch\n"
NEG = "*** Begin Patch\n*** Update File: calc.py\n@@\n-    return a + b\n+    return int(a) + int(b)\n*** End Patch\n"
REFACTOR = "*** Begin Patch\n*** Add File: ops.py\n+ADD = 1\n*** End Patch\n"
# (Each patch applies: Codex 0.169 fires no PostToolUse for an apply_patch that fails.)
NOTES = "*** Begin Patch\n*** Add File: notes.txt\n+negatives: int()\n*** End Patch\n"


def round_of(tag: str, edit: str) -> list[dict]:
    """A tool round of five commands and one edit (the gate's default wants both)."""
    calls = [shell(f"{tag}_{i}", f"echo {tag}-{i}") for i in range(5)]
    return [think(f"Looking around ({tag})."), *calls, patch(f"{tag}_edit", edit)]


def wait_for(what, why: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {why}")
        time.sleep(0.05)


def observer_text(body) -> str:
    return json.dumps(body)


class Session:
    """One Codex session in a private CODEX_HOME, with auditor's hooks installed."""

    def __init__(self, tmp_path: Path, model: ResponsesServer, observer: Stub):
        self.codex = require(CODEX)
        self.home = Path(os.environ["HOME"])
        self.codex_home = self.home / ".codex"
        self.codex_home.mkdir()
        (self.codex_home / "config.toml").write_text(model.config_toml())
        self.project = tmp_path / "project"
        self.project.mkdir()
        (self.project / "calc.py").write_text("def add(a, b):\n    return a - b\n")
        self.env = {
            **os.environ,
            "CODEX_HOME": str(self.codex_home),
            "SCRIPTED_MODEL_KEY": "sk-scripted-test",
            "GEMINI_API_KEY": "AIza-TEST-dummy",
            "GOOGLE_GEMINI_BASE_URL": observer.url,
            "AUDITOR_WORKER_IDLE": "30",
            # The user's config keeps the busy-turn policy (five calls and an edit), so that
            # only the rounds scripted to be audited are (the hooks otherwise look after every
            # tool round), and the file's gate is shown reaching the hooks Codex runs.
            "AUDITOR_CONFIG": str(tmp_path / "config.toml"),
        }
        (tmp_path / "config.toml").write_text("[gate]\nmin_tool_calls = 5\nrequire_edit = true\n")
        self.id: str | None = None
        self.took: list[float] = []

    def install(self) -> str:
        done = subprocess.run(
            [*auditor_argv(), "hook", "install", "codex", "--user", "--observer", "gemini"],
            capture_output=True,
            text=True,
            env=self.env,
            cwd=self.project,
            check=True,
        )
        return done.stdout

    def argv(self, prompt: str) -> list[str]:
        head = [str(self.codex), "exec", "--json", "--skip-git-repo-check"]
        if self.id is None:
            return [*head, prompt]
        return [*head, "resume", self.id, prompt]

    def run(self, prompt: str) -> list[dict]:
        started = time.monotonic()
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
        self.took.append(time.monotonic() - started)
        assert done.returncode == 0, done.stderr[-2000:]
        return self._events(done.stdout)

    def start(self, prompt: str) -> subprocess.Popen:
        return subprocess.Popen(
            self.argv(prompt),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env,
            cwd=self.project,
            stdin=subprocess.DEVNULL,
        )

    def _events(self, out: str) -> list[dict]:
        events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        for e in events:
            if e.get("type") == "thread.started":
                self.id = e["thread_id"]
        return events

    @property
    def sdir(self) -> Path:
        assert self.id is not None
        return Path(session_dir(state_root(), "codex", self.id))

    def staged(self) -> bool:
        """A correction waits in the outbox (the session's only spool: the home is private)."""
        return any(Path(state_root()).glob("codex/*/outbox/*.json"))

    def spool_events(self) -> list[dict]:
        return [json.loads(x) for x in (self.sdir / "events.jsonl").read_text().splitlines()]

    def rollout(self) -> Path:
        [path] = (self.codex_home / "sessions").rglob(f"rollout-*{self.id}.jsonl")
        return path

    def stop_worker(self) -> None:
        try:
            pid = int((self.sdir / "worker.lock").read_text().split()[0])
            os.kill(pid, signal.SIGTERM)
        except (OSError, ValueError, IndexError, AssertionError):
            pass


def developer_notes(body: dict) -> list[str]:
    """The developer messages of a model request that carry auditor's marker."""
    return [
        part["text"]
        for item in body["input"]
        if item.get("type") == "message" and item.get("role") == "developer"
        for part in item["content"]
        if CORRECTION_MARKER in part.get("text", "")
    ]


def user_texts(body: dict) -> list[str]:
    return [
        part["text"]
        for item in body["input"]
        if item.get("type") == "message" and item.get("role") == "user"
        for part in item["content"]
        if "text" in part
    ]


@pytest.fixture(autouse=True)
def the_agents_own_folders(monkeypatch):
    """The hooks take the transcripts from where the agent really writes them (no
    AUDITOR_TRANSCRIPT_DIRS, which the other tests set to tmp_path)."""
    monkeypatch.delenv("AUDITOR_TRANSCRIPT_DIRS", raising=False)


@pytest.fixture
def observer():
    stub = Stub(Reply(200, gemini_response({"needsCorrection": False, "message": ""})))
    yield stub
    stub.close()


def test_the_real_codex_runs_the_hooks_and_is_handed_each_correction_once(tmp_path, observer):
    interrupted = [threading.Event(), threading.Event()]
    slow_audit = threading.Event()

    def judge(body) -> Reply:
        seen = observer_text(body)
        ok = Reply(200, gemini_response({"needsCorrection": False, "message": ""}))
        if "t4-" in seen:  # prompt 4's round: still being audited when the user types
            slow_audit.set()
            return Reply(
                200, gemini_response({"needsCorrection": True, "message": TAKEN}), delay=20
            )
        if "t3-" in seen:  # prompt 3's round: its correction waits when the user types
            return Reply(200, gemini_response({"needsCorrection": True, "message": TAKEN}))
        if "Negatives handled" in seen:
            return Reply(200, gemini_response({"needsCorrection": True, "message": END}))
        if "t1-" in seen and "t2-" not in seen and CORRECTION_MARKER not in seen:
            return Reply(200, gemini_response({"needsCorrection": True, "message": MID}))
        return ok

    observer.answer = judge
    session: Session | None = None

    def until_staged() -> None:
        assert session is not None
        wait_for(session.staged, "the tool round's correction to be staged")

    def until_interrupted(n: int):
        def wait() -> bool:
            interrupted[n].wait(60)
            return False  # Codex was interrupted: this call is never answered

        return wait

    script = [
        # prompt 1: a round audited while the model goes on, its correction at the next round
        Turn(round_of("t1", FIX)),
        Turn([shell("t1_tests", "echo 3 passed")], before=until_staged),
        Turn([say("Fixed add(); the tests pass.")]),
        # prompt 2: the end of the turn audited while Codex waits at Stop
        Turn(round_of("t2", NEG)),
        Turn([say("Negatives handled.")]),
        Turn([say("Added a test for negatives; it passes.")]),  # after the Stop hook's block
        # prompt 3: interrupted with a correction staged; prompt 4 takes it back
        Turn(round_of("t3", REFACTOR)),
        Turn([say("(never sent)")], before=until_interrupted(0)),
        # prompt 4: interrupted with an audit under way; prompt 5 cancels it
        Turn(round_of("t4", NOTES)),
        Turn([say("(never sent)")], before=until_interrupted(1)),
        Turn([say("Carrying on.")]),
    ]
    model = ResponsesServer(script)
    try:
        session = Session(tmp_path, model, observer)
        said = session.install()
        assert "recorded your trust in auditor's 3 handlers" in said

        session.run(PROMPTS[0])
        mid_request = model.requests[2]
        assert developer_notes(mid_request) == [f"{CORRECTION_MARKER} {MID}"]
        assert developer_notes(model.requests[1]) == []

        session.run(PROMPTS[1])
        after_block = model.requests[5]
        end_prompts = [t for t in user_texts(after_block) if END in t]
        assert len(end_prompts) == 1 and end_prompts[0].startswith("<hook_prompt")
        assert developer_notes(after_block) == [f"{CORRECTION_MARKER} {MID}"]  # history only

        third = session.start(PROMPTS[2])
        wait_for(lambda: len(model.requests) >= 8, "prompt 3's last model call", 60)
        wait_for(session.staged, "prompt 3's correction to be staged")
        third.send_signal(signal.SIGINT)  # the user interrupts Codex...
        third.wait(30)
        interrupted[0].set()
        fourth = session.start(PROMPTS[3])  # ...and types again
        wait_for(lambda: len(model.requests) >= 10, "prompt 4's last model call", 60)
        wait_for(slow_audit.is_set, "prompt 4's round to be under audit")
        assert not session.staged()  # taken back
        fourth.send_signal(signal.SIGINT)
        fourth.wait(30)
        interrupted[1].set()
        session.run(PROMPTS[4])
        # The worker records what the prompts took back and cancelled, then may go.
        wait_for(lambda: not list((session.sdir / "dropped").glob("*.json")), "the take-back")
        wait_for(
            lambda: any(v.status == "cancelled" for v in rows(open_db(), s.Verdict)),
            "the cancelled audit",
        )
        session.stop_worker()

        # Every event reached auditor: each prompt, each tool call, each stop.
        events = session.spool_events()
        names = [e["hook_event_name"] for e in events]
        calls = {
            item["call_id"]
            for turn_request in model.requests
            for item in turn_request["input"]
            if item.get("type") in ("function_call_output", "custom_tool_call_output")
        }
        assert {e["tool_use_id"] for e in events if e["hook_event_name"] == "PostToolUse"} == calls
        assert names.count("UserPromptSubmit") == 5
        assert names.count("PostToolUse") == len(calls) == 6 + 1 + 6 + 6 + 6
        # No model call was made that the script did not plan.
        assert model.unscripted == 0

        # The rollout ingests with the tool calls and tokens the model server reported.
        ingest = subprocess.run(
            [*auditor_argv(), "ingest", str(session.rollout())],
            capture_output=True,
            text=True,
            env=session.env,
            check=True,
        )
        assert "0 with problems" in ingest.stderr + ingest.stdout
        engine = open_db()
        thread = stored_thread(engine, "codex", session.id)
        assert set(thread.calls) == calls
        answered = model.usages
        assert thread.tokens.input == sum(u.input - u.cached for u in answered)
        assert thread.tokens.cache_read == sum(u.cached for u in answered)
        assert thread.tokens.output == sum(u.output for u in answered)
        assert thread.tokens.reasoning == sum(u.reasoning for u in answered)

        # Both corrections the model was handed are auditor's course corrections in the store;
        # the one taken back is recorded as held back, the audit under way as cancelled.
        corrections = [m for m in rows(engine, s.Message) if m.source_type == "course-correction"]
        assert [(m.role, MID in json.dumps(m.blocks)) for m in corrections] == [
            ("system", True),
            ("user", False),
        ]
        assert END in json.dumps(corrections[1].blocks)
        # ...and `report followup` finds both (before: the hook-context one was meta, 1 of 2).
        assert len(followup_report(engine).rows) == 2
        delivered = [(i.status, i.target) for i in rows(engine, s.Injection)]
        assert ("delivered", "hook PostToolUse") in delivered
        assert ("delivered", "hook Stop-wait") in delivered
        held = [i.error for i in rows(engine, s.Injection) if i.status == "skipped"]
        assert any(e.startswith("user-wrote-again") for e in held), held
        cancelled = [v for v in rows(engine, s.Verdict) if v.status == "cancelled"]
        assert len(cancelled) == 1
        # Nothing auditor took back ever reached the model.
        assert not any(TAKEN in json.dumps(r) for r in model.requests)

        # `auditor hook status` tells the same story.
        path = f"{session.codex.parent}{os.pathsep}{session.env['PATH']}"
        told = subprocess.run(
            [*auditor_argv(), "hook", "status", "--json", "--dir", str(session.project)],
            capture_output=True,
            text=True,
            env={**session.env, "PATH": path},
            check=False,
        )
        assert told.returncode == 0, told.stdout
        report = json.loads(told.stdout)
        assert report["agents"]["codex"]["known"] is True
        activity = report["activity"]["codex"]
        assert activity["delivered"] == 2
        [held_back] = activity["held_back"]
        assert held_back["why"].startswith("user-wrote-again")
        assert activity["sessions"][0]["session"] == session.id
    finally:
        for gate in interrupted:
            gate.set()
        if session is not None and session.id is not None:
            session.stop_worker()
        model.close()


def test_project_hooks_run_once_codex_trusts_the_project_and_stay_trusted_on_reinstall(
    tmp_path, observer
):
    """A project install: Codex reads the project's .codex/ only once the project is trusted
    (`codex exec --trust`), and a reinstall with other options changes the handlers, whose trust
    the install records again."""
    script = [
        Turn([shell(f"p{n}", "echo hi")]) if n % 2 == 0 else Turn([say("Done.")]) for n in range(6)
    ]
    model = ResponsesServer(script)
    session = None
    try:
        session = Session(tmp_path, model, observer)
        # --no-wait: these turns are not what is checked here, and need not wait for audits
        install = [*auditor_argv(), "hook", "install", "codex", "-o", "gemini", "--no-wait"]
        said = subprocess.run(
            install,
            capture_output=True,
            text=True,
            env=session.env,
            cwd=session.project,
            check=True,
        ).stdout
        assert "codex exec --trust" in said  # the project is not trusted yet, and that is said

        def prompt(*extra: str) -> list[str]:
            done = subprocess.run(
                [str(session.codex), "exec", "--json", "--skip-git-repo-check", *extra, "Say hi."],
                capture_output=True,
                text=True,
                env=session.env,
                cwd=session.project,
                stdin=subprocess.DEVNULL,
                timeout=90,
                check=True,
            )
            sid = json.loads(done.stdout.splitlines()[0])["thread_id"]
            log = Path(session_dir(state_root(), "codex", sid)) / "events.jsonl"
            if not log.exists():
                return []
            return [json.loads(x)["hook_event_name"] for x in log.read_text().splitlines()]

        assert prompt() == []  # an untrusted project: Codex runs none of its hooks
        assert prompt("--trust") == ["UserPromptSubmit", "PostToolUse", "Stop"]
        subprocess.run(
            [*install, "--deadline", "20"],
            env=session.env,
            cwd=session.project,
            check=True,
            capture_output=True,
        )
        assert prompt() == ["UserPromptSubmit", "PostToolUse", "Stop"]
    finally:
        for lock in Path(state_root()).glob("codex/*/worker.lock"):
            try:
                os.kill(int(lock.read_text().split()[0]), signal.SIGTERM)
            except (OSError, ValueError, IndexError):
                pass
        model.close()
