"""auditor's live hooks on the real Claude Code (2.1.328 from npm), driven offline.

The model is a scripted Anthropic Messages server on 127.0.0.1 (helpers/anthropic_server.py),
the observer a stand-in Gemini server answering by what it reads (helpers/wire.py), and the
hooks are installed by `auditor hook install claude-code -o gemini` as the README says. One
session (`claude -p` reading prompts as stream-json, so that one client serves four prompts):

A. a tool round of four calls and an edit (too few for the gate), then a test run that fails:
   the failed call is audited at its own event (PostToolUseFailure) while the model goes on,
   and its correction reaches the model once, as hook context at the next failing run;
B. a round with a background command and a final answer: the end of the turn is audited; the
   background command finishes meanwhile and the client submits a `<task-notification>`
   prompt, which cancels nothing; the correction wakes the model once through the --rewake
   handler, and the client's notification of that re-wake starts no second audit;
C. a round and a final answer whose audit is slow; the user types again (D) before it ends:
   the audit is cancelled and nothing reaches the model.

Then the transcript the client wrote is read from the store: tool calls, and the four token
counts of every model call as the server reported them. Another test streams one answer of two
calls slowly, as the API does, so that the client writes the first call's result between the
calls: the round is audited once, whole. A last one breaks the install in the ways it breaks in
the field and checks the client is never woken by it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers.agents import CLAUDE_CODE, require
from helpers.anthropic_server import (
    AnthropicServer,
    Text,
    ToolUse,
    Turn,
    Usage,
    content_text,
)
from helpers.live import auditor_argv, rows
from helpers.store import stored_thread
from helpers.wire import Reply, Stub, gemini_response

from auditor.live.delivery import CORRECTION_MARKER
from auditor.live.fast_path import session_dir, state_root, worker_alive
from auditor.store import schema as s
from auditor.store.db import open_db

MID = "The test run failed twice and you keep rerunning it; read the failure before going on."
END = "You say both tests pass, but the empty-input test was never run; run it."
LATE = "You declared it done without running anything; run the tests."
PROMPTS = {
    "A": "Add a test for parse() and make it pass.",
    "B": "Also cover empty input.",
    "C": "Tidy up the module.",
    "D": "Stop, leave it as it is.",
}
FAIL = "echo 'FAILED test_parse.py::test_parse MARK-A-FAIL' >&2; exit 1"


def bash(tag: str, command: str, **extra) -> ToolUse:
    return ToolUse("Bash", {"command": command, "description": tag, **extra}, id=f"toolu_{tag}")


def write(tag: str, path: Path, content: str) -> ToolUse:
    return ToolUse("Write", {"file_path": str(path), "content": content}, id=f"toolu_{tag}")


class Model:
    """The scripted model: what it answers depends on what the request ends with."""

    def __init__(self, project: Path):
        self.project = project
        self.usages: dict[str, Usage] = {}  # message id -> usage reported
        self.seen: list[str] = []  # which step answered each request
        n = iter(range(1, 100))

        def u() -> Usage:  # distinct counts for every call, so that a mix-up shows
            i = next(n)
            return Usage(1000 + i, 20 + i, 100 * i, 500 + i)

        p = project
        outbox = f"{state_root()}/claude-code/*/outbox/*.json"
        wait_for_outbox = (
            f"for i in $(seq 400); do ls {outbox} >/dev/null 2>&1 && break; sleep 0.1; done"
        )
        self.steps = {
            "A1": Turn(
                [
                    Text("I'll look at the module first."),
                    bash("a1", "ls"),
                    bash("a2", "cat parse.py"),
                    write("a3", p / "test_parse.py", "from parse import parse\n"),
                    bash("a4", "echo MARK-A-ROUND"),
                ],
                u(),
            ),
            "A2": Turn([bash("a5", FAIL)], u()),
            # The failed call's round is over once the model's next answer is written; the
            # run it asks for fails again once the correction is ready, so that the correction
            # is handed over at that run's event.
            "A3": Turn([bash("a6", f"{wait_for_outbox}; {FAIL}")], u()),
            "A4": Turn([Text("Fixed; the tests pass.")], u()),
            "B1": Turn(
                [
                    write("b1", p / "test_empty.py", "def test_empty():\n    pass\n"),
                    bash("b2", "sleep 2; echo MARK-B-BACKGROUND", run_in_background=True),
                    bash("b3", "echo MARK-B-ROUND"),
                    bash("b4", "ls"),
                    bash("b5", "cat test_empty.py"),
                ],
                u(),
            ),
            "B2": Turn([Text("Done: both tests pass. MARK-B-END")], u()),
            "B-notified": Turn([Text("The background check finished.")], u()),
            "B-woken": Turn([Text("Understood, I will run the empty-input test.")], u()),
            "C1": Turn(
                [
                    write("c1", p / "parse.py", "def parse(s):\n    return s.split()\n"),
                    bash("c2", "echo MARK-C-ROUND"),
                    bash("c3", "ls"),
                    bash("c4", "cat parse.py"),
                    bash("c5", "wc -l parse.py"),
                ],
                u(),
            ),
            "C2": Turn([Text("Tidied. MARK-C-END")], u()),
            "D1": Turn([Text("OK, leaving it.")], u()),
        }
        self.after_tool = {"a4": "A2", "a5": "A3", "a6": "A4", "b5": "B2", "c5": "C2"}

    def __call__(self, body: dict) -> Turn:
        step = self.route(body)
        self.seen.append(step)
        turn = self.steps.get(step) or Turn([Text("Done.")])
        return turn

    def route(self, body: dict) -> str:
        last = next(m for m in reversed(body["messages"]) if m["role"] == "user")
        content = last["content"]
        blocks = content if isinstance(content, list) else []
        results = [b["tool_use_id"] for b in blocks if b.get("type") == "tool_result"]
        if results:
            tag = max(results, key=lambda r: r.split("_")[-1])[len("toolu_") :]
            return self.after_tool.get(tag, f"after {tag}")
        text = content_text(content)
        if END in text:
            return "B-woken"
        if "MARK-B-BACKGROUND" in text or "Background command" in text:
            return "B-notified"
        for key, prompt in PROMPTS.items():
            if text.rstrip().endswith(prompt):
                return f"{key}1"
        if "<task-notification>" in text:
            return "notification"
        return "unexpected"


def wait_for(what, why: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {why}")
        time.sleep(0.05)


# The stand-in Gemini observer answers by the checkpoint it is shown: the latest marker in it.
VERDICTS = {
    "MARK-A-FAIL": (MID, 0.0),
    "MARK-A-ROUND": (None, 0.0),
    "MARK-B-ROUND": (None, 0.0),
    "MARK-B-END": (END, 2.5),
    "MARK-C-ROUND": (None, 0.0),
    "MARK-C-END": (LATE, 8.0),
}


def shown(body) -> str | None:
    """The checkpoint an observer request shows: the latest marker in it."""
    text = json.dumps(body)
    mark = max(VERDICTS, key=text.rfind)
    return mark if text.rfind(mark) >= 0 else None


def observe(body) -> Reply:
    text = json.dumps(body)
    mark = max(VERDICTS, key=text.rfind)
    message, delay = VERDICTS[mark] if text.rfind(mark) >= 0 else (None, 0.0)
    args = {"needsCorrection": message is not None, "message": message}
    return Reply(200, gemini_response(args), delay=delay)


class Claude:
    """One real Claude Code session, prompts on stdin as stream-json, in a private HOME."""

    def __init__(self, tmp_path: Path, model_url: str, observer_url: str):
        self.binary = require(CLAUDE_CODE)
        self.home = Path(os.environ["HOME"])
        self.project = tmp_path / "project"
        self.project.mkdir()
        (self.project / "parse.py").write_text("def parse(s):\n    return s\n")
        # Claude Code asks once per directory whether the user trusts it.
        trust = {"projects": {str(self.project): {"hasTrustDialogAccepted": True}}}
        (self.home / ".claude.json").write_text(json.dumps(trust))
        venv_bin = str(Path(sys.executable).parent)
        node_bin = str(Path(shutil.which("node") or "/usr/bin/node").parent)
        self.env = {
            **os.environ,
            "PATH": os.pathsep.join([venv_bin, node_bin, "/usr/bin", "/bin"]),
            "ANTHROPIC_BASE_URL": model_url,
            "ANTHROPIC_API_KEY": "sk-ant-TEST-dummy",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "GEMINI_API_KEY": "AIza-TEST-dummy",
            "GOOGLE_GEMINI_BASE_URL": observer_url,
            "AUDITOR_WORKER_IDLE": "30",
            "AUDITOR_CONFIG": str(self.config(tmp_path)),
        }
        self.out: list[dict] = []
        self.proc: subprocess.Popen | None = None
        self.debug_log = tmp_path / "claude-debug.log"  # the client's own log of its hooks

    @staticmethod
    def config(tmp_path: Path) -> Path:
        """The user's config keeps the busy-turn policy (the live hooks otherwise look after every
        tool round): round A, four calls and an edit, is then too small for the gate, and the
        failing test run's own event is what gets audited. It also shows the config file's gate
        reaching the hooks the real client runs."""
        path = tmp_path / "config.toml"
        path.write_text("[gate]\nmin_tool_calls = 5\nrequire_edit = true\n")
        return path

    def install(self, *extra: str) -> subprocess.CompletedProcess:
        """`auditor hook install claude-code` in the project, as the README says."""
        return subprocess.run(
            [*auditor_argv(), "hook", "install", "claude-code", "-o", "gemini", *extra],
            capture_output=True,
            text=True,
            env=self.env,
            cwd=self.project,
            check=True,
        )

    def argv(self, *extra: str) -> list[str]:
        return [
            str(self.binary),
            "-p",
            *extra,
            "--debug-file",
            str(self.debug_log),
            "--output-format",
            "stream-json",
            "--verbose",
            "--allowedTools",
            "Bash,Write,Read",
        ]

    def start(self) -> None:
        self.proc = subprocess.Popen(
            self.argv("--input-format", "stream-json"),
            cwd=self.project,
            env=self.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                self.out.append(json.loads(line))

    def say(self, text: str) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        message = {"type": "user", "message": {"role": "user", "content": text}}
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()

    def results(self) -> int:
        return sum(1 for e in self.out if e.get("type") == "result")

    def close(self) -> int:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.close()
        return self.proc.wait(90)

    @property
    def session(self) -> str:
        return next(e["session_id"] for e in self.out if e.get("session_id"))

    def worker_log(self) -> str:
        """The session's worker log, or a line saying there is none."""
        path = self.sdir / "worker.log"
        return path.read_text() if path.exists() else "(no worker.log)"

    @property
    def sdir(self) -> Path:
        return Path(session_dir(state_root(), "claude-code", self.session))

    def transcript(self) -> Path:
        [path] = (self.home / ".claude" / "projects").glob(f"*/{self.session}.jsonl")
        return path

    def spool_events(self) -> list[dict]:
        return [json.loads(x) for x in (self.sdir / "events.jsonl").read_text().splitlines()]


