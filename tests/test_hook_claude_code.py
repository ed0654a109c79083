"""`auditor hook claude-code` as Claude Code runs it: a subprocess, a real session copied from the
corpus, the hook input on stdin, and the observer a local server speaking the Anthropic wire format."""

from __future__ import annotations

import json
import re
import uuid

import pytest
from helpers.live import (
    CC_SESSION,
    CORRECTION,
    append_lines,
    copy_lines,
    hold_lock,
    last_record,
    rows,
    run_cli,
    store_locked,
)
from helpers.wire import Reply, Stub, anthropic_error, anthropic_response

from auditor.live.delivery import CORRECTION_MARKER
from auditor.store import schema as s
from auditor.store.db import open_db
from auditor.store.sql_text import DEFAULT_LOCK_WAIT

pytestmark = [pytest.mark.corpus, pytest.mark.both_stores]
KEY = {"ANTHROPIC_API_KEY": "sk-ant-TEST-dummy"}


@pytest.fixture
def stub():
    server = Stub(Reply(200, anthropic_response({"needsCorrection": True, "message": CORRECTION})))
    yield server
    server.close()


@pytest.fixture
def session(corpus, tmp_path):
    """The session file as Claude Code leaves it when it is about to stop."""
    return copy_lines(
        corpus / CC_SESSION,
        tmp_path / "projects" / "-path-to-Demo" / "1af7fc5e-8455-4414-9ccd-011d40f70b2a.jsonl",
    )


def payload(session, **extra) -> str:
    data = {
        "session_id": "1af7fc5e-8455-4414-9ccd-011d40f70b2a",
        "transcript_path": str(session),
        "cwd": "/path/to/Demo",
        "permission_mode": "default",
        "hook_event_name": "Stop",
        "stop_hook_active": False,
    }
    data.update(extra)
    return json.dumps(data)


def hook(stub, session, *args, env=KEY, **extra):
    return run_cli(
        "hook",
        "claude-code",
        "--sync",
        "--observer",
        "claude",
        "--base-url",
        stub.url,
        "--max-retries",
        "0",
        # A deadline no loaded machine reaches, unless the test gives its own (the last wins):
        # past the default 30 s the hook lets the agent stop and the test would see no block.
        "--deadline",
        "150",
        *args,
        stdin=payload(session, **extra),
        env=env,
        timeout=180,
    )


def block(message: str) -> str:
    return json.dumps({"decision": "block", "reason": f"{CORRECTION_MARKER} {message}"}) + "\n"


def test_a_correction_is_printed_as_exactly_the_block_json_and_recorded(stub, session, tmp_path):
    result = hook(stub, session)
    assert (result.returncode, result.stdout) == (0, block(CORRECTION))
    assert json.loads(result.stdout) == {
        "decision": "block",
        "reason": f"{CORRECTION_MARKER} {CORRECTION}",
    }
    # The observer saw the real session, up to the claim it was asked to judge.
    assert len(stub.log) == 1
    sent = stub.last["body"]["messages"][0]["content"]
    assert "I've created a basic CLAUDE.md file" in sent and "haven't granted it yet" in sent
    engine = open_db()
    [run] = rows(engine, s.Run)
    assert (run.status, run.observer, run.audited, run.corrections) == ("done", "claude", 1, 1)
    assert run.config["hook"]["agent"] == "claude-code" and run.config["hook"][
        "session_id"
    ].startswith("1af7fc5e")
    [verdict] = rows(engine, s.Verdict)
    assert (verdict.status, verdict.needs_correction, verdict.message) == ("ok", True, CORRECTION)
    assert verdict.input_tokens > 0 and verdict.cost_usd is not None
    [cp] = rows(engine, s.Checkpoint)
    assert (cp.gate_reason, cp.message_native_id) == ("passed", last_record(session)["uuid"])
    [injection] = rows(engine, s.Injection)
    assert (injection.injector, injection.status, injection.verdict_id) == (
        "claude-code",
        "delivered",
        verdict.id,
    )


def test_silence_prints_nothing(stub, session, tmp_path):
    stub.default = Reply(200, anthropic_response({"needsCorrection": False, "message": None}))
    result = hook(stub, session)
    assert (result.returncode, result.stdout) == (0, "")
    [verdict] = rows(open_db(), s.Verdict)
    assert (verdict.status, verdict.needs_correction) == ("ok", False)


def test_a_server_error_lets_the_agent_stop_and_is_recorded(stub, session, tmp_path):
    stub.default = Reply(500, anthropic_error(500))
    result = hook(stub, session)
    assert (result.returncode, result.stdout) == (0, "")
    engine = open_db()
    [verdict] = rows(engine, s.Verdict)
    assert verdict.status == "error" and "500" in verdict.problem
    [run] = rows(engine, s.Run)
    assert run.status == "failed" and "observer call failed" in run.error


