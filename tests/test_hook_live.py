"""The non-blocking hooks end to end: the real `auditor hook claude-code` command driven through a
scripted session (tool rounds, a prompt, stops) on a real transcript from the corpus, against a
stand-in observer that holds its answer back while the hooks run. The hook must never wait
for it: a hook that did could not return until the answer is let go."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers.live import (
    CC_SESSION,
    append_lines,
    auditor_argv,
    copy_lines,
    rows,
    store_locked,
    stored,
)
from helpers.wire import Reply, Stub, anthropic_response

from auditor.live.delivery import CORRECTION_MARKER
from auditor.live.fast_path import (
    DELIVER,
    env_mark,
    note,
    session_dir,
    state_root,
    worker_alive,
)
from auditor.store import schema as s
from auditor.store.db import open_db

pytestmark = [pytest.mark.corpus, pytest.mark.both_stores]
KEY = {"ANTHROPIC_API_KEY": "sk-ant-TEST-dummy"}
SESSION = "1af7fc5e-8455-4414-9ccd-011d40f70b2a"
MID = "You wrote CLAUDE.md without the permission you asked for; ask before writing it."
END = "The Write call was denied, so CLAUDE.md does not exist; say so instead of claiming it."
# Lines of the session (1-based, inclusive): 23 ends a tool round without an edit, 26 the round of
# the Write call (11 tool calls, one edit: the gate passes), 28 the last round, 29 the final claim.
NO_EDIT, WRITE, LAST_ROUND, FINAL = 23, 26, 28, 29
NEXT_ANSWER = 27  # the model's next answer: the Write call's answer is over (its round complete)
WRITE_CALL = "toolu_01LM7vfs6eMdhHJokVajzJA1"  # the tool_use id of the Write call (line 25)
# What Claude Code 2.1.328 submits as a prompt when a background command finishes.
NOTIFICATION = (
    "<task-notification>\n<task-id>b34yvjd5j</task-id>\n<tool-use-id>toolu_01</tool-use-id>\n"
    '<status>completed</status>\n<summary>Background command "tests" completed (exit code 0)'
    "</summary>\n</task-notification>"
)


class Session:
    """A Claude Code session as the hooks see it: the transcript grows, events fire."""

    def __init__(self, corpus: Path, tmp_path: Path, stub: Stub):
        self.src = corpus / CC_SESSION
        self.path = tmp_path / "projects" / "-path-to-Demo" / f"{SESSION}.jsonl"
        copy_lines(self.src, self.path, 0)
        self.lines = 0
        self.stub = stub
        self.tmp = tmp_path
        self.did: list[str] = []  # what each event said it did (--verbose)
        self.env = dict(KEY)  # what the agent's environment adds
        self.idle = 20  # seconds a worker with nothing to do waits before it exits
        self.cwd: Path | None = None  # the folder the agent runs its hooks in

    def grow(self, upto: int) -> None:
        append_lines(self.path, self.src, self.lines, upto)
        self.lines = upto

    def user_writes(self, text: str) -> None:
        """Append a typed user message to the transcript, as Claude Code does on a prompt."""
        last = json.loads(self.path.read_bytes().splitlines()[-1])
        rec = {
            "type": "user",
            "uuid": f"typed-{len(self.did)}",
            "parentUuid": last.get("uuid"),
            "sessionId": SESSION,
            "timestamp": last.get("timestamp"),
            "cwd": last.get("cwd"),
            "message": {"role": "user", "content": text},
        }
        with open(self.path, "a") as fh:
            fh.write(json.dumps(rec) + "\n")

    def payload(self, name: str, **extra) -> dict:
        data = {
            "session_id": SESSION,
            "transcript_path": str(self.path),
            "cwd": "/path/to/Demo",
            "permission_mode": "default",
            "hook_event_name": name,
            **extra,
        }
        if name == "PostToolUse":
            data.setdefault("tool_name", "Write")
            data.setdefault("tool_input", {"file_path": "/path/to/Demo/CLAUDE.md"})
            data.setdefault("tool_response", {"success": True})
        if name in ("Stop", "SubagentStop"):
            data.setdefault("stop_hook_active", False)
        return data

    def argv(self, *extra: str) -> list[str]:
        return [
            *auditor_argv(),
            "hook",
            "claude-code",
            "--observer",
            "claude",
            "--base-url",
            self.stub.url,
            "--max-retries",
            "0",
            "--idle",
            str(self.idle),
            *extra,
        ]

    def rewake(self, **extra) -> subprocess.Popen:
        """Start the Stop hook's asyncRewake handler as Claude Code does: in the background."""
        stdin = self.tmp / f"rewake-{len(self.did)}.json"
        stdin.write_text(json.dumps(self.payload("Stop", **extra)))
        with open(stdin) as fh:
            return subprocess.Popen(
                self.argv("--rewake"),
                stdin=fh,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env={**os.environ, **KEY},
            )

    def event(self, name: str, **extra) -> str:
        data = self.payload(name, **extra)
        result = subprocess.run(
            self.argv("--verbose"),  # what each event did, on stderr: shown if a wait times out
            input=json.dumps(data),
            capture_output=True,
            text=True,
            env={**os.environ, **self.env},
            cwd=self.cwd,
            timeout=60,
            check=False,
        )
        self.did.append(result.stderr.strip())
        assert result.returncode == 0, result.stderr
        return result.stdout

    @property
    def sdir(self) -> Path:
        return Path(session_dir(state_root(), "claude-code", SESSION))

    def wait_until(self, what, timeout: float = 60.0, why: str = "") -> None:
        deadline = time.monotonic() + timeout
        while not what():
            if time.monotonic() > deadline:
                log = (
                    (self.sdir / "worker.log").read_text()
                    if (self.sdir / "worker.log").exists()
                    else ""
                )
                did = "\n".join(self.did)
                pytest.fail(f"timed out waiting for {why}; worker log:\n{log}\nhooks:\n{did}")
            time.sleep(0.1)

    def staged(self) -> bool:
        return any((self.sdir / "outbox").glob("*.json"))

    def worker_pid(self) -> int | None:
        try:
            return int((self.sdir / "worker.lock").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def stop_worker(self) -> None:
        pid = self.worker_pid()
        if pid:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass


@pytest.fixture
def stub():
    server = Stub(Reply(200, anthropic_response({"needsCorrection": True, "message": MID})))
    yield server
    server.close()


@pytest.fixture
def cc(corpus, tmp_path, stub):
    session = Session(corpus, tmp_path, stub)
    yield session
    session.stop_worker()


def verdicts(tmp_path):
    return stored(s.Verdict)


def injections(tmp_path):
    return stored(s.Injection)


def context(message: str, event: str = "PostToolUse") -> dict:
    text = note(message, event)
    assert text.startswith(CORRECTION_MARKER)  # the transcript parsers know it again
    return {"hookSpecificOutput": {"hookEventName": event, "additionalContext": text}}


def test_a_mid_turn_correction_comes_out_at_the_next_tool_round_and_none_follows_it(cc, tmp_path):
    cc.grow(NO_EDIT)
    with cc.stub.holding():  # the hooks return while the observer has not answered
        assert cc.event("PostToolUse", tool_name="TodoWrite") == ""  # gate: no file edit yet
        cc.grow(WRITE)
        assert cc.event("PostToolUse") == ""  # the audit starts; the hook does not wait for it
    cc.wait_until(cc.staged, why="the mid-turn correction")
    cc.grow(LAST_ROUND)
    out = cc.event("PostToolUse", tool_name="TodoWrite")
    assert json.loads(out) == context(MID)  # the documented shape, read before the next request
    # Loop guard across the new events: nothing is audited right after a correction.
    cc.grow(FINAL)
    assert cc.event("Stop") == ""
    cc.wait_until(
        lambda: (
            len(injections(tmp_path)) == 1
            and "after-correction" in (cc.sdir / "worker.log").read_text()
        ),
        why="the hand-over to be recorded and the Stop to be passed over",
    )
    [verdict] = verdicts(tmp_path)
    assert (verdict.status, verdict.needs_correction, verdict.message) == ("ok", True, MID)
    [injection] = injections(tmp_path)
    assert (injection.status, injection.verdict_id, injection.target) == (
        "delivered",
        verdict.id,
        "hook PostToolUse",
    )
    [checkpoint] = stored(s.Checkpoint, s.Checkpoint.gate_audit)
    assert checkpoint.kind == "inference"
    assert len(cc.stub.log) == 1


def test_the_audit_pending_when_the_user_typed_is_cancelled_and_never_delivered(cc, tmp_path):
    cc.grow(WRITE)
    with cc.stub.holding():  # the observer answers only once the audit is cancelled
        assert cc.event("PostToolUse") == ""
        cc.wait_until(lambda: len(cc.stub.log) == 1, why="the observer call to be under way")
        cc.user_writes("actually, leave CLAUDE.md alone")
        assert cc.event("UserPromptSubmit", prompt="actually, leave CLAUDE.md alone") == ""
        cc.wait_until(
            lambda: [v.status for v in verdicts(tmp_path)] == ["cancelled"],
            why="the cancellation",
        )
    cc.wait_until(lambda: cc.stub.answered == 1, why="the observer's late answer to go out")
    assert cc.event("PostToolUse", tool_name="Read") == ""
    assert cc.event("Stop") == ""
    [verdict] = verdicts(tmp_path)
    assert verdict.status == "cancelled" and verdict.problem.startswith("cancelled: the user wrote")
    assert verdict.latency_ms > 0 and verdict.needs_correction is None
    assert not cc.staged() and injections(tmp_path) == []
    [run] = stored(s.Run, s.Run.id == verdict.run_id)
    assert run.status == "done" and run.config["hook"]["hook_event_name"] == "PostToolUse"


def test_a_failing_tool_call_is_audited_at_its_own_event_and_takes_a_correction(cc, tmp_path):
    """Claude Code fires PostToolUseFailure, not PostToolUse, for a call that failed (a test
    run that exits 1): the moment a correction matters most."""
    cc.grow(WRITE)
    assert cc.event("PostToolUseFailure", tool_name="Bash", error="Exit code 1") == ""
    cc.wait_until(cc.staged, why="the audit of the failed call's round")
    cc.grow(LAST_ROUND)
    out = cc.event("PostToolUseFailure", tool_name="Bash", error="Exit code 1")
    assert json.loads(out) == context(MID, "PostToolUseFailure")
    [verdict] = verdicts(tmp_path)
    [run] = stored(s.Run, s.Run.id == verdict.run_id)
    assert run.config["hook"]["hook_event_name"] == "PostToolUseFailure"


def test_the_worker_waits_for_the_result_of_the_call_the_event_names(cc, tmp_path):
    """The client runs PostToolUse before its transcript holds the call's result: the round to
    audit is the one of the event's tool_use_id, not whichever round the file ends with."""
    cc.grow(NO_EDIT)  # the file still ends with the round before (no edit: gated out)
    assert cc.event("PostToolUse", tool_use_id=WRITE_CALL) == ""
    time.sleep(1.0)
    cc.grow(WRITE)  # the Write call's result comes in late
    cc.grow(NEXT_ANSWER)
    cc.wait_until(cc.staged, why="the audit of the Write call's round")
    [entry] = [json.loads(p.read_text()) for p in (cc.sdir / "outbox").glob("*.json")]
    result = json.loads(cc.path.read_text().splitlines()[WRITE - 1])
    assert entry["checkpoint"] == result["uuid"]


def test_a_task_notification_neither_cancels_nor_takes_back_nor_resets_the_guard(cc, tmp_path):
    """Claude Code submits `<task-notification>` prompts itself (a background command or a
    re-wake finished): the user did not write."""
    cc.stub.default = Reply(200, anthropic_response({"needsCorrection": True, "message": END}))
    cc.grow(FINAL)
    with cc.stub.holding():  # the answer comes after the notification is recorded
        waiter = cc.rewake()
        assert cc.event("Stop") == ""
        cc.wait_until(lambda: len(cc.stub.log) == 1, why="the observer call to be under way")
        assert cc.event("UserPromptSubmit", prompt=NOTIFICATION) == ""
    out, err = waiter.communicate(timeout=60)
    assert (waiter.returncode, err) == (DELIVER, note(END, "Stop") + "\n")
    # The re-wake comes back as a notification too; the continuation's stop is not audited.
    woken = (
        f"<task-notification>\n<summary>Stop hook feedback</summary>\n</task-notification>\n{err}"
    )
    assert cc.event("UserPromptSubmit", prompt=woken) == ""
    assert cc.event("Stop", stop_hook_active=True) == ""
    assert cc.event("Stop") == ""
    cc.wait_until(
        lambda: "after-correction" in (cc.sdir / "worker.log").read_text(),
        why="the stop after the correction to be passed over",
    )
    [verdict] = verdicts(tmp_path)
    assert (verdict.status, verdict.message) == ("ok", END)
    [injection] = injections(tmp_path)
    assert (injection.status, injection.target) == ("delivered", "hook Stop-rewake")
    assert len(cc.stub.log) == 1


def test_the_worker_ends_with_the_session(cc, tmp_path):
    cc.idle = 600  # it cannot exit for want of work while the test waits: the end tells it
    cc.stub.default = Reply(200, anthropic_response({"needsCorrection": False}))
    assert cc.event("SessionEnd", reason="other") == ""
    assert not worker_alive(str(cc.sdir))  # the end of a session starts no worker
    cc.grow(FINAL)
    with cc.stub.holding():  # the session ends with the audit under way
        assert cc.event("Stop") == ""
        cc.wait_until(lambda: len(cc.stub.log) == 1, why="the observer call to be under way")
        assert cc.event("SessionEnd", reason="prompt_input_exit") == ""
    cc.wait_until(lambda: not worker_alive(str(cc.sdir)), why="the worker to exit")
    [verdict] = verdicts(tmp_path)  # the audit under way was finished first
    assert (verdict.status, verdict.needs_correction) == ("ok", False)


def test_a_changed_key_reaches_the_audits_of_a_running_session(cc, tmp_path):
    """The worker outlives the event that started it: a key (or store) the user changed since
    reaches the next audit, through a worker started with the new environment."""
    cc.stub.default = Reply(200, anthropic_response({"needsCorrection": False}), delay=0)
    cc.grow(WRITE)
    assert cc.event("PostToolUse") == ""
    cc.wait_until(lambda: len(verdicts(tmp_path)) == 1, why="the first audit")
    first = cc.worker_pid()
    cc.env["ANTHROPIC_API_KEY"] = "sk-ant-TEST-rotated"
    cc.grow(LAST_ROUND)
    assert cc.event("PostToolUse", tool_name="TodoWrite") == ""
    cc.wait_until(lambda: len(verdicts(tmp_path)) == 2, why="the second audit")
    keys = [r["headers"].get("authorization") for r in cc.stub.log]
    assert keys == ["Bearer sk-ant-TEST-dummy", "Bearer sk-ant-TEST-rotated"]
    assert cc.worker_pid() != first
    assert no_key_in_spool(cc.sdir)


def test_the_environment_digest_is_sha256_whichever_module_computes_it():
    """The hooks take SHA-256 from Python's own module, not hashlib's OpenSSL; the digest a
    worker compares must be the one hashlib gives."""
    env = {"ANTHROPIC_API_KEY": "sk-ant-TEST", "AUDITOR_DB": "/tmp/a.db", "HOME": "/home/u"}
    items = "ANTHROPIC_API_KEY=sk-ant-TEST\0AUDITOR_DB=/tmp/a.db"
    assert env_mark(env) == hashlib.sha256(items.encode()).hexdigest()[:16]


def no_key_in_spool(sdir: Path) -> bool:
    """No key is written into the spool: the events carry a digest of the environment."""
    return not any(
        "sk-ant-TEST" in p.read_text(errors="replace") for p in sdir.rglob("*") if p.is_file()
    )


def test_an_end_of_turn_correction_goes_out_only_if_the_user_has_not_written(cc, tmp_path):
    cc.stub.default = Reply(200, anthropic_response({"needsCorrection": True, "message": END}))
    cc.grow(FINAL)
    with cc.stub.holding():  # the end of turn is audited in the background
        assert cc.event("Stop") == ""
    cc.wait_until(cc.staged, why="the end-of-turn correction")
    out = cc.event("Stop")  # the next stop, nobody wrote in between: it goes out
    assert json.loads(out) == {"decision": "block", "reason": note(END, "Stop")}
    assert cc.event("Stop") == ""  # once only
    cc.wait_until(lambda: len(injections(tmp_path)) == 1, why="the hand-over to be recorded")
    [injection] = injections(tmp_path)
    assert (injection.status, injection.target) == ("delivered", "hook Stop")


def test_an_end_of_turn_correction_is_dropped_when_the_user_wrote_first(cc, tmp_path):
    cc.stub.default = Reply(200, anthropic_response({"needsCorrection": True, "message": END}))
    cc.grow(FINAL)
    assert cc.event("Stop") == ""
    cc.wait_until(cc.staged, why="the end-of-turn correction")
    cc.user_writes("thanks, that's all")
    assert cc.event("UserPromptSubmit", prompt="thanks, that's all") == ""
    assert not cc.staged()
    assert cc.event("Stop") == ""
    cc.wait_until(lambda: len(injections(tmp_path)) == 1, why="the take-back to be recorded")
    [injection] = injections(tmp_path)
    assert injection.status == "skipped" and injection.error.startswith("user-wrote-again")
    [verdict] = verdicts(tmp_path)
    assert (verdict.status, verdict.message) == ("ok", END)


def test_stop_hook_active_never_gets_a_block(cc, tmp_path):
    cc.stub.default = Reply(
        200, anthropic_response({"needsCorrection": True, "message": END}), delay=0
    )
    cc.grow(FINAL)
    assert cc.event("Stop") == ""
    cc.wait_until(cc.staged, why="the end-of-turn correction")
    assert cc.event("Stop", stop_hook_active=True) == ""
    assert cc.staged()  # kept for an event that may take it


def test_a_project_with_an_auditor_package_of_its_own_is_not_run_as_the_worker(cc, tmp_path):
    """Hooks run in the agent's project folder, and so does the worker they start: it is the
    installed auditor all the same, in a project that has an `auditor` package of its own
    (auditor's own repository, say)."""
    ran = tmp_path / "the-projects-auditor-ran"
    package = tmp_path / "project" / "auditor"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(f"open({str(ran)!r}, 'w').close()\n")
    (package / "__main__.py").write_text("raise SystemExit(3)\n")
    cc.cwd = package.parent
    cc.grow(FINAL)
    cc.event("Stop")
    cc.wait_until(lambda: len(verdicts(tmp_path)) == 1, why="the stop's verdict")
    assert not ran.exists()


def test_hooks_return_at_once_with_the_store_locked_and_a_worker_killed(cc, tmp_path):
    cc.grow(WRITE)
    with cc.stub.holding():  # the first call never answers: its worker dies waiting
        assert cc.event("PostToolUse") == ""
        cc.wait_until(lambda: len(cc.stub.log) == 1, why="the observer call to be under way")
        # The worker dies in the middle of the call: the next event starts a new one, which
        # takes the tool round up again; the call is made again (the first never answered).
        pid = cc.worker_pid()
        os.kill(pid, signal.SIGKILL)
        # Gone once its lock is free: a killed process's main thread can be a zombie while its
        # other threads, which share its open files, are still being torn down.
        cc.wait_until(lambda: not worker_alive(str(cc.sdir)), why="the worker's lock to be freed")
        assert not _alive(pid)
        with store_locked(os.environ["AUDITOR_DB"]):  # nobody can read or write it meanwhile
            # It returns while the store is still locked, so it did not wait for the lock; and
            # by its own account it neither failed nor gave up: it never needed the store.
            assert cc.event("PostToolUse", tool_name="Read") == ""
            assert re.fullmatch(
                r"auditor hook claude-code: PostToolUse: nothing to hand over; worker \d+ "
                r"started \([\d.]+ ms\)",
                cc.did[-1],
            ), cc.did[-1]
    cc.wait_until(cc.staged, why="the new worker to finish the audit")
    assert cc.worker_pid() != pid
    cc.grow(LAST_ROUND)
    assert json.loads(cc.event("PostToolUse")) == context(MID)
    ok = [v for v in verdicts(tmp_path) if v.status == "ok"]
    assert len(ok) == 1 and len(cc.stub.log) == 2


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie of a process we did not start still answers kill(0): read its state
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def test_a_hook_event_with_nothing_due_imports_neither_click_nor_sqlalchemy(tmp_path):
    """Nor `typing` (with the `re` it brings) or `hashlib` (which loads OpenSSL): each was a
    fifth or more of what an event cost beyond a bare interpreter start."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import sys, io, json\n"
        "sys.argv = ['auditor', 'hook', 'claude-code']\n"
        "sys.stdin = io.StringIO(json.dumps({'session_id': 's', 'hook_event_name': 'UserPromptSubmit'}))\n"
        "import os\n"
        "os._exit = lambda code: (print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('click', 'sqlalchemy', 'pluggy', 'orjson', 'typing', 'hashlib', '_hashlib'))), "
        "sys.exit(code))\n"
        "from auditor.entry import main\n"
        "main()\n"
    )
    done = subprocess.run([sys.executable, str(probe)], capture_output=True, text=True, check=False)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


def test_the_auditor_command_imports_only_what_a_tool_event_needs(tmp_path, monkeypatch):
    """The `auditor` command as installed (bin/auditor) given a PostToolUse while the session's
    worker runs, the commonest event: besides the interpreter's own start it imports neither
    `re` (pip's wrapper for an entry point did; so does the `json` package) nor `json`,
    `typing` or `hashlib`, and nothing of the command line. Run without site-packages, so that
    what the interpreter's start imports (an editable install's finder imports `re`) does not
    hide what the command does."""
    root = Path(__file__).resolve().parent.parent
    env = {
        **os.environ,
        "PYTHONPATH": str(root),
        "AUDITOR_STATE_DIR": str(tmp_path / "state"),
        "AUDITOR_DB": str(tmp_path / "a.db"),
    }
    for key in ("AUDITOR_STATE_DIR", "AUDITOR_DB"):
        monkeypatch.setenv(key, env[key])
    sdir = Path(session_dir(state_root(), "claude-code", "s1"))
    sdir.mkdir(parents=True)
    held = os.open(sdir / "worker.lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(held, fcntl.LOCK_EX)  # as the session's running worker holds it
    os.write(held, f"{os.getpid()}\n".encode())
    payload = {"session_id": "s1", "hook_event_name": "PostToolUse", "tool_name": "Bash"}
    try:
        done = subprocess.run(
            [sys.executable, "-S", "-X", "importtime", str(root / "bin" / "auditor")]
            + ["hook", "claude-code"],
            input=json.dumps(payload),
            capture_output=True,
            text=True,
            env=env,
            check=True,
        )
    finally:
        os.close(held)
    imported = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if "|" in line}
    assert "auditor.live.fast_path" in imported
    heavy = {"re", "json", "typing", "hashlib", "_hashlib", "click", "sqlalchemy", "pluggy"}
    assert imported & heavy == set()
    [event] = (sdir / "events.jsonl").read_text().splitlines()
    assert json.loads(event)["hook_event_name"] == "PostToolUse"
    assert not (sdir / "worker.log").exists()  # the running worker serves it: none started


def test_the_rewake_handler_wakes_claude_with_the_end_of_turn_correction(cc, tmp_path):
    cc.stub.default = Reply(200, anthropic_response({"needsCorrection": True, "message": END}))
    cc.grow(FINAL)
    with cc.stub.holding():
        waiter = cc.rewake()  # Claude Code starts both Stop handlers and waits for neither
        assert cc.event("Stop") == ""
    out, err = waiter.communicate(timeout=60)
    assert (waiter.returncode, out, err) == (DELIVER, "", note(END, "Stop") + "\n")
    cc.wait_until(lambda: len(injections(tmp_path)) == 1, why="the hand-over to be recorded")
    [injection] = injections(tmp_path)
    assert (injection.status, injection.target) == ("delivered", "hook Stop-rewake")


def test_the_rewake_handler_stays_silent_when_the_user_writes_first(cc, tmp_path):
    cc.stub.default = Reply(200, anthropic_response({"needsCorrection": True, "message": END}))
    cc.grow(FINAL)
    with cc.stub.holding():  # the observer answers only once the audit is cancelled
        waiter = cc.rewake()
        assert cc.event("Stop") == ""
        cc.wait_until(lambda: len(cc.stub.log) == 1, why="the observer call to be under way")
        cc.user_writes("never mind")
        assert cc.event("UserPromptSubmit", prompt="never mind") == ""
        out, err = waiter.communicate(timeout=60)
        cc.wait_until(
            lambda: [v.status for v in verdicts(tmp_path)] == ["cancelled"],
            why="the cancellation",
        )
    assert (waiter.returncode, out) == (0, "")
    assert injections(tmp_path) == [] and not cc.staged()


def test_the_rewake_handler_ends_when_the_turn_needs_no_correction(cc, tmp_path):
    cc.stub.default = Reply(200, anthropic_response({"needsCorrection": False, "message": None}))
    cc.grow(FINAL)
    waiter = cc.rewake()
    assert cc.event("Stop") == ""
    out, err = waiter.communicate(timeout=60)
    assert (waiter.returncode, out, err) == (0, "", "")
    [verdict] = verdicts(tmp_path)
    assert (verdict.status, verdict.needs_correction) == ("ok", False)


@pytest.mark.parametrize("marked", [True, False])
def test_a_correction_given_as_hook_context_holds_the_core_loop_guard(corpus, tmp_path, marked):
    """Claude Code writes a PostToolUse hook's additionalContext into the transcript as a
    `hook_additional_context` attachment; auditor's (marked) one counts as a course correction,
    so `checkpoints.loop_guard` holds back the rest of the turn, whichever process audits."""
    from auditor.audit.checkpoints import END_TURN, INFERENCE, find_checkpoints, loop_guard
    from auditor.ingest.ingester import Ingester
    from auditor.plugins import get_plugin_manager
    from auditor.store.threads import load_messages

    src = (corpus / CC_SESSION).read_bytes().splitlines(keepends=True)
    before = json.loads(src[WRITE - 1])
    after = json.loads(src[WRITE])
    text = note(MID, "PostToolUse") if marked else "formatter: 2 files reformatted"
    attachment = {
        "type": "attachment",
        "uuid": "hook-context-1",
        "parentUuid": before["uuid"],
        "sessionId": SESSION,
        "timestamp": before["timestamp"],
        "cwd": before.get("cwd"),
        "attachment": {
            "type": "hook_additional_context",
            "content": [text],
            "hookName": "PostToolUse:Write",
            "toolUseID": "toolu_write",
            "hookEvent": "PostToolUse",
        },
    }
    after["parentUuid"] = attachment["uuid"]
    path = tmp_path / "p" / f"{SESSION}.jsonl"
    path.parent.mkdir()
    lines = src[: WRITE - 1] + [src[WRITE - 1], json.dumps(attachment).encode() + b"\n"]
    lines += [json.dumps(after).encode() + b"\n"] + src[WRITE + 1 : FINAL]
    path.write_bytes(b"".join(lines))
    engine = open_db(os.environ["AUDITOR_DB"])
    Ingester(engine, get_plugin_manager(), "claude-code").run([path])
    [thread] = rows(engine, s.Thread)
    messages = load_messages(engine, thread.id)
    assert [m.source_type for m in messages].count("course-correction") == (1 if marked else 0)
    cps = find_checkpoints(thread.id, messages, "every-inference")
    last_round = [c for c in cps if c.kind == INFERENCE][-1]
    end = [c for c in cps if c.kind == END_TURN][-1]
    assert last_round.message_id == json.loads(src[LAST_ROUND - 1])["uuid"]
    guard = {"mode": "every-inference"}
    if marked:
        assert loop_guard(last_round, guard).reason == "after-correction"
        assert loop_guard(end, guard).reason == "after-correction"
    else:
        assert loop_guard(last_round, guard) is None and loop_guard(end, guard) is None


def test_a_lock_left_by_a_dead_worker_for_a_moment_does_not_stop_a_new_one(tmp_path, monkeypatch):
    """A SIGKILLed worker's main thread can be a zombie while its other threads still hold its
    open files, and so its lock: the next event waits for the lock a moment, then starts one."""
    import fcntl
    import threading

    from auditor.live import fast_path
    from auditor.live.fast_path import worker_dying

    sdir = tmp_path / "s"
    sdir.mkdir()
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    (sdir / "worker.lock").write_text(gone.stdout)  # the pid of a process that has exited
    fd = os.open(sdir / "worker.lock", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)  # its last thread still holds the lock...
    threading.Timer(0.05, os.close, [fd]).start()  # ...for 50 ms more
    # (Waiting up to a minute, not the hook's 0.25 s: a loaded machine may run the timer late.)
    assert worker_alive(str(sdir)) and worker_dying(str(sdir), wait=60)
    # A live worker's lock is no such case, and is not waited for: not one pause is taken.
    (sdir / "worker.lock").write_text(f"{os.getpid()}\n")
    fd = os.open(sdir / "worker.lock", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    paused = []
    monkeypatch.setattr(
        fast_path, "time", SimpleNamespace(monotonic=time.monotonic, sleep=paused.append)
    )
    try:
        assert worker_alive(str(sdir)) and not worker_dying(str(sdir), wait=60)
        assert paused == []
    finally:
        os.close(fd)