def staged() -> bool:
    """A correction waits in an outbox (the test's only session: the state dir is private)."""
    return any(Path(state_root()).glob("claude-code/*/outbox/*.json"))


def notes(body: dict) -> list[str]:
    """Every text of a model request that carries auditor's marker (context or re-wake)."""
    found = []
    for m in body["messages"]:
        text = content_text(m["content"])
        found += [line for line in text.splitlines() if CORRECTION_MARKER in line]
    return found


HOOK_RUN = re.compile(r"Hooks: (\w+)(?::\S+)? \[(.*?)\] finished with status (\d+) \((\d+)ms\)")


def hook_runs(debug_log: Path) -> list[tuple[str, str, int, int]]:
    """Each run of an auditor hook as the client logged it (`--debug-file`): (event, command,
    exit status, milliseconds the client measured)."""
    out = []
    for m in HOOK_RUN.finditer(debug_log.read_text(errors="replace")):
        event, command, status, ms = m.groups()
        if "auditor hook" in command:
            out.append((event, command, int(status), int(ms)))
    return out


def median(values: list[int]) -> int:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


@pytest.fixture(autouse=True)
def the_agents_own_folders(monkeypatch):
    """The hooks take the transcripts from where the agent really writes them (no
    AUDITOR_TRANSCRIPT_DIRS, which the other tests set to tmp_path)."""
    monkeypatch.delenv("AUDITOR_TRANSCRIPT_DIRS", raising=False)