def test_an_observer_slower_than_the_deadline_lets_the_agent_stop(stub, session, tmp_path):
    # What is asserted is that the hook did not wait for the observer's answer: the stub holds
    # it until the hook has returned, however long starting up took on a loaded machine.
    with stub.holding():
        result = hook(stub, session, "--deadline", "8")
    assert (result.returncode, result.stdout) == (0, "")
    verdicts = rows(open_db(), s.Verdict)
    assert len(verdicts) == 1, verdicts
    [verdict] = verdicts
    # "deadline exceeded" whether the call timed out or the deadline passed before it was made
    assert verdict.status == "error" and "deadline exceeded" in verdict.problem


def test_a_missing_key_lets_the_agent_stop_and_is_recorded(stub, session, tmp_path):
    result = hook(stub, session, env={})
    assert (result.returncode, result.stdout) == (0, "")
    assert stub.log == []
    [run] = rows(open_db(), s.Run)
    assert run.status == "failed" and "ANTHROPIC_API_KEY" in run.error


@pytest.mark.parametrize("stdin", ["not json", "[]", json.dumps({"hook_event_name": "Stop"})])
def test_a_bad_hook_input_fails_open(stub, session, tmp_path, stdin):
    result = run_cli(
        "hook",
        "claude-code",
        "--sync",
        "--observer",
        "claude",
        "--base-url",
        stub.url,
        stdin=stdin,
        env=KEY,
    )
    assert (result.returncode, result.stdout) == (0, "")
    [run] = rows(open_db(), s.Run)
    assert run.status == "failed" and run.error


def test_stop_hook_active_never_blocks(stub, session):
    result = hook(stub, session, stop_hook_active=True)
    assert (result.returncode, result.stdout) == (0, "")
    assert stub.log == []


def test_a_lagging_transcript_is_judged_with_the_last_assistant_message(
    stub, session, corpus, tmp_path
):
    final = last_record(session)
    text = final["message"]["content"][0]["text"]
    lagging = copy_lines(
        corpus / CC_SESSION, session, lines=28
    )  # the final message is not written yet
    result = hook(stub, lagging, "--lag-wait", "0.2", last_assistant_message=text)
    assert (result.returncode, result.stdout) == (0, block(CORRECTION))
    assert text[:80] in stub.last["body"]["messages"][0]["content"]


def test_the_next_stop_after_a_correction_is_not_audited(stub, session, tmp_path):
    """Claude goes on with the block's reason as a user message; its next stop is not audited."""
    assert hook(stub, session).stdout == block(CORRECTION)
    final = last_record(session)
    feedback_id, answer_id = str(uuid.uuid4()), str(uuid.uuid4())
    common = {
        k: final[k] for k in ("sessionId", "cwd", "version", "gitBranch", "userType", "isSidechain")
    }
    records = [
        {
            **common,
            "parentUuid": final["uuid"],
            "type": "user",
            "isMeta": True,
            "uuid": feedback_id,
            "timestamp": "2025-09-03T00:50:00.000Z",
            "message": {
                "role": "user",
                "content": f"Stop hook feedback:\n[auditor hook claude-code]: {CORRECTION_MARKER} {CORRECTION}",
            },
        },
        {
            **common,
            "parentUuid": feedback_id,
            "type": "assistant",
            "uuid": answer_id,
            "timestamp": "2025-09-03T00:50:09.000Z",
            "message": {
                "id": "msg_after",
                "type": "message",
                "role": "assistant",
                "model": "claude-sonnet-4-20250514",
                "content": [
                    {
                        "type": "text",
                        "text": "You're right, the Write was denied. Please grant it and I will write CLAUDE.md.",
                    }
                ],
                "stop_reason": "end_turn",
                "usage": {"input_tokens": 10, "output_tokens": 20},
            },
        },
    ]
    with open(session, "a") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in records)
    result = hook(stub, session, stop_hook_active=False)
    assert (result.returncode, result.stdout) == (0, "")
    assert len(stub.log) == 1
    engine = open_db()
    feedback = rows(engine, s.Message, s.Message.native_id == feedback_id)[0]
    assert feedback.source_type == "course-correction"
    assert (
        rows(engine, s.Checkpoint, s.Checkpoint.message_native_id == answer_id)[0].gate_reason
        == "after-correction"
    )


def test_the_same_stop_twice_blocks_once_and_calls_the_observer_once(stub, session):
    assert hook(stub, session).stdout == block(CORRECTION)
    again = hook(stub, session)
    assert (again.returncode, again.stdout) == (0, "")
    assert len(stub.log) == 1


def test_no_correction_when_the_user_wrote_while_the_observer_thought(
    stub, session, corpus, tmp_path
):
    """At an end of turn a correction goes out only if the user has not written since."""
    final = last_record(session)
    typed = {
        k: final[k] for k in ("sessionId", "cwd", "version", "gitBranch", "userType", "isSidechain")
    }
    typed.update(
        parentUuid=final["uuid"],
        type="user",
        uuid=str(uuid.uuid4()),
        timestamp="2025-09-03T00:48:00.000Z",
        message={"role": "user", "content": "never mind, I'll write it myself"},
    )
    line = json.dumps(typed) + "\n"

    # The stub writes the user's message into the transcript while "thinking".
    original = stub.httpd.RequestHandlerClass.do_POST

    def do_post(handler):
        with open(session, "a") as fh:
            fh.write(line)
        original(handler)

    stub.httpd.RequestHandlerClass.do_POST = do_post
    result = hook(stub, session)
    assert (result.returncode, result.stdout) == (0, "")
    engine = open_db()
    [injection] = rows(engine, s.Injection)
    assert injection.status == "skipped" and injection.error.startswith("user-wrote-again")


