"""Gemini CLI chat logs (`session-*.jsonl`), read from a sample of our own.

The sample is a session the real Gemini CLI 0.61.0 wrote against a scripted model server (see
tests/test_real_gemini_cli.py), paths scrubbed, with a few lines added by hand the CLI writes
only interactively: a second prompt that was rewound (`$rewindTo`), the prompt typed instead,
and the summary (`$set`). The expected figures are read straight from its lines here.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers.store import stored_thread
from sqlalchemy import text

from auditor.ingest.ingester import ingest
from auditor.store.db import open_db

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "data" / "samples" / "gemini-cli" / "session-2026-11-27T02-22-e25d6c93.jsonl"
SESSION = "e25d6c93-1311-41f3-b0a4-32e4f32dd9a4"
CALL = "read_file__read_file_1795746144375_0"


def records() -> list[dict]:
    return [json.loads(line) for line in SAMPLE.read_text().splitlines()]


def messages() -> list[dict]:
    """Every message line, and the messages of `$set`s, in file order."""
    out = []
    for r in records():
        out += r.get("$set", {}).get("messages", []) if "$set" in r else [r] if "id" in r else []
    return out


def bills() -> dict[str, dict]:
    """The last `tokens` each reply id was written with: one bill per model call."""
    out = {}
    for r in records():
        if r.get("type") == "gemini" and r.get("tokens"):
            out[r["id"]] = r["tokens"]
    return out


def test_the_sample_folds_as_the_cli_loads_it(engine, plugins):
    summary = ingest(engine, plugins, [SAMPLE])
    assert summary.ok and summary.files[0].format == "gemini-jsonl"
    t = stored_thread(engine, "gemini-cli", SESSION)
    got = [(m.role, m.source_type, m.native_id) for m in t.messages]
    ids = {
        r["content"][0]["text"]: r["id"]
        for r in messages()
        if r["type"] == "user" and "text" in r["content"][0]
    }
    replies = {r["content"]: r["id"] for r in messages() if r["type"] == "gemini"}
    assert got == [
        ("user", "meta", next(k for t_, k in ids.items() if t_.startswith("<session_context>"))),
        ("user", "user", ids["read notes.txt"]),
        ("assistant", "agent", replies[""]),
        ("assistant", "agent", CALL),
        ("tool", "tool-result", f"{CALL}:result"),
        ("user", "course-correction", f"{CALL}:hook_context"),  # the AfterTool hook's context
        ("assistant", "agent", replies["The notes say hello."]),
        ("user", "course-correction", next(k for t_, k in ids.items() if "[auditor" in t_)),
        ("assistant", "agent", replies["Sorry: notes.txt says hello world."]),
        ("user", "user", ids["thanks, that is all"]),  # the French prompt was rewound
        ("assistant", "agent", replies["You're welcome."]),
    ]
    assert [m.seq for m in t.messages] == list(range(len(got)))
    result = json.loads(t.messages[4].blocks)[0]
    assert result["text"].rstrip() == "hello world"  # the hook context is a message of its own
    assert [(c.name, c.result_message_id is not None) for c in t.calls.values()] == [
        ("read_file", True)
    ]
    assert json.loads(t.messages[-1].blocks)[0] == {
        "kind": "thinking",
        "text": "Closing\nThe user is done.",
    }
    # Every model call is billed, the rewound one too.
    b = bills().values()
    assert t.tokens.bills == len(b) == 5
    assert t.tokens.input + t.tokens.cache_read == sum(x["input"] for x in b)
    assert t.tokens.cache_read == sum(x["cached"] for x in b)
    assert t.tokens.output == sum(x["output"] + x["thoughts"] for x in b)
    assert t.tokens.reasoning == sum(x["thoughts"] for x in b)
    assert t.thread["title"] == "Read notes.txt and quote it"
    assert json.loads(t.thread["meta"])["kind"] == "main"


def test_the_project_folder_is_read_from_projects_json(tmp_path, engine, plugins):
    gemini = tmp_path / "home" / ".gemini"
    chats = gemini / "tmp" / "notes-demo" / "chats"
    chats.mkdir(parents=True)
    log = chats / SAMPLE.name
    shutil.copyfile(SAMPLE, log)
    (gemini / "projects.json").write_text(
        json.dumps({"projects": {"/home/user/notes-demo": "notes-demo", "/srv/x": "x"}})
    )
    assert ingest(engine, plugins, [log]).ok
    assert stored_thread(engine, "gemini-cli", SESSION).thread["cwd"] == "/home/user/notes-demo"


def _store(engine) -> dict:
    """What the store holds, without its own row ids."""
    with engine.connect() as conn:
        return {
            "messages": conn.execute(
                text(
                    "SELECT native_id, role, source_type, seq, line, timestamp, model, usage_key, "
                    "blocks FROM messages ORDER BY seq"
                )
            ).all(),
            "calls": conn.execute(
                text("SELECT call_id, name, is_error FROM tool_calls ORDER BY call_id")
            ).all(),
            "usage": conn.execute(
                text(
                    "SELECT key, model, input_tokens, cache_read_tokens, output_tokens, "
                    "reasoning_tokens FROM token_usage ORDER BY key"
                )
            ).all(),
            "thread": conn.execute(text("SELECT native_id, title, meta FROM threads")).all(),
        }


def test_a_log_read_as_it_grows_ends_as_a_fresh_read(tmp_path, engine, plugins):
    """Ingested after every line the CLI appends: the same store as one read of the whole file.
    Replies gaining their tool calls are read on from where the last read stopped; the rewind
    drops messages read before, so that read starts over."""
    lines = SAMPLE.read_bytes().splitlines(keepends=True)
    log = tmp_path / SAMPLE.name
    log.write_bytes(b"")
    statuses = []
    for n, line in enumerate(lines, start=1):
        with open(log, "ab") as fh:
            fh.write(line)
        summary = ingest(engine, plugins, [log])
        assert summary.ok, (n, summary.errors)
        statuses.append(summary.files[0].status)
    rewind = next(i for i, r in enumerate(records()) if "$rewindTo" in r)
    assert statuses[0] == "new"
    assert statuses[rewind] == "rewritten"
    assert set(statuses[1:rewind] + statuses[rewind + 1 :]) == {"grown"}
    fresh = open_db(tmp_path / "fresh.db")
    assert ingest(fresh, plugins, [SAMPLE]).ok
    assert _store(engine) == _store(fresh)


def test_a_line_cut_mid_write_is_read_once_it_is_whole(tmp_path, engine, plugins):
    data = SAMPLE.read_bytes()
    cut = data.index(b'"type":"gemini","content":"The notes say hello."') + 10
    log = tmp_path / SAMPLE.name
    log.write_bytes(data[:cut])
    first = ingest(engine, plugins, [log])
    assert [e.split(": ", 2)[1][:14] for e in first.errors] == ["truncated last"]
    log.write_bytes(data)
    assert ingest(engine, plugins, [log]).files[0].status == "grown"
    fresh = open_db(tmp_path / "fresh.db")
    ingest(fresh, plugins, [SAMPLE])
    assert _store(engine)["messages"] == _store(fresh)["messages"]


def test_a_damaged_line_is_named_and_loses_nothing_else(tmp_path, engine, plugins):
    lines = SAMPLE.read_text().splitlines(keepends=True)
    typed = next(
        i for i, r in enumerate(records()) if r.get("content") == [{"text": "read notes.txt"}]
    )
    lines[typed] = lines[typed][: len(lines[typed]) // 2] + "\n"
    log = tmp_path / SAMPLE.name
    log.write_text("".join(lines))
    summary = ingest(engine, plugins, [log])
    [error] = summary.errors
    assert error.startswith(f"{log}:{typed + 1}: malformed JSON")
    got = stored_thread(engine, "gemini-cli", SESSION).messages
    assert len(got) == 10  # the eleven of the whole file but the damaged prompt
    assert "read notes.txt" not in {m.blocks for m in got}


def test_a_log_of_the_cli_is_told_apart_from_the_other_gemini_layouts(tmp_path, plugins):
    formats = plugins.formats()
    head = SAMPLE.read_bytes()[:65536]
    assert [n for n, f in formats.items() if f.detect(SAMPLE, head)] == ["gemini-jsonl"]
    # The older chat JSON and a stream-json capture are not logs.
    doc = b'{"sessionId": "s", "projectHash": "abc", "startTime": "x", "messages": []}'
    assert not formats["gemini-jsonl"].detect(Path("session-x.json"), doc)
    stream = b'{"type":"init","timestamp":"t","session_id":"s","model":"m"}\n'
    assert not formats["gemini-jsonl"].detect(Path("out.jsonl"), stream)
    # A log whose header is damaged is still one by its other lines.
    assert formats["gemini-jsonl"].detect(SAMPLE, b'{"sessionId": "e2\n' + head.split(b"\n", 1)[1])


@pytest.mark.parametrize("forced", ["gemini-cli", "gemini-stream", "claude-code", "codex"])
def test_another_format_forced_on_a_log_is_refused(tmp_path, engine, plugins, forced):
    summary = ingest(engine, plugins, [SAMPLE], format_name=forced)
    assert summary.errors == [
        f"{SAMPLE}: --format {forced} does not fit this gemini-jsonl transcript; "
        "drop --format, or use --format gemini-jsonl"
    ]


def resumed_log() -> list[dict]:
    """A session resumed once, in the shapes Gemini CLI 0.61.0 writes (seen on the real CLI):
    on resume it rebuilds the list from the model's history with `$set.messages`, where a reply
    holds its thought and call as parts, the call's result comes back in a `<id>_response` user
    turn, the original result turn is kept too, tokens and timestamps are not kept."""
    call = "read_file__read_file_1795749722941_0"
    result = {"functionResponse": {"id": call, "name": "read_file", "response": {"output": "hi\n"}}}
    ctx = {"type": "user", "content": [{"text": "<session_context>\nThis is the Gemini CLI."}]}
    return [
        {"sessionId": "s-resumed", "projectHash": "ab12", "startTime": "2026-11-27T03:22:02.409Z"},
        {"$set": {"messages": [{"id": "ctx", "timestamp": "2026-11-27T03:22:02.409Z", **ctx}]}},
        {
            "id": "u1",
            "timestamp": "2026-11-27T03:22:02.707Z",
            "type": "user",
            "content": [{"text": "read a.txt"}],
        },
        {
            "id": "g1",
            "timestamp": "2026-11-27T03:22:03.351Z",
            "type": "gemini",
            "content": "",
            "thoughts": [
                {"subject": "", "description": "Reading.", "timestamp": "2026-11-27T03:22:03.300Z"}
            ],
            "tokens": {
                "input": 982,
                "output": 44,
                "cached": 512,
                "thoughts": 9,
                "tool": 0,
                "total": 1035,
            },
            "model": "gemini-2.5-flash",
        },
        {
            "id": "g1",
            "timestamp": "2026-11-27T03:22:03.351Z",
            "type": "gemini",
            "content": "",
            "thoughts": [
                {"subject": "", "description": "Reading.", "timestamp": "2026-11-27T03:22:03.300Z"}
            ],
            "tokens": {
                "input": 982,
                "output": 44,
                "cached": 512,
                "thoughts": 9,
                "tool": 0,
                "total": 1035,
            },
            "model": "gemini-2.5-flash",
            "toolCalls": [
                {
                    "id": call,
                    "name": "read_file",
                    "args": {"file_path": "a.txt"},
                    "result": [result],
                    "status": "success",
                    "timestamp": "2026-11-27T03:22:04.300Z",
                }
            ],
        },
        {"id": "r1", "timestamp": "2026-11-27T03:22:04.339Z", "type": "user", "content": [result]},
        {
            "id": "g2",
            "timestamp": "2026-11-27T03:22:05.570Z",
            "type": "gemini",
            "content": "a.txt says hi.",
            "thoughts": [],
            "tokens": {
                "input": 1023,
                "output": 51,
                "cached": 0,
                "thoughts": 11,
                "tool": 0,
                "total": 1085,
            },
            "model": "gemini-2.5-flash",
        },
        {"$set": {"sessionId": "s-resumed"}},
        {
            "$set": {
                "messages": [
                    {"id": "ctx", "timestamp": "2026-11-27T03:22:25.814Z", **ctx},
                    {
                        "id": "u1",
                        "timestamp": "2026-11-27T03:22:25.859Z",
                        "type": "user",
                        "content": [{"text": "read a.txt"}],
                    },
                    {
                        "id": "g1",
                        "timestamp": "2026-11-27T03:22:25.859Z",
                        "type": "gemini",
                        "content": [
                            {"text": "Reading.", "thought": True},
                            {
                                "functionCall": {
                                    "id": call,
                                    "name": "read_file",
                                    "args": {"file_path": "a.txt"},
                                }
                            },
                        ],
                    },
                    {
                        "id": "g1_response",
                        "timestamp": "2026-11-27T03:22:25.859Z",
                        "type": "user",
                        "content": [result],
                    },
                    {
                        "id": "r1",
                        "timestamp": "2026-11-27T03:22:25.859Z",
                        "type": "user",
                        "content": [result],
                    },
                    {
                        "id": "g2",
                        "timestamp": "2026-11-27T03:22:25.859Z",
                        "type": "gemini",
                        "content": [{"text": "a.txt says hi."}],
                    },
                ]
            }
        },
        {
            "id": "u2",
            "timestamp": "2026-11-27T03:22:26.097Z",
            "type": "user",
            "content": [{"text": "thanks"}],
        },
        {
            "id": "g3",
            "timestamp": "2026-11-27T03:22:27.577Z",
            "type": "gemini",
            "content": "You're welcome.",
            "thoughts": [],
            "tokens": {
                "input": 1105,
                "output": 65,
                "cached": 512,
                "thoughts": 15,
                "tool": 0,
                "total": 1185,
            },
            "model": "gemini-2.5-flash",
        },
    ]


def test_a_resumed_session_reads_its_calls_from_the_rebuilt_list(tmp_path, engine, plugins):
    lines = [json.dumps(r, separators=(",", ":")).encode() + b"\n" for r in resumed_log()]
    log = tmp_path / "session-2026-11-27T03-22-s-resume.jsonl"
    log.write_bytes(b"")
    statuses = []
    for line in lines:  # read as the CLI writes it
        with open(log, "ab") as fh:
            fh.write(line)
        summary = ingest(engine, plugins, [log])
        assert summary.ok, summary.errors
        statuses.append(summary.files[0].status)
    assert statuses[8] == "rewritten"  # the rebuilt list changed what was read
    t = stored_thread(engine, "gemini-cli", "s-resumed")
    call = "read_file__read_file_1795749722941_0"
    assert [(m.role, m.source_type, m.native_id) for m in t.messages] == [
        ("user", "meta", "ctx"),
        ("user", "user", "u1"),
        ("assistant", "agent", "g1"),
        ("assistant", "agent", call),
        ("tool", "tool-result", f"{call}:result"),  # once, though the CLI keeps it twice
        ("assistant", "agent", "g2"),
        ("user", "user", "u2"),
        ("assistant", "agent", "g3"),
    ]
    assert json.loads(t.messages[2].blocks) == [{"kind": "thinking", "text": "Reading."}]
    assert [(c.name, c.result_message_id is not None) for c in t.calls.values()] == [
        ("read_file", True)
    ]
    # The bills of the replies' first copies stay: the rebuilt list has no tokens.
    bills = [r["tokens"] for r in resumed_log() if r.get("tokens")]
    assert t.tokens.bills == 3
    assert t.tokens.input + t.tokens.cache_read == sum(b["input"] for b in bills[1:])
    assert t.tokens.output == sum(b["output"] + b["thoughts"] for b in bills[1:])
    fresh = open_db(tmp_path / "fresh.db")
    assert ingest(fresh, plugins, [log]).ok
    assert _store(engine) == _store(fresh)