@pytest.fixture
def observer():
    stub = Stub(Reply(200, gemini_response({"needsCorrection": False, "message": None})), observe)
    yield stub
    stub.close()


def test_the_real_claude_code_runs_every_hook_and_is_handed_each_correction_once(
    tmp_path, observer
):
    brain = Model(tmp_path / "project")
    model = AnthropicServer(brain, side=lambda body: False)
    claude = Claude(tmp_path, model.url, observer.url)
    installed = claude.install()
    assert installed.stdout.startswith("installed in ")
    settings = json.loads((claude.project / ".claude" / "settings.json").read_text())
    assert set(settings["hooks"]) == {
        "PostToolUse",
        "PostToolUseFailure",
        "UserPromptSubmit",
        "Stop",
        "SubagentStop",
        "SessionEnd",
    }
    started = time.monotonic()
    try:
        claude.start()
        claude.say(PROMPTS["A"])
        wait_for(lambda: claude.results() >= 1, "turn A to end", 60)
        claude.say(PROMPTS["B"])
        wait_for(lambda: "B-woken" in brain.seen, "the re-wake after turn B", 60)
        wait_for(lambda: claude.results() >= 4, "the re-wake's turn to end", 30)
        claude.say(PROMPTS["C"])
        # D is typed while C's end is being audited (whether or not C's tool round was audited
        # on its own first: when the turn has ended before the worker reads that round, the end
        # is audited instead).
        wait_for(
            lambda: "MARK-C-END" in [shown(b) for b in list(observer.log)],
            "the slow audit of turn C's end",
            60,
        )
        claude.say(PROMPTS["D"])
        wait_for(lambda: "D1" in brain.seen, "the answer to D", 30)
        time.sleep(1.0)
        assert claude.close() == 0
    finally:
        if claude.proc and claude.proc.poll() is None:
            claude.proc.kill()
        model.close()
    took = time.monotonic() - started
    engine = open_db(os.environ["AUDITOR_DB"])
    try:
        wait_for(lambda: not (claude.sdir / "outbox").exists() or not staged(), "the outbox")
        bodies = [r.body for r in model.requests]
        steps = brain.seen

        # Every event reached auditor: one per tool call, prompt, stop.
        events = claude.spool_events()
        by_name: dict[str, int] = {}
        for e in events:
            by_name[e["hook_event_name"]] = by_name.get(e["hook_event_name"], 0) + 1
        calls = [
            b for r in model.requests if r.turn for b in r.turn.blocks if isinstance(b, ToolUse)
        ]
        failed = [c for c in calls if c.input.get("command", "").endswith(FAIL)]
        assert by_name.get("PostToolUseFailure") == len(failed) == 2, by_name
        assert by_name.get("PostToolUse") == len(calls) - len(failed), by_name
        typed = [e for e in events if e["hook_event_name"] == "UserPromptSubmit" and e["typed"]]
        assert len(typed) == 4
        client_prompts = [e for e in events if e.get("typed") is False]
        assert client_prompts, "the client's <task-notification> prompts reached the hook"
        ends = sum(1 for r in model.requests if r.turn and r.turn.stop_reason == "end_turn")
        assert by_name.get("Stop") == ends, (by_name, steps)
        assert by_name.get("SessionEnd") == 1
        # SessionEnd ends the worker (it would idle 30 s here otherwise).
        wait_for(lambda: not worker_alive(str(claude.sdir)), "the worker to exit", 10)

        # A: the failed call was audited at its own event; its correction reached the model
        # once, as the next failing run's context.
        [a3] = [b for b, step in zip(bodies, steps) if step == "A4"]
        assert len([n for n in notes(a3) if MID in n]) == 1
        context = [m for m in a3["messages"] if MID in content_text(m["content"])]
        assert "PostToolUseFailure:Bash hook additional context" in content_text(
            context[0]["content"]
        )
        assert all(MID not in json.dumps(b) for b, st in zip(bodies, steps) if st in ("A2", "A3"))
        # B: the end-of-turn correction woke the model once; C's never reached it.
        last = bodies[-1]
        assert [n for n in notes(last) if MID in n].__len__() == 1
        assert len([n for n in notes(last) if END in n]) == 1
        assert all(LATE not in json.dumps(b) for b in bodies)
        assert steps.count("B-woken") == 1

        # The store: what was audited, delivered, cancelled.
        verdicts = rows(engine, s.Verdict)
        runs = {r.id: r for r in rows(engine, s.Run)}
        # One audit per checkpoint shown (none after the re-wake, which would show B's end
        # again); the tool rounds of B and C are audited unless their turn had ended first.
        marks = [shown(b) for b in observer.log]
        checkpoints = [r.checkpoint_id for r in verdicts]
        assert len(marks) == len(set(marks)), (marks, checkpoints, claude.worker_log())
        assert [m for m in marks if "ROUND" not in (m or "")] == [
            "MARK-A-FAIL",
            "MARK-B-END",
            "MARK-C-END",
        ], marks
        expected = [("ok", VERDICTS[m][0]) for m in marks if m != "MARK-C-END"]
        assert [(v.status, v.message) for v in verdicts] == [*expected, ("cancelled", None)], (
            [(v.status, v.message, v.problem, runs[v.run_id].config["hook"]) for v in verdicts],
            (claude.sdir / "worker.log").read_text(),
        )
        assert verdicts[-1].problem.startswith("cancelled: the user wrote")
        [mid] = [v for v in verdicts if v.message == MID]
        [end] = [v for v in verdicts if v.message == END]
        assert runs[mid.run_id].config["hook"]["hook_event_name"] == "PostToolUseFailure"
        delivered = [
            (i.verdict_id, i.target) for i in rows(engine, s.Injection) if i.status == "delivered"
        ]
        assert delivered == [(mid.id, "hook PostToolUseFailure"), (end.id, "hook Stop-rewake")]

        # The transcript the client wrote ingests with its tool calls and the server's tokens.
        stored = stored_thread(engine, "claude-code", claude.session)
        assert set(stored.calls) == {c.id for c in calls}
        answered = [r for r in model.requests if r.turn]
        want = [r.turn.usage for r in answered]
        assert stored.tokens.bills == len(want)
        assert stored.tokens.input == sum(u.input_tokens for u in want)
        assert stored.tokens.output == sum(u.output_tokens for u in want)
        assert stored.tokens.cache_read == sum(u.cache_read_input_tokens for u in want)
        assert stored.tokens.cache_write == sum(u.cache_creation_input_tokens for u in want)
        problems = subprocess.run(
            [*auditor_argv(), "ingest", str(claude.transcript())],
            capture_output=True,
            text=True,
            env=claude.env,
            check=True,
        )
        assert "0 with problems" in problems.stdout, problems

        # What the client measured of the hooks (printed for the record; -s shows it).
        runs_seen = hook_runs(claude.debug_log)
        by_event: dict[str, list[int]] = {}
        for event, _, status, ms in runs_seen:
            assert status in (0, 2), runs_seen  # 2: the re-wake, and only that
            by_event.setdefault(event, []).append(ms)
        assert [r for r in runs_seen if r[2] == 2] == [
            r for r in runs_seen if r[2] == 2 and "--rewake" in r[1]
        ]
        summary = {k: (len(v), median(v), max(v)) for k, v in sorted(by_event.items())}
        print(f"\nClaude Code {CLAUDE_CODE.version}: session {took:.1f}s")
        print(f"hook runs (count, median ms, max ms) as the client measured: {summary}")
        print(f"events: {by_name}; model requests: {steps}")
        log = (claude.sdir / "worker.log").read_text()
        lagged = re.findall(r"(\w+): the transcript caught up after (\d+) ms", log)
        print(f"audits that waited for the transcript: {lagged}")
    finally:
        engine.dispose()