SUBAGENT = "claude-code/4thehalibit-omarchy-backup/-home-vwestberg-Claude/6e3aa12b-9c1b-4b7d-aad7-901bff58dffb"


def test_a_subagent_stop_audits_the_subagent_thread(stub, corpus, tmp_path):
    """SubagentStop names the subagent's own log; its thread is a sidechain, gated out by default."""
    src = corpus / SUBAGENT / "subagents" / "agent-a610ebe7eea0c9ec8.jsonl"
    dest = tmp_path / "p" / "6e3aa12b-9c1b-4b7d-aad7-901bff58dffb" / "subagents" / src.name
    copy_lines(src, dest)
    copy_lines(
        src.with_name("agent-a610ebe7eea0c9ec8.meta.json"),
        dest.with_name("agent-a610ebe7eea0c9ec8.meta.json"),
    )
    stdin = json.dumps(
        {
            "session_id": "6e3aa12b-9c1b-4b7d-aad7-901bff58dffb",
            "hook_event_name": "SubagentStop",
            "transcript_path": str(tmp_path / "p" / "6e3aa12b-9c1b-4b7d-aad7-901bff58dffb.jsonl"),
            "agent_id": "a610ebe7eea0c9ec8",
            "agent_transcript_path": str(dest),
            "stop_hook_active": False,
        }
    )
    args = ("hook", "claude-code", "--sync", "--observer", "claude", "--base-url", stub.url)
    quiet = run_cli(*args, stdin=stdin, env=KEY)
    assert (quiet.returncode, quiet.stdout) == (0, "")
    engine = open_db()
    [thread] = rows(
        engine,
        s.Thread,
        s.Thread.native_id == "6e3aa12b-9c1b-4b7d-aad7-901bff58dffb/agent-a610ebe7eea0c9ec8",
    )
    assert thread.is_sidechain
    assert [c.gate_reason for c in rows(engine, s.Checkpoint)] == ["sidechain"]
    audited = run_cli(
        *args,
        "--include-sidechains",
        "--min-tool-calls",
        "1",
        "--no-require-edit",
        stdin=stdin,
        env=KEY,
    )
    assert (audited.returncode, audited.stdout) == (0, block(CORRECTION))


def test_the_hook_reads_only_the_new_tail_of_the_transcript(stub, session, corpus, tmp_path):
    """Ingested up to the last turn, the file then grows; the hook must not read the old part again.
    Bytes in the middle of the old part are spoiled (outside the fingerprinted head and tail): a
    full re-read would trip on them."""
    from auditor.ingest.ingester import ingest
    from auditor.ingest.transcript_files import FINGERPRINT_BYTES
    from auditor.plugins import get_plugin_manager

    copy_lines(corpus / CC_SESSION, session, lines=20)
    engine = open_db()
    ingest(engine, get_plugin_manager(), [session])
    data = bytearray(session.read_bytes())
    start, stop = FINGERPRINT_BYTES + 100, len(data) - FINGERPRINT_BYTES - 100
    assert stop - start > 1000
    data[start:stop] = b"#" * (stop - start)
    session.write_bytes(bytes(data))
    append_lines(session, corpus / CC_SESSION, 20, 29)
    result = hook(stub, session)
    assert (result.returncode, result.stdout) == (0, block(CORRECTION))
    assert rows(engine, s.IngestError) == []
    [source] = rows(engine, s.SourceFile)
    assert (source.lines, source.offset) == (29, session.stat().st_size)


def test_a_locked_store_never_holds_the_hook_past_its_deadline(stub, session, store_url, tmp_path):
    open_db(store_url)
    with store_locked(store_url):  # locked until the hook has returned: it gave up waiting
        result = hook(stub, session, "--deadline", "3")
    assert (result.returncode, result.stdout) == (0, "")
    # Given up by the deadline, not by a lock wait running out: PostgreSQL waits for a lock
    # without end unless told, and SQLite's busy wait (30 s) had not ended by the hook's own
    # account of its time, which leaves out the start-up a loaded machine makes slow.
    total_ms = float(re.search(r"total (\d+) ms\)$", result.stderr.strip())[1])
    assert total_ms < DEFAULT_LOCK_WAIT * 1000, result.stderr
    # The failure could not be recorded in time: it is said on stderr, and dropped.
    assert result.stderr.startswith("auditor hook claude-code: failed: ")
    locked = "lock timeout" if store_url.startswith("postgresql") else "database is locked"
    assert "could not be recorded: " in result.stderr and locked in result.stderr
    assert rows(open_db(store_url), s.Run) == []


def test_a_store_locked_for_a_moment_is_waited_for(stub, session, store_url):
    open_db(store_url)
    holder = hold_lock(store_url, 1.5)
    result = hook(stub, session)
    holder.join()
    assert (result.returncode, result.stdout, result.stderr) == (0, block(CORRECTION), "")
