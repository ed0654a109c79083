"""Generic OpenAI-style chat logs: a JSON document, a bare list of messages, or JSONL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.store import stored_thread
from sqlalchemy import text

from auditor.ingest.ingester import ingest

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "data" / "samples" / "openai-chat-log.json"


def billed(tokens) -> tuple[int, int, int, int]:
    return tokens.input, tokens.cache_read, tokens.output, tokens.bills


def write(tmp_path: Path, name: str, data) -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def test_sample_chat_log(engine, plugins):
    summary = ingest(engine, plugins, [SAMPLE])
    assert summary.failed == 0, summary.errors
    assert summary.files[0].format == "openai"
    raw = json.loads(SAMPLE.read_text())
    th, msgs, calls, tokens = stored_thread(engine, "openai", raw["id"])
    assert th["title"] == "Rename config key" and th["models"] == "gpt-4.1-mini"
    assert len(msgs) == th["message_count"] == len(raw["messages"])
    assert [m.role for m in msgs[:4]] == ["system", "user", "assistant", "tool"]
    assert [m.source_type for m in msgs[:4]] == ["meta", "user", "agent", "tool-result"]

    raw_calls = {c["id"]: c for m in raw["messages"] for c in m.get("tool_calls") or []}
    assert set(calls) == set(raw_calls) and all(c.result_message_id for c in calls.values())
    assert {k for k, c in calls.items() if c.is_file_edit} == {"call_b1", "call_b2", "call_d1"}
    assert calls["call_b1"].edited_paths == ["config/settings.yaml"]
    assert {k for k, c in calls.items() if c.is_error} == {"call_b2"}
    # arguments (a JSON string) are decoded
    use = json.loads(msgs[2].blocks)[0]
    assert use["tool_input"] == {"path": "config/settings.yaml"}

    usage = [m["usage"] for m in raw["messages"] if "usage" in m]
    cached = sum(u["prompt_tokens_details"]["cached_tokens"] for u in usage)
    assert billed(tokens) == (
        sum(u["prompt_tokens"] for u in usage) - cached,
        cached,
        sum(u["completion_tokens"] for u in usage),
        len(usage),
    )


def test_bare_list_and_editor_commands(engine, plugins, tmp_path):
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "fix it"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
            ],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "v",
                    "type": "function",
                    "function": {
                        "name": "str_replace_editor",
                        "arguments": json.dumps({"command": "view", "path": "a.py"}),
                    },
                },
                {
                    "id": "e",
                    "type": "function",
                    "function": {
                        "name": "str_replace_editor",
                        "arguments": json.dumps(
                            {"command": "insert", "path": "a.py", "insert_line": 3, "new_str": "x"}
                        ),
                    },
                },
                {
                    "id": "p",
                    "type": "function",
                    "function": {
                        "name": "apply_patch",
                        "arguments": json.dumps(
                            {
                                "input": "*** Begin Patch\n*** Update File: b.py\n@@\n-x\n+y\n*** End Patch"
                            }
                        ),
                    },
                },
                {
                    "id": "s",
                    "type": "function",
                    "function": {
                        "name": "bash",
                        "arguments": json.dumps({"command": "sed -i 's/a/b/' c.py"}),
                    },
                },
                {
                    "id": "r",
                    "type": "function",
                    "function": {"name": "bash", "arguments": "not json {"},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "v", "content": "1 import os"},
        {"role": "tool", "tool_call_id": "e", "content": [{"type": "text", "text": "inserted"}]},
    ]
    path = write(tmp_path, "session-42.json", messages)
    assert ingest(engine, plugins, [path]).failed == 0
    _th, msgs, calls, _ = stored_thread(engine, "openai", "session-42")  # no id: the file stem
    assert {k for k, c in calls.items() if c.is_file_edit} == {"e", "p", "s"}
    assert calls["p"].edited_paths == ["b.py"]
    assert calls["s"].edited_paths == ["c.py"]
    blocks = json.loads(msgs[0].blocks)
    assert [b["kind"] for b in blocks] == ["text", "image"] and "base64" not in msgs[0].blocks
    assert json.loads(msgs[1].blocks)[-1]["tool_input"] == "not json {"  # kept as the raw string
    assert json.loads(msgs[3].blocks)[0]["text"] == "inserted"


def test_edit_tools_are_configurable(engine, plugins, tmp_path, monkeypatch):
    monkeypatch.setenv("AUDITOR_OPENAI_EDIT_TOOLS", "save_document, write_file")
    doc = {
        "id": "cfg",
        "messages": [
            {"role": "user", "content": "save"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "1",
                        "function": {
                            "name": "save_document",
                            "arguments": json.dumps({"filename": "doc.md"}),
                        },
                    },
                    {
                        "id": "2",
                        "function": {
                            "name": "edit_file",
                            "arguments": json.dumps({"path": "x.py"}),
                        },
                    },
                ],
            },
        ],
    }
    assert ingest(engine, plugins, [write(tmp_path, "cfg.json", doc)]).failed == 0
    _, _, calls, _ = stored_thread(engine, "openai", "cfg")
    assert calls["1"].is_file_edit and calls["1"].edited_paths == ["doc.md"]
    assert not calls["2"].is_file_edit  # the variable replaces the defaults


def test_top_level_usage_only_when_messages_have_none(engine, plugins, tmp_path):
    msgs = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]
    total = {
        "prompt_tokens": 100,
        "completion_tokens": 10,
        "prompt_tokens_details": {"cached_tokens": 40},
    }
    ingest(
        engine, plugins, [write(tmp_path, "a.json", {"id": "a", "messages": msgs, "usage": total})]
    )
    assert billed(stored_thread(engine, "openai", "a").tokens) == (60, 40, 10, 1)
    per_message = [msgs[0], dict(msgs[1], usage={"prompt_tokens": 100, "completion_tokens": 10})]
    ingest(
        engine,
        plugins,
        [write(tmp_path, "b.json", {"id": "b", "messages": per_message, "usage": total})],
    )
    assert billed(stored_thread(engine, "openai", "b").tokens) == (100, 0, 10, 1)


def test_jsonl_one_message_per_line(engine, plugins, tmp_path):
    lines = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": "hello",
            "usage": {"prompt_tokens": 20, "completion_tokens": 2},
        },
    ]
    path = write(
        tmp_path,
        "chat.jsonl",
        "".join(json.dumps(x) + "\n" for x in lines[:2])
        + "{broken\n"
        + json.dumps(lines[2])
        + "\n",
    )
    summary = ingest(engine, plugins, [path])
    assert summary.files[0].format == "openai"
    assert any(e.startswith(f"{path}:3: malformed JSON") for e in summary.errors)
    _th, msgs, _, tokens = stored_thread(engine, "openai", "chat")
    assert [m.role for m in msgs] == ["system", "user", "assistant"]
    assert [m.seq for m in msgs] == [1, 2, 4]
    assert billed(tokens) == (20, 0, 2, 1)


def test_malformed_document(engine, plugins, tmp_path):
    path = write(
        tmp_path,
        "bad.json",
        '{\n  "messages": [\n    {"role": "user", "content": "x"},\n    oops\n  ]\n}\n',
    )
    summary = ingest(engine, plugins, [path], format_name="openai")
    assert summary.failed == 1
    with engine.connect() as conn:
        (err,) = conn.execute(text("SELECT line, error FROM ingest_errors")).all()
        assert conn.execute(text("SELECT COUNT(*) FROM messages")).scalar_one() == 0
    assert err.line == 4 and "malformed JSON" in err.error


@pytest.mark.parametrize(
    "name,doc,claimed",
    [
        ("chat.json", {"model": "m", "messages": [{"role": "user", "content": "x"}]}, True),
        ("list.json", [{"role": "assistant", "content": "x"}], True),
        ("empty.json", [], False),
        (
            "amp.json",
            {"v": 1, "id": "T-abc", "created": 1, "messages": [{"role": "user", "content": []}]},
            False,
        ),
        (
            "gemini.json",
            {"sessionId": "s", "projectHash": "h", "messages": [{"type": "user", "content": "x"}]},
            False,
        ),
        ("gemini2.json", {"messages": [{"id": "1", "type": "gemini", "content": "x"}]}, False),
        (
            "inspect.json",
            {"eval": {}, "samples": [{"messages": [{"role": "user", "content": "x"}]}]},
            False,
        ),
        (
            "mini-swe.json",
            {
                "info": {},
                "messages": [{"role": "system", "content": "x"}],
                "trajectory_format": "mini-swe-agent-1",
            },
            False,
        ),
        ("events.json", [{"id": 1, "source": "agent", "action": "run"}], False),
        ("meta.json", {"agentType": "Explore"}, False),
        ("nested.json", {"data": {"messages": [{"role": "user", "content": "x"}]}}, False),
    ],
)
def test_detection(name, doc, claimed):
    from auditor_plugins.openai_chat import OpenAIChatFormat

    data = json.dumps(doc, indent=2).encode()
    assert OpenAIChatFormat().detect(Path(name), data) is claimed


def test_detection_of_jsonl_and_long_heads():
    from auditor_plugins.openai_chat import OpenAIChatFormat

    fmt = OpenAIChatFormat()
    assert fmt.detect(Path("c.jsonl"), b'{"role": "user", "content": "hi"}\n')
    # Claude Code and Codex lines are not chat messages
    assert not fmt.detect(
        Path("c.jsonl"),
        b'{"type": "user", "uuid": "u", "sessionId": "s", "message": {"role": "user", "content": "x"}}\n',
    )
    assert not fmt.detect(
        Path("c.jsonl"),
        b'{"timestamp": "t", "type": "response_item", "payload": {"role": "user"}}\n',
    )
    # The head of a large document is cut short: the top-level keys are still found.
    big = b'{"id": "x", "messages": [{"content": "' + b"y" * 70000 + b'", "role": "user"}]}'
    assert not fmt.detect(Path("big.json"), big[:65536])  # role not seen yet: not claimed
    big = b'{"id": "x", "messages": [{"role": "user", "content": "' + b"y" * 70000 + b'"}]}'
    assert fmt.detect(Path("big.json"), big[:65536])


def test_registered(plugins):
    fmt = plugins.formats()["openai"]
    assert fmt.agent == "openai" and fmt.appendable is False