def test_an_answer_streamed_slowly_is_one_tool_round_however_its_lines_interleave(
    tmp_path, observer
):
    """A real API streams an answer over seconds, and the client runs each call as soon as its
    block has arrived: its transcript then holds call, result, call, result of one answer (it
    writes the answer's lines and results together once the answer is in). The worker audits
    that answer's round once, both calls answered, never the first call alone."""
    script = [
        Turn([bash("s1", "echo MARK-S-ONE"), bash("s2", "echo MARK-S-TWO")], pause=(1, 2.0)),
        Turn([bash("s3", "sleep 1; echo MARK-S-THREE")]),
        Turn([Text("All three ran.")]),
    ]
    model = AnthropicServer(script, side=lambda body: False)
    claude = Claude(tmp_path, model.url, observer.url)
    # Every tool round is audited (the live hooks' default without the busy-turn policy).
    Path(claude.env["AUDITOR_CONFIG"]).write_text("[gate]\nmin_tool_calls = 0\n")
    claude.install()
    try:
        done = subprocess.run(
            claude.argv("Run the three checks."),
            cwd=claude.project,
            env=claude.env,
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
        )
    finally:
        model.close()
    assert done.returncode == 0, done.stderr[-2000:]
    session = json.loads(done.stdout.splitlines()[-1])["session_id"]
    [transcript] = (claude.home / ".claude" / "projects").glob(f"*/{session}.jsonl")
    lines = [json.loads(x) for x in transcript.read_text().splitlines()]
    order = [
        (r["type"], b.get("id") or b.get("tool_use_id") or b["type"])
        for r in lines
        if r["type"] in ("assistant", "user") and isinstance(r["message"]["content"], list)
        for b in r["message"]["content"]
    ]
    # What makes a round look complete too early: the first result before the second call.
    assert order[:4] == [
        ("assistant", "toolu_s1"),
        ("user", "toolu_s1"),
        ("assistant", "toolu_s2"),
        ("user", "toolu_s2"),
    ], order
    sdir = Path(session_dir(state_root(), "claude-code", session))
    wait_for(lambda: not worker_alive(str(sdir)), "the worker to exit", 60)
    engine = open_db(os.environ["AUDITOR_DB"])
    try:
        checkpoints = {c.id: c for c in rows(engine, s.Checkpoint)}
        audited = [checkpoints[v.checkpoint_id] for v in rows(engine, s.Verdict)]
    finally:
        engine.dispose()
    uuid = {
        b["tool_use_id"]: r["uuid"]
        for r in lines
        if r["type"] == "user" and isinstance(r["message"]["content"], list)
        for b in r["message"]["content"]
        if b.get("type") == "tool_result"
    }
    first = [(c.message_native_id, c.tool_calls) for c in audited if c.kind == "inference"]
    first = [c for c in first if c[0] in (uuid["toolu_s1"], uuid["toolu_s2"])]
    log = (sdir / "worker.log").read_text()
    assert first == [(uuid["toolu_s2"], 2)], (first, log)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The .claude/ directory `auditor hook install claude-code -o gemini` writes (the same
    for every project: the command names no path of it), made once for the module."""
    project = tmp_path_factory.mktemp("installed")
    venv_bin = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": os.pathsep.join([venv_bin, "/usr/bin", "/bin"])}
    env["GEMINI_API_KEY"] = "AIza-TEST-dummy"
    subprocess.run(
        [*auditor_argv(), "hook", "install", "claude-code", "-o", "gemini"],
        capture_output=True,
        env=env,
        cwd=project,
        check=True,
    )
    return project / ".claude"


def broken_install(how: str, tmp_path: Path, env: dict) -> dict:
    """The environment the agent runs the installed hook in, broken as `how` says."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    node_bin = str(Path(shutil.which("node") or "/usr/bin/node").parent)
    venv_bin = str(Path(sys.executable).parent)
    if how == "executable gone":  # uninstalled, or a venv deleted: not on PATH any more
        return {**env, "PATH": os.pathsep.join([node_bin, "/usr/bin", "/bin"])}
    fake = bin_dir / "auditor"
    if how == "broken venv":  # the script's interpreter is gone (a venv moved or rebuilt)
        fake.write_text("#!/nonexistent/venv/bin/python3\nimport auditor\n")
    elif how == "an older auditor":  # it lacks --rewake: click's usage error, status 2
        fake.write_text(
            '#!/bin/sh\ncase "$*" in *--rewake*)\n'
            "  echo 'Error: No such option: --rewake' >&2; exit 2;;\nesac\n"
            f'exec {venv_bin}/auditor "$@"\n'
        )
    if fake.exists():
        fake.chmod(0o755)
        return {**env, "PATH": os.pathsep.join([str(bin_dir), node_bin, "/usr/bin", "/bin"])}
    if how == "store out of reach":  # nothing listens on port 9
        return {**env, "AUDITOR_DB": "postgresql+psycopg://auditor@127.0.0.1:9/audits"}
    assert how == "python error at start"  # a broken package shadows auditor's own
    broken = tmp_path / "site" / "auditor"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('a half-upgraded install')\n")
    return {**env, "PYTHONPATH": str(broken.parent), "PATH": env["PATH"] + ":" + venv_bin}


