"""Inspect AI evaluation logs (`.json` and `.eval`): each sample, each epoch, a thread."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest
from helpers.store import store_counts, stored_thread
from sqlalchemy import text

from auditor.audit.checkpoints import find_checkpoints
from auditor.ingest.ingester import ingest
from auditor.store.threads import load_messages

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "data" / "formats" / "inspect-ai-log.json"
LOGS = "inspect-ai/UKGovernmentBEIS-inspect_ai"


def errors(engine) -> list[tuple]:
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(text("SELECT path, line, error FROM ingest_errors"))]


def test_each_sample_and_epoch_of_a_log_is_a_thread(engine, plugins):
    summary = ingest(engine, plugins, [SAMPLE])
    assert summary.ok and summary.files[0].format == "inspect-ai"
    th, msgs, calls, tokens = stored_thread(engine, "inspect-ai", "hand-made-eval-1/fix-readme/1")
    assert th["title"] == "typo_fix · sample fix-readme"
    assert [(m.role, m.source_type) for m in msgs] == [
        ("system", "meta"),
        ("user", "user"),  # the sample's input stands for the person's turn
        ("assistant", "agent"),
        ("tool", "tool-result"),
        ("assistant", "agent"),
        ("tool", "tool-result"),
        ("user", "meta"),  # the solver's "proceed" nudge is harness text
        ("assistant", "agent"),
    ]
    assert msgs[2].timestamp.startswith("2026-11-27 04:00:02")  # from the sample's model event
    assert msgs[3].timestamp == msgs[2].timestamp  # a tool result: the last time seen
    assert json.loads(msgs[2].blocks)[0] == {"kind": "thinking", "text": "Find it first."}

    assert calls["call_1"].name == "bash" and not calls["call_1"].is_file_edit
    assert calls["call_2"].is_file_edit and calls["call_2"].edited_paths == ["/repo/README.md"]
    assert calls["call_2"].is_error and not calls["call_1"].is_error
    assert all(c.result_message_id for c in calls.values())
    # Anthropic counts cached input apart: input_tokens stays as it is.
    assert (tokens.input, tokens.cache_read, tokens.cache_write, tokens.output) == (
        1200,
        2400,
        800,
        150,
    )

    second = stored_thread(engine, "inspect-ai", "hand-made-eval-1/fix-readme/2")
    assert second.thread["title"] == "typo_fix · sample fix-readme · epoch 2"
    assert len(second.messages) == 2 and second.tokens.output == 12


def test_the_end_of_a_samples_turn_is_its_last_answer(engine, plugins):
    ingest(engine, plugins, [SAMPLE])
    th = stored_thread(engine, "inspect-ai", "hand-made-eval-1/fix-readme/1").thread
    [end] = find_checkpoints(th["id"], load_messages(engine, th["id"]))
    assert (end.message_id, end.kind, end.tool_calls, end.file_edits) == ("a3", "end-turn", 2, 1)


def test_an_eval_zip_reads_as_its_json_log(tmp_path, engine, plugins):
    doc = json.loads(SAMPLE.read_text())
    samples = doc.pop("samples")
    path = tmp_path / "typo.eval"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("header.json", json.dumps(doc))
        for s in samples:
            z.writestr(f"samples/{s['id']}_epoch_{s['epoch']}.json", json.dumps(s))
    summary = ingest(engine, plugins, [path])
    assert summary.ok and summary.files[0].format == "inspect-ai"
    assert summary.files[0].messages == 8 + 2


def test_a_damaged_log_is_one_line_naming_where(tmp_path, engine, plugins):
    cut = tmp_path / "cut.json"
    data = SAMPLE.read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    zipped = tmp_path / "cut.eval"
    good = tmp_path / "good.eval"
    with zipfile.ZipFile(good, "w") as z:
        z.writestr("header.json", json.dumps({"eval": {"eval_id": "x"}}))
    zipped.write_bytes(good.read_bytes()[:-30])  # the zip's directory cut off
    summary = ingest(engine, plugins, [cut, zipped])
    assert summary.failed == 2
    found = {path: (line, error) for path, line, error in errors(engine)}
    line, error = found[str(cut)]
    assert line and "malformed JSON document" in error
    assert "damaged .eval log (a zip)" in found[str(zipped)][1]


def test_a_message_that_is_no_object_costs_only_itself(tmp_path, engine, plugins):
    doc = json.loads(SAMPLE.read_text())
    doc["samples"][0]["messages"][6] = ["not", "a", "message"]  # the user's nudge
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(doc))
    summary = ingest(engine, plugins, [path])
    assert summary.errors == [
        f"{path}: sample 0: message 6 is not a JSON object (found a JSON array); skipped"
    ]
    _, msgs, calls, _ = stored_thread(engine, "inspect-ai", "hand-made-eval-1/fix-readme/1")
    assert len(msgs) == 7 and all(c.result_message_id for c in calls.values())


@pytest.mark.corpus
def test_every_inspect_log_of_the_corpus_ingests(corpus, engine, plugins):
    summary = ingest(engine, plugins, [corpus / LOGS])
    assert summary.ok, summary.errors
    assert [f.format for f in summary.files] == ["inspect-ai"] * 4
    counts = store_counts(engine)
    # 10 samples in the .eval, 1 + 3 + 1 in the JSON logs; the browser agent's 4 calls answered.
    assert (counts.threads, counts.messages, counts.answered) == (15, 52, 4)
    browser = stored_thread(engine, "inspect-ai", "ZB2vu5GNujYaBdPSReCeop/1/1")
    assert browser.tokens.input + browser.tokens.cache_read == 15235  # OpenAI's input counts cache
    assert browser.tokens.cache_read == 9088
