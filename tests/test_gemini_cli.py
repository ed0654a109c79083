"""Gemini CLI chat files and `gemini --output-format stream-json` output, checked against the corpus.

The expected numbers are computed here, straight from the raw JSON, by small counting functions
that share no code with the parser.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from helpers.store import StoredThread, stored_thread
from sqlalchemy import text

from auditor.ingest.ingester import ingest

CHAT = "gemini-cli/metaphi-figma-eval-010ac575/chats/session-2026-01-30T06-08-7befeae5.json"
# Two runs each (the second appended by the harness, without a result); the first ends with a
# delta-streamed summary, the second file's first run with an HTTP 400 error result.
STREAM_A = "gemini-cli/metaphi-figma-eval-010ac575/transcript.stream.jsonl"
STREAM_B = "gemini-cli/metaphi-figma-eval-49bdd49a/transcript.stream.jsonl"
EDIT_NAMES = {"write_file", "replace", "create_or_update_file", "push_files"}


# -- independent counting from the raw JSON -----------------------------------------------------


def shell_redirect_target(args: dict) -> str | None:
    """The file a `run_shell_command` writes with `> FILE` (not a descriptor, not /dev)."""
    m = re.search(r"(?<![0-9&>])>>?\s*([^\s&|;>]+)", args.get("command") or "")
    return m.group(1) if m and not m.group(1).startswith("/dev/") else None


def is_edit(name: str, args: dict) -> bool:
    return name in EDIT_NAMES or (name == "run_shell_command" and bool(shell_redirect_target(args)))


def raw_edit_paths(name: str, args: dict) -> list[str] | None:
    if name == "run_shell_command":
        return [shell_redirect_target(args)]
    if name in ("write_file", "replace"):
        return [args["file_path"]]
    if name == "create_or_update_file":
        return [args["path"]]
    files = args["files"]
    return list(
        dict.fromkeys(f["path"] for f in (json.loads(files) if isinstance(files, str) else files))
    )


def raw_chat(path: Path) -> dict:
    doc = json.loads(path.read_text())
    gemini = [m for m in doc["messages"] if m["type"] == "gemini"]
    calls = [c for m in gemini for c in m.get("toolCalls") or []]
    tokens = [m["tokens"] for m in gemini if m.get("tokens")]
    return {
        "session": doc["sessionId"],
        # every message, plus one result message per call (all calls here have a result)
        "messages": len(doc["messages"]) + sum(1 for c in calls if c["result"]),
        "calls": {c["id"]: c for c in calls},
        "errors": {c["id"] for c in calls if c["status"] == "error"},
        "edits": {
            c["id"]: raw_edit_paths(c["name"], c["args"])
            for c in calls
            if is_edit(c["name"], c["args"])
        },
        "thoughts": sum(len(m.get("thoughts") or []) for m in gemini),
        "typed": sum(1 for m in doc["messages"] if m["type"] == "user"),
        "input": sum(t["input"] - t["cached"] + t["tool"] for t in tokens),
        "cached": sum(t["cached"] for t in tokens),
        "output": sum(t["output"] + t["thoughts"] for t in tokens),
        "reasoning": sum(t["thoughts"] for t in tokens),
        "bills": len(tokens),
        "total": sum(t["total"] for t in tokens),
    }


def raw_stream(path: Path) -> dict[str, dict]:
    """Per session id: what a stream-json file should produce.

    A user message without `timestamp` is the harness's, and belongs to the next init's run.
    Consecutive assistant `delta` chunks are one message.
    """
    events = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    threads: dict[str, dict] = {}
    current = None
    waiting_harness = 0
    in_delta = False

    def new(sid):
        return threads.setdefault(
            sid,
            {
                "messages": 0,
                "harness": 0,
                "typed": 0,
                "texts": [],
                "calls": set(),
                "results": set(),
                "errors": set(),
                "edits": {},
                "result_errors": 0,
                "input": 0,
                "cached": 0,
                "output": 0,
                "reasoning": 0,
                "bills": 0,
                "stats_tool_calls": 0,
            },
        )

    for e in events:
        t = e["type"]
        is_delta = t == "message" and e["role"] == "assistant" and e.get("delta")
        if is_delta:
            if in_delta:
                current["texts"][-1] += e["content"]
            else:
                current["messages"] += 1
                current["texts"].append(e["content"])
            in_delta = True
            continue
        in_delta = False
        if t == "message" and "timestamp" not in e:
            waiting_harness += 1
        elif t == "init":
            current = new(e["session_id"])
            current["messages"] += waiting_harness
            current["harness"] += waiting_harness
            waiting_harness = 0
        elif t == "message" and e["role"] == "user":
            current["messages"] += 1
            current["typed"] += 1
        elif t == "tool_use":
            current["messages"] += 1
            current["calls"].add(e["tool_id"])
            if is_edit(e["tool_name"], e["parameters"]):
                current["edits"][e["tool_id"]] = raw_edit_paths(e["tool_name"], e["parameters"])
        elif t == "tool_result":
            current["messages"] += 1
            current["results"].add(e["tool_id"])
            if e["status"] == "error":
                current["errors"].add(e["tool_id"])
        elif t == "result":
            s = e["stats"]
            current["bills"] += 1
            current["input"] += s["input_tokens"] - s["cached"]
            current["cached"] += s["cached"]
            current["output"] += s["total_tokens"] - s["input_tokens"]
            current["reasoning"] += s["total_tokens"] - s["input_tokens"] - s["output_tokens"]
            current["stats_tool_calls"] += s["tool_calls"]
            if e["status"] == "error":
                current["messages"] += 1
                current["result_errors"] += 1
    return threads


# -- reading the store --------------------------------------------------------------------------


def stored(engine, native_id: str) -> StoredThread:
    return stored_thread(engine, "gemini-cli", native_id)


def snapshot(engine) -> dict:
    """Every Gemini thread as stored, for comparing two ingests."""
    with engine.connect() as conn:
        natives = (
            conn.execute(
                text("SELECT native_id FROM threads WHERE agent = 'gemini-cli' ORDER BY native_id")
            )
            .scalars()
            .all()
        )
    out = {}
    for native in natives:
        s = stored(engine, native)
        out[native] = {
            "messages": [tuple(m) for m in s.messages],
            "calls": {
                k: (v.name, v.is_error, v.is_file_edit, v.edited_paths, v.result_message_id)
                for k, v in s.calls.items()
            },
            "tokens": s.tokens,
            "counts": (
                s.thread["message_count"],
                s.thread["tool_call_count"],
                s.thread["file_edit_count"],
            ),
        }
    return out


def errors(engine) -> list[tuple]:
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(text("SELECT path, line, error FROM ingest_errors"))]


def _write(path: Path, data: bytes) -> None:
    path.write_bytes(data)
    st = path.stat()  # a grown file normally has a new mtime; make sure of it on coarse clocks
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


# -- the whole corpus ---------------------------------------------------------------------------


@pytest.mark.corpus
def test_every_gemini_file_ingests_without_problems(corpus, engine, plugins):
    summary = ingest(engine, plugins, [corpus / "gemini-cli"])
    assert summary.files_seen == 3
    assert summary.failed == 0, summary.errors
    assert errors(engine) == []
    formats = {Path(f.path).name: f.format for f in summary.files}
    assert formats[Path(CHAT).name] == "gemini-cli"
    assert {f.format for f in summary.files if f.path.endswith(".stream.jsonl")} == {
        "gemini-stream"
    }
    # one chat session, and two runs (two session ids) in each stream file
    assert summary.threads == 5


@pytest.mark.corpus
def test_chat_matches_raw_counts(corpus, engine, plugins):
    path = corpus / CHAT
    expected = raw_chat(path)
    summary = ingest(engine, plugins, [path])
    assert summary.failed == 0, summary.errors
    got = stored(engine, expected["session"])
    th = got.thread
    assert th["message_count"] == expected["messages"] == 94
    assert set(got.calls) == set(expected["calls"]) and th["tool_call_count"] == 62
    # every call is paired with its result, which lives inside the call in the file
    assert all(c.result_message_id == f"{k}:result" for k, c in got.calls.items())
    assert {k for k, c in got.calls.items() if c.is_error} == expected["errors"]
    assert {k: c.name for k, c in got.calls.items()} == {
        k: c["name"] for k, c in expected["calls"].items()
    }
    edits = {k: c.edited_paths for k, c in got.calls.items() if c.is_file_edit}
    assert edits == expected["edits"]
    assert th["file_edit_count"] == len(expected["edits"]) == 18  # 17 tools, 1 shell redirect
    assert len(edits["push_files-1769753839062-94ce87bea79f7"]) == 17  # remote repository paths
    assert edits["push_files-1769753839062-94ce87bea79f7"][0] == "package.json"

    inp, cached, out, reasoning, _, bills = got.tokens
    assert (inp, cached, out, reasoning, bills) == (
        expected["input"],
        expected["cached"],
        expected["output"],
        expected["reasoning"],
        expected["bills"],
    )
    assert inp + cached + out == expected["total"]  # nothing lost, nothing counted twice
    assert th["models"] == "gemini-3-pro-preview"

    by_role: dict[str, list] = {}
    for m in got.messages:
        by_role.setdefault(m.role, []).append(m)
    assert [m.source_type for m in by_role["user"]] == ["user"] * expected["typed"]
    assert {m.source_type for m in by_role["tool"]} == {"tool-result"}
    assert {m.source_type for m in by_role["assistant"]} == {"agent"}
    blocks = [b for m in by_role["assistant"] for b in json.loads(m.blocks)]
    thinking = [b for b in blocks if b["kind"] == "thinking"]
    assert len(thinking) == expected["thoughts"]
    assert thinking[0]["text"].startswith("Contemplating Project Setup\n")
    assert all(m.usage_key == f"msg:{m.native_id}" for m in by_role["assistant"])
    # results follow their call
    seqs = {m.native_id: m.seq for m in got.messages}
    assert all(seqs[c.result_message_id] > seqs[c.call_message_id] for c in got.calls.values())
    error_result = next(
        json.loads(m.blocks)[0]
        for m in by_role["tool"]
        if m.native_id.startswith("activate_skill-")
    )
    assert error_result["is_error"] and error_result["text"].startswith(
        'Skill "figma-to-code" not found'
    )


@pytest.mark.corpus
@pytest.mark.parametrize("rel", [STREAM_A, STREAM_B], ids=["010ac575", "49bdd49a"])
def test_stream_matches_raw_counts(corpus, engine, plugins, rel):
    path = corpus / rel
    expected = raw_stream(path)
    assert len(expected) == 2  # the harness appended a second run
    summary = ingest(engine, plugins, [path])
    assert summary.failed == 0, summary.errors
    for session, exp in expected.items():
        got = stored(engine, session)
        th = got.thread
        assert th["message_count"] == exp["messages"], session
        assert set(got.calls) == exp["calls"]
        assert th["tool_call_count"] == len(exp["calls"])
        assert {k for k, c in got.calls.items() if c.result_message_id} == exp["results"]
        assert {k for k, c in got.calls.items() if c.is_error} == exp["errors"]
        assert {k: c.edited_paths for k, c in got.calls.items() if c.is_file_edit} == exp["edits"]
        assert th["file_edit_count"] == len(exp["edits"])
        inp, cached, out, reasoning, _, bills = got.tokens
        assert (inp, cached, out, reasoning, bills) == (
            exp["input"],
            exp["cached"],
            exp["output"],
            exp["reasoning"],
            exp["bills"],
        )
        if exp["bills"]:
            assert exp["stats_tool_calls"] == len(exp["calls"])  # the CLI's own count agrees
        texts = [
            json.loads(m.blocks)[0]["text"]
            for m in got.messages
            if m.role == "assistant" and m.native_id.startswith("L")
        ]
        assert texts == exp["texts"]  # delta chunks concatenated, one message per streamed reply
        sources = [m.source_type for m in got.messages if m.role == "user"]
        assert sources == ["meta"] * exp["harness"] + ["user"] * exp["typed"]
        errs = [m for m in got.messages if m.role == "system"]
        assert len(errs) == exp["result_errors"]
        assert all(m.source_type == "error" and "INVALID_ARGUMENT" in m.blocks for m in errs)
    # one call of each file never got its result: the run ended
    unpaired = [k for s in expected.values() for k in s["calls"] - s["results"]]
    assert len(unpaired) == 1


@pytest.mark.corpus
def test_stream_summary_text_and_timestamps(corpus, engine, plugins):
    ingest(engine, plugins, [corpus / STREAM_A])
    got = stored(engine, "6727b31e-11a1-4351-b526-77ba7b90da09")
    (reply,) = [m for m in got.messages if m.role == "assistant" and m.native_id.startswith("L")]
    body = json.loads(reply.blocks)[0]["text"]
    assert body.startswith("I have converted the Figma design")
    assert (
        "figma-eval-010ac575-1280-41fe-be26-130311bef5ed-gemini_cli" in body
    )  # split across chunks
    assert body.endswith("pushed to the remote repository.")
    assert reply.model == "gemini-3-pro-preview"
    assert all(m.timestamp is not None for m in got.messages)
    harness = got.messages[0]
    assert harness.source_type == "meta" and harness.seq == 1 and harness.native_id == "L1"


# -- incremental reads --------------------------------------------------------------------------


def _delta_lines(path: Path) -> list[int]:
    return [
        i + 1
        for i, raw in enumerate(path.read_text().splitlines())
        if raw.strip() and json.loads(raw).get("delta")
    ]


@pytest.mark.corpus
@pytest.mark.parametrize("cut", ["half", "mid-delta", "after-harness"])
def test_grown_stream_ends_like_a_one_shot_ingest(corpus, engine, plugins, tmp_path, cut):
    source = corpus / STREAM_A
    raw = source.read_bytes().splitlines(keepends=True)
    deltas = _delta_lines(source)
    n = {
        "half": len(raw) // 2,
        "mid-delta": deltas[3],  # four of the seven chunks of the final reply
        "after-harness": 92,  # line 92 is the harness's message announcing the second run
    }[cut]
    growing = tmp_path / "grow" / source.name
    growing.parent.mkdir()
    _write(growing, b"".join(raw[:n]))
    first = ingest(engine, plugins, [growing])
    assert first.new == 1 and first.failed == 0, first.errors
    if cut == "mid-delta":  # the reply still streaming is not stored half-written
        got = stored(engine, "6727b31e-11a1-4351-b526-77ba7b90da09")
        assert f"L{deltas[0]}" not in {m.native_id for m in got.messages}
    if cut == "after-harness":  # its run has not started: it waits for its init
        with engine.connect() as conn:
            assert (
                conn.execute(
                    text("SELECT COUNT(*) FROM messages WHERE native_id = 'L92'")
                ).scalar_one()
                == 0
            )
    _write(growing, b"".join(raw))
    second = ingest(engine, plugins, [growing])
    assert second.grown == 1 and second.failed == 0, second.errors

    from auditor.store.db import open_db

    reference = open_db(tmp_path / "one-shot.db")
    ingest(reference, plugins, [source])
    assert snapshot(engine) == snapshot(reference)
    assert len(snapshot(engine)) == 2


@pytest.mark.corpus
def test_truncated_last_line_is_reported_and_read_once_complete(corpus, engine, plugins, tmp_path):
    source = corpus / STREAM_B
    data = source.read_bytes()
    lines = data.splitlines(keepends=True)
    cut = sum(len(x) for x in lines[:40]) + len(lines[40]) // 2  # half of line 41
    growing = tmp_path / source.name
    _write(growing, data[:cut])
    first = ingest(engine, plugins, [growing])
    assert first.failed == 1
    assert any(e.startswith(f"{growing}:41: truncated last line") for e in first.errors), (
        first.errors
    )
    assert (str(growing), 41) in {(p, ln) for p, ln, _ in errors(engine)}
    _write(growing, data)
    second = ingest(engine, plugins, [growing])
    assert second.grown == 1 and second.failed == 0, second.errors

    from auditor.store.db import open_db

    reference = open_db(tmp_path / "one-shot.db")
    ingest(reference, plugins, [source])
    assert snapshot(engine) == snapshot(reference)


@pytest.mark.corpus
def test_rewritten_chat_file_changes_nothing(corpus, engine, plugins, tmp_path):
    copy = tmp_path / Path(CHAT).name
    copy.write_bytes((corpus / CHAT).read_bytes())
    ingest(engine, plugins, [copy])
    before = snapshot(engine)
    assert ingest(engine, plugins, [copy]).skipped == 1
    os.utime(copy, ns=(copy.stat().st_atime_ns, copy.stat().st_mtime_ns + 5_000_000_000))
    again = ingest(engine, plugins, [copy])
    assert again.rewritten == 1 and again.failed == 0
    assert snapshot(engine) == before


@pytest.mark.corpus
def test_malformed_chat_document_is_a_problem_with_its_line(corpus, engine, plugins, tmp_path):
    broken = tmp_path / Path(CHAT).name
    data = (corpus / CHAT).read_bytes()
    broken.write_bytes(data[: len(data) // 2])  # a file cut while being rewritten
    summary = ingest(engine, plugins, [broken])
    assert summary.failed == 1 and summary.files[0].format == "gemini-cli"
    ((path, line, message),) = errors(engine)
    assert path == str(broken) and line and "malformed JSON document" in message


# -- detection ----------------------------------------------------------------------------------


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in (".json", ".jsonl"))


@pytest.mark.corpus
def test_detection_keeps_formats_apart(corpus, plugins):
    formats = plugins.formats()
    ours = {n: f for n, f in formats.items() if n.startswith("gemini-")}
    others = {n: f for n, f in formats.items() if n not in ours}
    assert set(ours) == {"gemini-cli", "gemini-jsonl", "gemini-stream"}
    foreign = [p for d in ("claude-code", "codex", "amp") for p in _files(corpus / d)]
    assert len(foreign) > 50
    for path in foreign:
        head = path.read_bytes()[:65536]
        assert not [n for n, f in ours.items() if f.detect(path, head)], path
    for rel, name in (
        (CHAT, "gemini-cli"),
        (STREAM_A, "gemini-stream"),
        (STREAM_B, "gemini-stream"),
    ):
        path = corpus / rel
        head = path.read_bytes()[:65536]
        assert [n for n, f in formats.items() if f.detect(path, head)] == [name], rel
        assert not [n for n, f in others.items() if f.detect(path, head)]


def test_detection_edge_cases(tmp_path):
    from auditor_plugins.gemini_chat import GeminiChatFormat
    from auditor_plugins.gemini_stream import GeminiStreamFormat

    chat, stream = GeminiChatFormat(), GeminiStreamFormat()

    def lines(*objs) -> bytes:
        return b"".join(json.dumps(o).encode() + b"\n" for o in objs)

    init = {"type": "init", "timestamp": "2026-01-01T00:00:00Z", "session_id": "s1", "model": "m"}
    plain = lines(
        init,
        {"type": "message", "timestamp": "2026-01-01T00:00:01Z", "role": "user", "content": "hi"},
    )
    assert stream.detect(Path("out.jsonl"), plain) and stream.detect(Path("out.json"), plain)
    assert not chat.detect(Path("out.json"), plain)
    # An OpenAI Responses-style log: type "message" but nothing only Gemini writes.
    responses = lines(
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "yo"}],
        },
    )
    assert not stream.detect(Path("log.jsonl"), responses)
    # Claude Code's own stream-json.
    claude = lines({"type": "system", "subtype": "init", "session_id": "x", "tools": []})
    assert not stream.detect(Path("claude.jsonl"), claude)
    # A first line longer than the 64 KiB head.
    big = b'{"type": "init", "session_id": "s", "model": "' + b"m" * 70000
    assert stream.detect(Path("big.jsonl"), big[:65536])
    # Gemini's logs.json (a list) and checkpoints are not chats.
    assert not chat.detect(
        Path("logs.json"), b'[{"sessionId": "s", "messageId": 0, "type": "user"}]'
    )
    doc = b'{"sessionId": "s", "projectHash": "abc", "startTime": "x", "messages": []}'
    assert chat.detect(Path("session-x.json"), doc) and not chat.detect(
        Path("session-x.jsonl"), doc
    )
    assert not stream.detect(Path("session-x.json"), doc)


# -- shapes the corpus does not have ------------------------------------------------------------


def test_chat_other_message_types_and_call_states(tmp_path, engine, plugins):
    doc = {
        "sessionId": "chat-1",
        "projectHash": "f" * 64,
        "startTime": "2026-01-01T00:00:00.000Z",
        "lastUpdated": "2026-01-01T00:05:00.000Z",
        "messages": [
            {
                "id": "u1",
                "timestamp": "2026-01-01T00:00:00.000Z",
                "type": "user",
                "content": [{"text": "fix it"}],
            },
            {
                "id": "i1",
                "timestamp": "2026-01-01T00:00:01.000Z",
                "type": "info",
                "content": "Switched model",
            },
            {
                "id": "g1",
                "timestamp": "2026-01-01T00:00:02.000Z",
                "type": "gemini",
                "content": "",
                "model": "gemini-2.5-pro",
                "thoughts": [{"subject": "Plan", "description": "edit a.py", "timestamp": "x"}],
                "tokens": {
                    "input": 100,
                    "output": 10,
                    "cached": 40,
                    "thoughts": 5,
                    "tool": 2,
                    "total": 117,
                },
                "toolCalls": [
                    {
                        "id": "replace-1",
                        "name": "replace",
                        "status": "cancelled",
                        "args": {"file_path": "/p/a.py", "old_string": "x", "new_string": "y"},
                        "result": [
                            {
                                "functionResponse": {
                                    "id": "replace-1",
                                    "name": "replace",
                                    "response": {"error": "[Operation Cancelled]"},
                                }
                            }
                        ],
                    },
                    {
                        "id": "mcp-1",
                        "name": "github__create_or_update_file",
                        "status": "success",
                        "args": {"path": "README.md", "content": "x"},
                        "result": [
                            {
                                "functionResponse": {
                                    "id": "mcp-1",
                                    "name": "x",
                                    "response": {"output": {"sha": "1"}},
                                }
                            }
                        ],
                    },
                    {
                        "id": "shell-1",
                        "name": "run_shell_command",
                        "status": "executing",
                        "args": {"command": "sleep 100"},
                    },
                ],
            },
            {
                "id": "e1",
                "timestamp": "2026-01-01T00:00:03.000Z",
                "type": "error",
                "content": "Quota exceeded",
            },
        ],
    }
    path = tmp_path / "session-2026-01-01T00-00-chat1.json"
    path.write_text(json.dumps(doc))
    summary = ingest(engine, plugins, [path])
    assert summary.failed == 0 and summary.files[0].format == "gemini-cli", summary.errors
    got = stored(engine, "chat-1")
    roles = [(m.native_id, m.role, m.source_type) for m in got.messages]
    assert roles == [
        ("u1", "user", "user"),
        ("i1", "system", "meta"),
        ("g1", "assistant", "agent"),
        ("replace-1:result", "tool", "tool-result"),
        ("mcp-1:result", "tool", "tool-result"),
        ("e1", "system", "error"),
    ]
    calls = got.calls
    assert calls["replace-1"].is_error and calls["replace-1"].edited_paths == ["/p/a.py"]
    assert calls["mcp-1"].is_file_edit and calls["mcp-1"].edited_paths == ["README.md"]
    assert not calls["mcp-1"].is_error
    assert calls["shell-1"].result_message_id is None  # still running when saved
    assert got.tokens == (62, 40, 15, 5, 0, 1)
    assert json.loads(got.thread["meta"])["projectHash"] == "f" * 64


def test_stream_resumed_session_error_events_and_quiet_replies(tmp_path, engine, plugins):
    def run(n: int, reply: str) -> list[dict]:
        t = f"2026-01-0{n}T00:00:00.000Z"
        return [
            {"type": "init", "timestamp": t, "session_id": "same", "model": "gemini-2.5-flash"},
            {"type": "message", "timestamp": t, "role": "user", "content": f"prompt {n}"},
            {
                "type": "tool_use",
                "timestamp": t,
                "tool_name": "write_file",
                "tool_id": f"w{n}",
                "parameters": {"file_path": f"f{n}.txt", "content": "x"},
            },
            {
                "type": "tool_result",
                "timestamp": t,
                "tool_id": f"w{n}",
                "status": "error",
                "error": {"type": "permission_denied", "message": "denied by policy"},
            },
            {"type": "error", "timestamp": t, "severity": "warning", "message": "loop detected"},
            {"type": "message", "timestamp": t, "role": "assistant", "content": reply},
            {
                "type": "result",
                "timestamp": t,
                "status": "success",
                "stats": {
                    "total_tokens": 130,
                    "input_tokens": 100,
                    "output_tokens": 20,
                    "cached": 30,
                    "input": 70,
                    "duration_ms": 5,
                    "tool_calls": 1,
                },
            },
        ]

    log = tmp_path / "out.jsonl"
    log.write_text("".join(json.dumps(e) + "\n" for e in run(1, "first")))
    assert ingest(engine, plugins, [log]).files[0].format == "gemini-stream"
    with log.open("a") as fh:  # `gemini --resume ... -o stream-json >> out.jsonl`
        fh.write("".join(json.dumps(e) + "\n" for e in run(2, "second")))
    assert ingest(engine, plugins, [log]).grown == 1
    got = stored(engine, "same")  # one thread: the id repeated
    texts = [
        json.loads(m.blocks)[0]["text"]
        for m in got.messages
        if m.role == "assistant" and m.native_id.startswith("L")
    ]
    assert texts == ["first", "second"]
    assert got.calls["w1"].is_error and got.calls["w2"].edited_paths == ["f2.txt"]
    result = next(json.loads(m.blocks)[0] for m in got.messages if m.native_id == "w1:result")
    assert result["text"] == "denied by policy"
    warnings = [m for m in got.messages if m.role == "system"]
    assert [w.source_type for w in warnings] == ["meta", "meta"]
    assert got.tokens == (140, 60, 60, 20, 0, 2)  # one bill per run


def test_registered(plugins):
    formats = plugins.formats()
    assert formats["gemini-cli"].agent == "gemini-cli" and not formats["gemini-cli"].appendable
    assert formats["gemini-stream"].agent == "gemini-cli" and formats["gemini-stream"].appendable