@pytest.mark.parametrize(
    "how",
    [
        "executable gone",
        "broken venv",
        "an older auditor",
        "store out of reach",
        "python error at start",
    ],
)
def test_a_hook_whose_auditor_cannot_start_never_wakes_the_model(
    tmp_path, observer, installed, how
):
    """Upstream reports unbounded re-wake loops when an asyncRewake Stop hook fails: whatever
    keeps auditor from starting, the client is never woken by it (at most one model request
    after the turn) and the installed command never exits 2."""
    p = tmp_path / "project"
    script = [
        Turn(
            [
                write("w", p / "notes.txt", "todo\n"),
                *[bash(f"x{i}", f"echo {i}") for i in range(4)],
            ]
        ),
        Turn([Text("All done.")]),
    ]
    model = AnthropicServer(script, side=lambda body: False, fallback=Turn([Text("Woken.")]))
    claude = Claude(tmp_path, model.url, observer.url)
    shutil.copytree(installed, claude.project / ".claude")
    env = broken_install(how, tmp_path, claude.env)
    try:
        done = subprocess.run(
            claude.argv("Write the notes."),
            cwd=claude.project,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        model.close()
    assert done.returncode == 0, done.stderr[-2000:]
    answered = [r for r in model.requests if r.turn]
    assert len(answered) - 2 <= 1, [
        content_text(r.body["messages"][-1]["content"]) for r in answered
    ]
    statuses = sorted({status for _, _, status, _ in hook_runs(claude.debug_log)})
    assert statuses and 2 not in statuses, statuses
    print(f"\n{how}: {len(answered) - 2} model request(s) after the turn; hook statuses {statuses}")
