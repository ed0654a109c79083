"""SWE-agent trajectories (`.traj`): the run's history, its commands as tool calls."""

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
SAMPLE = ROOT / "data" / "formats" / "swe-agent-greet.traj"
TRAJS = "swe-agent/SWE-agent"


def test_a_trajectory_reads_as_one_turn_of_commands_ending_in_the_submission(engine, plugins):
    summary = ingest(engine, plugins, [SAMPLE])
    assert summary.ok and summary.files[0].format == "swe-agent"
    th, msgs, calls, tokens = stored_thread(engine, "swe-agent", "swe-agent-greet")
    assert [(m.role, m.source_type) for m in msgs] == [
        ("system", "meta"),
        ("user", "meta"),  # the demonstration
        ("user", "user"),  # the issue: the task the person gave
        *[("assistant", "agent"), ("user", "tool-result")] * 3,  # observations as user messages
        ("assistant", "agent"),  # submit: the run's last answer
    ]
    by_name = {c.name: c for c in calls.values()}
    assert set(by_name) == {"open", "edit", "echo"}
    assert by_name["edit"].is_file_edit and not by_name["open"].is_file_edit
    assert by_name["echo"].is_file_edit and by_name["echo"].edited_paths == ["check.py"]
    assert all(c.result_message_id for c in calls.values())
    assert "print('Hello')" in json.loads(msgs[-1].blocks)[-1]["text"]  # the submitted patch
    assert (tokens.input, tokens.output) == (4000, 120)
    assert json.loads(th["meta"])["exit_status"] == "submitted"
    [end] = find_checkpoints(th["id"], load_messages(engine, th["id"]))
    assert (end.message_id, end.tool_calls, end.file_edits) == ("h9", 3, 2)


def test_function_calling_answers_come_back_as_tool_messages(tmp_path, engine, plugins):
    doc = json.loads(SAMPLE.read_text())
    doc["history"][3].update(
        tool_calls=[{"id": "call_open", "function": {"name": "open", "arguments": "{}"}}]
    )
    doc["history"][4] = {
        "role": "tool",
        "content": "1:def greet():",
        "tool_call_ids": ["call_open"],
    }
    path = tmp_path / "fc.traj"
    path.write_text(json.dumps(doc))
    assert ingest(engine, plugins, [path]).ok
    _, msgs, calls, _ = stored_thread(engine, "swe-agent", "fc")
    assert calls["call_open"].result_message_id == "h4" and msgs[4].role == "tool"


def test_a_damaged_trajectory_is_one_line_naming_where(tmp_path, engine, plugins):
    cut = tmp_path / "cut.traj"
    data = SAMPLE.read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    summary = ingest(engine, plugins, [tmp_path])  # a directory walk finds .traj files
    assert summary.failed == 1
    with engine.connect() as conn:
        [(path, line, error)] = conn.execute(text("SELECT path, line, error FROM ingest_errors"))
    assert path == str(cut) and line and "malformed JSON document" in error


@pytest.mark.corpus
def test_every_swe_agent_trajectory_of_the_corpus_ingests(corpus, engine, plugins):
    summary = ingest(engine, plugins, [corpus / TRAJS])
    assert summary.ok, summary.errors
    assert [f.format for f in summary.files] == ["swe-agent"] * 4
    counts = store_counts(engine)
    assert counts[:5] == (4, 97, 38, 38, 17)  # threads, messages, calls, answered, edits
    pydicom = stored_thread(engine, "swe-agent", "gpt4__pydicom__pydicom-1458")
    assert (pydicom.tokens.input, pydicom.tokens.output) == (122612, 1369)  # model_stats
