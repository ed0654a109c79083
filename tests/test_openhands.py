"""OpenHands trajectories: a conversation's event stream, one JSON list, one thread."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.store import store_counts, stored_thread
from sqlalchemy import text

from auditor.audit.checkpoints import find_checkpoints
from auditor.ingest.ingester import ingest
from auditor.store.threads import load_messages

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "data" / "formats" / "openhands-trajectory.json"
TRAJS = "openhands/All-Hands-AI-OpenHands"


def test_a_trajectory_is_a_thread_of_turns_and_tool_calls(engine, plugins):
    summary = ingest(engine, plugins, [SAMPLE])
    assert summary.ok and summary.files[0].format == "openhands"
    th, msgs, calls, tokens = stored_thread(engine, "openhands", "openhands-trajectory")
    # The environment's state changes are left out.
    assert [(m.role, m.source_type) for m in msgs] == [
        ("user", "user"),
        ("assistant", "agent"),
        ("tool", "tool-result"),
        ("assistant", "agent"),
        ("tool", "tool-result"),
        ("assistant", "agent"),
    ]
    assert json.loads(msgs[1].blocks)[0] == {
        "kind": "text",
        "text": "First the tests as they stand.",
    }
    assert calls["toolu_run"].name == "execute_bash" and calls["toolu_run"].is_error  # exit code 1
    assert calls["toolu_edit"].is_file_edit and calls["toolu_edit"].edited_paths == [
        "/workspace/cli.py"
    ]
    assert not calls["toolu_edit"].is_error and all(c.result_message_id for c in calls.values())
    assert "finish" not in calls  # the agent's last answer is what it says, not a tool call
    # prompt_tokens counts cache reads and writes; they are taken out of the input.
    assert (tokens.input, tokens.cache_read, tokens.cache_write, tokens.output, tokens.bills) == (
        100 + 200 + 100,
        900 + 1100,
        900,
        150,
        3,
    )
    end = find_checkpoints(th["id"], load_messages(engine, th["id"]))
    assert [(c.message_id, c.tool_calls, c.file_edits) for c in end] == [("6", 2, 1)]


def test_a_damaged_trajectory_is_one_line_naming_where(tmp_path, engine, plugins):
    cut = tmp_path / "cut.json"
    data = SAMPLE.read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    summary = ingest(engine, plugins, [cut])
    assert summary.failed == 1
    with engine.connect() as conn:
        [(path, line, error)] = conn.execute(text("SELECT path, line, error FROM ingest_errors"))
    assert path == str(cut) and line and "malformed JSON document" in error


@pytest.mark.corpus
def test_every_openhands_trajectory_of_the_corpus_ingests(corpus, engine, plugins):
    summary = ingest(engine, plugins, [corpus / TRAJS])
    assert summary.ok, summary.errors
    assert [f.format for f in summary.files] == ["openhands"] * 4
    counts = store_counts(engine)
    assert (counts.threads, counts.messages, counts.answered, counts.edits) == (4, 28, 8, 3)
    chat = stored_thread(engine, "openhands", "basic_interactions")
    assert [m.role for m in chat.messages] == ["user", "assistant"] * 3
