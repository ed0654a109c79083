"""mini-swe-agent trajectories: the command block of each answer as a bash call."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.store import store_counts, stored_thread

from auditor.audit.checkpoints import find_checkpoints
from auditor.ingest.ingester import ingest
from auditor.store.threads import load_messages

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "data" / "formats" / "mini-swe-agent-greet.traj.json"
CORPUS_FILE = "swe-agent/mini-swe-agent/github_issue.traj.json"


def test_a_run_reads_as_one_turn_of_bash_calls_ending_in_the_submission(engine, plugins):
    summary = ingest(engine, plugins, [SAMPLE])
    assert summary.ok and summary.files[0].format == "mini-swe-agent"
    th, msgs, calls, tokens = stored_thread(engine, "mini-swe-agent", "mini-swe-agent-greet")
    assert [(m.role, m.source_type) for m in msgs] == [
        ("system", "meta"),
        ("user", "user"),  # the task
        ("assistant", "agent"),
        ("user", "tool-result"),
        ("assistant", "agent"),  # no command block...
        ("user", "meta"),  # ...so mini's reminder of its format: no person wrote it
        *[("assistant", "agent"), ("user", "tool-result")] * 2,
        ("assistant", "agent"),  # the submission (the diff after it folded into it)
    ]
    assert [c.name for c in calls.values()] == ["bash"] * 3
    rewrite = calls["m6:bash"]
    assert rewrite.is_file_edit and rewrite.edited_paths == ["greet.py"]
    assert not calls["m2:bash"].is_file_edit
    assert calls["m8:bash"].is_error  # <returncode>1</returncode>
    assert all(c.result_message_id for c in calls.values())
    blocks = json.loads(msgs[2].blocks)
    assert blocks[0]["text"] == "THOUGHT: Let me read the file first."  # the block is the call
    assert blocks[1]["tool_input"] == {"command": "cat greet.py"}
    assert "+def greet(name=" in json.loads(msgs[-1].blocks)[-1]["text"]
    # extra.response.usage: prompt_tokens less the cached part is the input.
    assert (tokens.input, tokens.cache_read, tokens.output, tokens.bills) == (
        900 + 200 + 200 + 200 + 200,
        800 + 900 + 1000 + 1100,
        30 + 20 + 60 + 25 + 30,
        5,
    )
    assert json.loads(th["meta"])["exit_status"] == "Submitted"
    [end] = find_checkpoints(th["id"], load_messages(engine, th["id"]))
    assert (end.message_id, end.tool_calls, end.file_edits) == ("m10", 3, 1)


def test_a_message_that_is_no_object_costs_only_itself(tmp_path, engine, plugins):
    doc = json.loads(SAMPLE.read_text())
    doc["messages"][5] = "not a message"
    path = tmp_path / "odd.traj.json"
    path.write_text(json.dumps(doc))
    summary = ingest(engine, plugins, [path])
    assert summary.errors == [
        f"{path}: message 5 is not a JSON object (found a JSON string); skipped"
    ]
    _, msgs, calls, _ = stored_thread(engine, "mini-swe-agent", "odd")
    assert len(msgs) == 10 and len(calls) == 3


@pytest.mark.corpus
def test_the_corpus_trajectory_gets_its_commands_as_calls(corpus, engine, plugins):
    summary = ingest(engine, plugins, [corpus / CORPUS_FILE])
    assert summary.ok and summary.files[0].format == "mini-swe-agent"
    # Read as a generic chat log before: 22 messages, 0 tool calls.
    assert store_counts(engine) == (1, 21, 9, 9, 2, 2, 0)
