"""A correction Codex was handed as hook context, read back from its rollout.

Codex 0.169 writes a PostToolUse hook's `additionalContext` into the rollout as a developer
message, between the tool call and its output (the records below follow what the real client
wrote in tests/test_real_codex.py). The one carrying auditor's marker is auditor's delivered
correction: stored as a course correction, so `show`, `report followup` and the checkpoints
treat it as one; any other hook's context stays harness text."""

from __future__ import annotations

import json

from auditor.audit.checkpoints import find_checkpoints
from auditor.ingest.ingester import ingest
from auditor.live.delivery import CORRECTION_MARKER
from auditor.reports.followup import followup_report
from auditor.store.threads import load_messages

SESSION = "01a21ac5-c86b-72c2-972a-a0f67949738c"
CORRECTION = "You ran the tests before building; run `make` first, then the tests again."


def item(ts: str, payload: dict) -> dict:
    return {"timestamp": f"2026-11-27T02:11:{ts}Z", "type": "response_item", "payload": payload}


def text(role: str, words: str) -> dict:
    kind = "output_text" if role == "assistant" else "input_text"
    return {"type": "message", "role": role, "content": [{"type": kind, "text": words}]}


def call(n: int, cmd: str) -> dict:
    return {
        "type": "function_call",
        "name": "exec_command",
        "arguments": json.dumps({"cmd": cmd}),
        "call_id": f"call_{n}",
    }


def output(n: int) -> dict:
    return {
        "type": "function_call_output",
        "call_id": f"call_{n}",
        "output": "Process exited with code 0\nOutput:\nok\n",
    }


def rollout(tmp_path, context: str) -> str:
    lines = [
        {
            "timestamp": "2026-11-27T02:11:39.000Z",
            "type": "session_meta",
            "payload": {"id": SESSION, "cwd": "/work/project", "cli_version": "0.169.0"},
        },
        {
            "timestamp": "2026-11-27T02:11:39.300Z",
            "type": "turn_context",
            "payload": {"model": "gpt-5.5"},
        },
        item("39.900", text("user", "Make the tests pass.")),
        item("40.000", call(1, "make test")),
        item("40.700", text("developer", context)),  # the hook's context, before the output
        item("40.701", output(1)),
        item("41.000", call(2, "make && make test")),
        item("41.500", output(2)),
        item("42.000", text("assistant", "Built and tested: all pass.")),
    ]
    path = tmp_path / "sessions" / f"rollout-2026-11-27T02-11-39-{SESSION}.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return str(path)


def thread_messages(engine):
    from sqlalchemy import text as sql

    with engine.connect() as conn:
        tid = conn.execute(
            sql("SELECT id FROM threads WHERE native_id = :n"), {"n": SESSION}
        ).scalar_one()
    return tid, load_messages(engine, tid)


def test_auditor_s_correction_given_as_hook_context_is_a_course_correction(
    engine, plugins, tmp_path
):
    ingest(engine, plugins, [rollout(tmp_path, f"{CORRECTION_MARKER} {CORRECTION}")])
    tid, messages = thread_messages(engine)
    [given] = [m for m in messages if m.role == "system"]
    assert given.source_type == "course-correction"
    assert CORRECTION in given.text
    # The checkpoints split there: the round the correction came in is audited as one after a
    # correction (the loop guard's after-correction), not as part of the turn before it.
    rounds = [c for c in find_checkpoints(tid, messages, "every-inference") if c.kind != "end-turn"]
    assert [(c.message_id, c.after_correction) for c in rounds] == [
        ("call_1:output", True),
        ("call_2:output", True),
    ]
    [row] = followup_report(engine).rows
    assert (row["correction_id"], row["continued"], row["ran_tests"]) == (
        given.native_id,
        True,
        True,
    )


def test_another_hook_s_context_stays_harness_text(engine, plugins, tmp_path):
    ingest(engine, plugins, [rollout(tmp_path, "Lint: 0 warnings.")])
    tid, messages = thread_messages(engine)
    [given] = [m for m in messages if m.role == "system"]
    assert given.source_type == "meta"
    assert followup_report(engine).rows == []
    rounds = [c for c in find_checkpoints(tid, messages, "every-inference") if c.kind != "end-turn"]
    assert [(c.message_id, c.after_correction) for c in rounds] == [
        ("call_1:output", False),
        ("call_2:output", False),
    ]
