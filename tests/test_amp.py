"""Amp thread exports (`amp threads export`): the corpus fixture and the shipped sample."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers.store import stored_thread
from sqlalchemy import text

from auditor.ingest.ingester import ingest

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "data" / "samples"
AMP_SAMPLE = SAMPLES / "amp-thread-export.json"


def raw_amp(path: Path) -> dict:
    """What an export holds, counted from the raw JSON."""
    doc = json.loads(path.read_text())
    blocks = [(m, b) for m in doc["messages"] for b in m["content"]]
    uses = {b["id"]: b for _, b in blocks if b["type"] == "tool_use"}
    usage = [m["usage"] for m in doc["messages"] if "usage" in m]
    return {
        "id": doc["id"],
        "messages": len(doc["messages"]),
        "calls": set(uses),
        "edits": {
            k
            for k, b in uses.items()
            if b["name"] in ("edit_file", "create_file", "undo_edit", "format_file", "delete_file")
        },
        "errors": {
            b["toolUseID"]
            for _, b in blocks
            if b["type"] == "tool_result"
            and (
                b["run"]["status"] == "error"
                or (
                    isinstance(b["run"].get("result"), dict)
                    and b["run"]["result"].get("exitCode", 0) != 0
                )
            )
        },
        "input": sum(u.get("inputTokens", 0) for u in usage),
        "output": sum(u.get("outputTokens", 0) for u in usage),
        "cache_read": sum(u.get("cacheReadInputTokens", 0) for u in usage),
        "cache_write": sum(u.get("cacheCreationInputTokens", 0) for u in usage),
        "usage_rows": len(usage),
    }


@pytest.mark.corpus
def test_corpus_amp_export(corpus, engine, plugins):
    path = corpus / "amp" / "letta-ai-trajectory" / "orb-thread-export.input.json"
    summary = ingest(engine, plugins, [corpus / "amp"])
    assert summary.files_seen == 1 and summary.failed == 0, summary.errors
    assert summary.files[0].format == "amp"
    expected = raw_amp(path)
    th, msgs, calls, _tokens = stored_thread(engine, "amp", expected["id"])
    assert th["cwd"] == "/workspace/example"
    assert th["git_branch"] == "main"
    assert th["message_count"] == expected["messages"]
    assert [m.role for m in msgs] == ["user", "assistant", "user", "system", "assistant"]
    assert [m.source_type for m in msgs] == [
        "user",
        "agent",
        "tool-result",
        "compact-summary",
        "agent",
    ]
    assert json.loads(msgs[3].blocks) == [{"kind": "text", "text": "Compaction summary."}]
    assert set(calls) == expected["calls"] and calls["tool-1"].result_message_id == "2"
    assert calls["tool-1"].is_error == 0
    # times: meta.sentAt (epoch ms) for the user, usage.timestamp for the assistant
    assert msgs[0].timestamp.startswith("2026-08-22 10:00:00")
    assert msgs[1].timestamp.startswith("2026-08-22 10:00:01")
    assert th["models"] == "example/model"
    assert msgs[1].stop_reason == "tool_use"


def test_sample_thread_course_correction_and_edits(engine, plugins):
    summary = ingest(engine, plugins, [AMP_SAMPLE])
    assert summary.failed == 0, summary.errors
    expected = raw_amp(AMP_SAMPLE)
    th, msgs, calls, tokens = stored_thread(engine, "amp", expected["id"])
    assert th["title"] == "Fix slugify trailing dashes"
    assert th["cwd"] == "/home/dev/textkit" and th["git_branch"] == "fix/slugify"
    assert th["message_count"] == expected["messages"] == len(msgs)

    (correction,) = [m for m in msgs if m.source_type == "course-correction"]
    assert correction.role == "user"
    assert json.loads(correction.blocks)[0]["text"].startswith("Course correction:")
    typed = [m for m in msgs if m.source_type == "user"]
    assert len(typed) == 1 and typed[0].seq == 0

    assert set(calls) == expected["calls"]
    assert {k for k, c in calls.items() if c.is_file_edit} == expected["edits"]
    assert th["file_edit_count"] == len(expected["edits"]) == 4
    assert calls["toolu_02"].edited_paths == ["/home/dev/textkit/src/text.py"]
    assert calls["toolu_04"].edited_paths == ["/home/dev/textkit/tests/test_slugify_trailing.py"]
    assert {k for k, c in calls.items() if c.is_error} == expected["errors"] == {"toolu_05"}
    assert all(c.result_message_id for c in calls.values())

    assert (tokens.input, tokens.output, tokens.cache_read, tokens.cache_write, tokens.bills) == (
        expected["input"],
        expected["output"],
        expected["cache_read"],
        expected["cache_write"],
        expected["usage_rows"],
    )
    assistant = [m for m in msgs if m.role == "assistant"]
    assert all(
        m.usage_key == f"msg:{m.native_id}" and m.model == "claude-sonnet-4-5" for m in assistant
    )


def test_rewritten_export_replaces_and_adds(engine, plugins, tmp_path):
    doc = json.loads(AMP_SAMPLE.read_text())
    path = tmp_path / "T-growing.json"
    short = dict(doc, messages=doc["messages"][:6])
    path.write_text(json.dumps(short))
    assert ingest(engine, plugins, [path]).new == 1
    path.write_text(json.dumps(doc, indent=1))
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 1_000_000_000))
    again = ingest(engine, plugins, [path])
    assert again.rewritten == 1 and again.failed == 0
    th, msgs, _calls, _tokens = stored_thread(engine, "amp", doc["id"])
    assert len(msgs) == th["message_count"] == len(doc["messages"])
    assert ingest(engine, plugins, [path]).skipped == 1


def test_malformed_export_is_one_problem_with_its_line(engine, plugins, tmp_path):
    lines = AMP_SAMPLE.read_text().splitlines(keepends=True)
    lines[40] = lines[40].rstrip("\n") + " oops\n"
    bad = tmp_path / "T-broken.json"
    bad.write_text("".join(lines))
    summary = ingest(engine, plugins, [bad])
    assert summary.failed == 1
    with engine.connect() as conn:
        errs = conn.execute(text("SELECT path, line, error FROM ingest_errors")).all()
        n_threads = conn.execute(text("SELECT COUNT(*) FROM threads")).scalar_one()
    assert len(errs) == 1 and errs[0].line == 41 and "malformed JSON" in errs[0].error
    assert n_threads == 0


def test_tool_result_statuses(tmp_path, engine, plugins):
    doc = {
        "v": 3,
        "id": "T-statuses",
        "created": 1767261600000,
        "env": {"initial": {"workingDirectory": "/w"}},
        "messages": [
            {"role": "user", "messageId": 0, "content": [{"type": "text", "text": "go"}]},
            {
                "role": "assistant",
                "messageId": 1,
                "content": [
                    {"type": "tool_use", "id": "a", "name": "Bash", "input": {"cmd": "false"}},
                    {"type": "tool_use", "id": "b", "name": "edit_file", "input": {"path": "x.py"}},
                    {"type": "tool_use", "id": "c", "name": "undo_edit", "input": {"path": "x.py"}},
                    {"type": "tool_use", "id": "d", "name": "Read", "input": {"path": "y.py"}},
                ],
            },
            {
                "role": "user",
                "messageId": 2,
                "content": [
                    {
                        "type": "tool_result",
                        "toolUseID": "a",
                        "run": {"status": "done", "result": {"output": "", "exitCode": 1}},
                    },
                    {
                        "type": "tool_result",
                        "toolUseID": "b",
                        "run": {"status": "error", "error": {"message": "no match"}},
                    },
                    {
                        "type": "tool_result",
                        "toolUseID": "c",
                        "run": {"status": "rejected-by-user"},
                    },
                    {
                        "type": "tool_result",
                        "toolUseID": "d",
                        "run": {"status": "done", "result": "contents"},
                    },
                ],
            },
            {
                "role": "user",
                "messageId": 3,
                "meta": {"source": {"type": "course-correction"}},
                "content": [{"type": "text", "text": "Stop: x.py is generated."}],
            },
        ],
    }
    path = tmp_path / "T-statuses.json"
    path.write_text(json.dumps(doc))
    assert ingest(engine, plugins, [path]).failed == 0
    _th, msgs, calls, _ = stored_thread(engine, "amp", "T-statuses")
    assert {k: bool(c.is_error) for k, c in calls.items()} == {
        "a": True,
        "b": True,
        "c": True,
        "d": False,
    }
    assert {k for k, c in calls.items() if c.is_file_edit} == {"b", "c"}
    assert [m.source_type for m in msgs] == ["user", "agent", "tool-result", "course-correction"]
    results = json.loads(msgs[2].blocks)
    assert results[1]["text"] == "no match" and results[3]["text"] == "contents"


def test_detection():
    from auditor_plugins.amp import AmpFormat
    from auditor_plugins.openai_chat import OpenAIChatFormat

    amp, chat = AmpFormat(), OpenAIChatFormat()
    head = AMP_SAMPLE.read_bytes()[:65536]
    assert amp.detect(AMP_SAMPLE, head) and not chat.detect(AMP_SAMPLE, head)
    other = SAMPLES / "openai-chat-log.json"
    assert not amp.detect(other, other.read_bytes())
    assert not amp.detect(Path("T-x.jsonl"), head)
    chat_with_t_id = json.dumps(
        {"id": "T-1", "messages": [{"role": "user", "content": "x"}]}
    ).encode()
    assert not amp.detect(Path("t.json"), chat_with_t_id) and chat.detect(
        Path("t.json"), chat_with_t_id
    )


def test_samples_ingest_cleanly_with_the_cli():
    """`auditor ingest data/samples`, as the README demo runs it."""
    from auditor.cli.main import cli

    result = CliRunner().invoke(cli, ["ingest", "--json", str(SAMPLES)])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output[result.output.index("{") :])
    assert summary["failed"] == 0 and summary["errors"] == []
    assert summary["files_seen"] >= 2 and summary["new"] == summary["files_seen"]
    again = CliRunner().invoke(cli, ["ingest", "--json", str(SAMPLES)])
    assert json.loads(again.output[again.output.index("{") :])["skipped"] == summary["files_seen"]
