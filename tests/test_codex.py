"""Codex CLI rollouts and `codex exec --json` output, checked against the real corpus.

The expected numbers are computed here, straight from the raw JSON lines, by small counting
functions that share no code with the parser.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
from helpers.store import StoredThread, stored_thread
from sqlalchemy import text

from auditor.ingest.ingester import ingest
from auditor.model import Cursor, Message, Problem, Usage

pytestmark = pytest.mark.corpus

ROLLOUT_0_40 = "codex/jnarowski-agentcmd/sessions/rollout-2025-09-24T19-22-20-01997e76-d124-7592-9cac-2ec05abbca08.jsonl"
ROLLOUT_0_40_RESUMED = "codex/jnarowski-agentcmd/sessions/rollout-2025-09-25T08-02-05-0199812e-64f0-7f73-91fc-095dda01c36e.jsonl"
ROLLOUT_0_55 = "codex/Kooksun-Lotto645/sessions/2025/11/07/rollout-2025-11-07T09-19-52-019a5baf-15f8-7f52-84b2-7f5e68d5e8cd.jsonl"
ROLLOUT_0_66 = "codex/aneesh199608-dslint/sessions/2025/12/09/rollout-2025-12-09T14-27-29-019b0254-78dd-7ea3-9224-5ae646e225ea.jsonl"
# 0.77, 2,273 lines: review mode, resumed processes (token counter restarts), AGENTS.md.
ROLLOUT_0_77 = "codex/0h-n0-local-voice-assistant-codex/sessions/2025/12/25/rollout-2025-12-25T22-45-23-019b55c1-d022-7061-bbb9-b0c90708472b.jsonl"
ROLLOUT_SHORT = "codex/0h-n0-local-voice-assistant-codex/sessions/2025/12/26/rollout-2025-12-26T01-48-36-019b5669-8da8-7bc3-bed8-e1c1b805dad5.jsonl"
CHECKED = [
    ROLLOUT_0_40,
    ROLLOUT_0_40_RESUMED,
    ROLLOUT_0_55,
    ROLLOUT_0_66,
    ROLLOUT_0_77,
    ROLLOUT_SHORT,
]


# -- independent counting from the raw lines --------------------------------------------------


def raw_rollout(path: Path) -> dict:
    """Count what a rollout should produce, reading the raw lines directly.

    Tokens: Codex reports a cumulative counter that restarts at zero when the CLI restarts. The
    tokens billed are the sum, over every run of the counter, of its last value. A /review
    sub-agent's counter shows up in the parent's file too, but it belongs to the review session
    (its own rollout file, source {"subagent": "review"}), so it is left out here.
    """
    lines = [json.loads(raw) for raw in path.read_text().splitlines() if raw.strip()]
    messages = 0
    calls: set[str] = set()
    results: set[str] = set()
    patch_calls: dict[str, list[str]] = {}
    heredoc_writes: dict[str, str] = {}
    session_id = None
    last_user_text = None
    finals: list[dict] = []  # the last value of every run of a counter
    current: int | None = None  # index in `finals` of the counter being reported
    in_review = False
    for rec in lines:
        p = rec["payload"]
        kind, ptype = rec["type"], p.get("type")
        if kind == "session_meta" and session_id is None:
            session_id = p["id"]
        elif kind == "response_item" and ptype == "message":
            messages += 1
            if p["role"] == "user":
                last_user_text = "".join(c.get("text", "") for c in p["content"])
        elif kind == "response_item" and ptype == "reasoning":
            if any(s.get("text") for s in p.get("summary") or []):
                messages += 1
        elif kind == "response_item" and ptype in ("function_call", "custom_tool_call"):
            messages += 1
            calls.add(p["call_id"])
            if ptype == "function_call":
                command = json.loads(p["arguments"]).get("command")
                script = command[-1] if isinstance(command, list) else command or ""
                m = re.match(r"cat <<'EOF' > (\S+)\n", script)
                if m:
                    heredoc_writes[p["call_id"]] = m.group(1)
            else:
                script = p["input"]
            if "*** Begin Patch" in script:
                patch_calls[p["call_id"]] = re.findall(
                    r"^\*\*\* (?:Add|Update|Delete) File: (.+)$", script, re.MULTILINE
                )
        elif kind == "response_item" and ptype in (
            "function_call_output",
            "custom_tool_call_output",
        ):
            messages += 1
            results.add(p["call_id"])
        elif kind == "event_msg" and ptype == "turn_aborted":
            messages += 1
        elif kind == "event_msg" and ptype == "user_message":
            if p["message"] != last_user_text:  # /review prompts exist only as events
                messages += 1
                last_user_text = p["message"]
        elif kind == "event_msg" and ptype in ("entered_review_mode", "exited_review_mode"):
            in_review = ptype == "entered_review_mode"
        elif kind == "event_msg" and ptype == "token_count" and p.get("info") and not in_review:
            total = p["info"]["total_token_usage"]
            if current is not None and total["total_tokens"] < finals[current]["total_tokens"]:
                current = None  # the counter restarted
            if current is None:
                finals.append(total)
                current = len(finals) - 1
            else:
                finals[current] = total
    return {
        "session_id": session_id,
        "messages": messages,
        "calls": calls,
        "results": results,
        "patch_calls": patch_calls,
        "heredoc_writes": heredoc_writes,
        "input": sum(f["input_tokens"] - f["cached_input_tokens"] for f in finals),
        "cached": sum(f["cached_input_tokens"] for f in finals),
        "output": sum(f["output_tokens"] for f in finals),
        "reasoning": sum(f["reasoning_output_tokens"] for f in finals),
        "final_total": finals[-1] if finals else None,
        "runs": len(finals),
    }


# -- reading the store --------------------------------------------------------------------------


def stored(engine, native_id: str) -> StoredThread:
    return stored_thread(engine, "codex", native_id)


def snapshot(engine, native_id: str) -> dict:
    """What a thread looks like in the store, for comparing two ingests."""
    s = stored(engine, native_id)
    return {
        "messages": [(m.native_id, m.role, m.source_type, m.seq, m.blocks) for m in s.messages],
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


def errors(engine) -> list[tuple]:
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(text("SELECT path, line, error FROM ingest_errors"))]


# -- the whole corpus ---------------------------------------------------------------------------


def test_every_codex_file_ingests_without_problems(corpus, engine, plugins):
    summary = ingest(engine, plugins, [corpus / "codex"])
    assert summary.files_seen == 12
    assert summary.failed == 0, summary.errors
    assert errors(engine) == []
    formats = {Path(f.path).parent.name: f.format for f in summary.files}
    assert formats["exec-json"] == "codex-exec"
    assert {f.format for f in summary.files if "rollout-" in f.path} == {"codex"}
    assert summary.threads == 12


@pytest.mark.parametrize("rel", CHECKED, ids=lambda r: Path(r).stem[8:27])
def test_rollout_matches_raw_counts(corpus, engine, plugins, rel):
    path = corpus / rel
    expected = raw_rollout(path)
    summary = ingest(engine, plugins, [path])
    assert summary.failed == 0, summary.errors

    got = stored(engine, expected["session_id"])
    assert got.thread["message_count"] == expected["messages"]
    assert set(got.calls) == expected["calls"]
    assert got.thread["tool_call_count"] == len(expected["calls"])
    # Every output is paired with its call (one call in 0.77 was aborted before its output).
    assert {k for k, v in got.calls.items() if v.result_message_id} == expected["results"]

    # apply_patch, as its own tool or inside a shell call: an edit, with the patch's paths.
    for call_id, paths in expected["patch_calls"].items():
        call = got.calls[call_id]
        assert call.is_file_edit, call_id
        assert call.edited_paths == list(dict.fromkeys(paths))
    # `cat <<'EOF' > file` heredocs write that file.
    for call_id, target in expected["heredoc_writes"].items():
        assert got.calls[call_id].is_file_edit
        assert got.calls[call_id].edited_paths == [target]

    # Tokens: each call billed once, in our convention (input excludes cached).
    inp, cached, out, reasoning = got.tokens[:4]
    assert (inp, cached, out, reasoning) == (
        expected["input"],
        expected["cached"],
        expected["output"],
        expected["reasoning"],
    )
    if expected["runs"] == 1:  # one uninterrupted counter: the sum is the final cumulative total
        final = expected["final_total"]
        assert inp + cached == final["input_tokens"]
        assert out == final["output_tokens"]


def test_rollout_thread_metadata_guidance_and_sources(corpus, engine, plugins):
    ingest(engine, plugins, [corpus / ROLLOUT_0_77])
    got = stored(engine, "019b55c1-d022-7061-bbb9-b0c90708472b")
    th = got.thread
    assert th["cwd"] == "/home/relu/misc/local-voice-assistant-codex"
    assert th["version"] == "0.77.0"
    assert th["git_branch"] == "master"
    assert th["models"] == "gpt-5.2-codex"
    guidance = json.loads(th["guidance"])
    assert guidance["AGENTS.md"].startswith("## Skills")  # the text inside <INSTRUCTIONS>
    assert "<INSTRUCTIONS>" not in guidance["AGENTS.md"]

    by_source: dict[str, list] = {}
    for m in got.messages:
        by_source.setdefault(m.source_type, []).append(m)
    metas = [json.loads(m.blocks)[0]["text"] for m in by_source["meta"]]
    assert any(t.startswith("# AGENTS.md instructions") for t in metas)
    assert any(t.startswith("<environment_context>") for t in metas)
    assert any(t.startswith("<user_action>") for t in metas)  # review results handed back
    # The /review prompt exists only as an event: stored once, as a command.
    (review,) = by_source["command"]
    assert json.loads(review.blocks)[0]["text"].startswith("Review the code changes")
    assert len(by_source["interrupt"]) == 1
    typed = [json.loads(m.blocks)[0]["text"] for m in by_source["user"]]
    assert "上記を修正してください。" in typed
    # Reasoning is kept as its summary; the encrypted blob never is.
    blobs = " ".join(m.blocks for m in got.messages)
    assert "gAAAAAB" not in blobs
    assert '"kind": "thinking"' in blobs or '"kind":"thinking"' in blobs


def test_tool_results_errors_and_images(corpus, engine, plugins):
    ingest(engine, plugins, [corpus / "codex" / "jnarowski-agentcmd" / "sessions"])
    with engine.connect() as conn:
        rows = (
            conn.execute(text("SELECT m.blocks FROM messages m WHERE m.role = 'tool'"))
            .scalars()
            .all()
        )
        images = conn.execute(
            text("SELECT COUNT(*) FROM messages WHERE blocks LIKE '%\"image\"%'")
        ).scalar_one()
    results = [json.loads(b)[0] for b in rows]
    sandbox = [r for r in results if r["text"].startswith("failed in sandbox")]
    rejected = [r for r in results if r["text"].startswith("patch rejected")]
    plan = [r for r in results if r["text"] == "Plan updated"]
    assert sandbox and all(r["is_error"] for r in sandbox)
    assert rejected and all(r["is_error"] for r in rejected)
    assert plan and not any(r["is_error"] for r in plan)
    # JSON-encoded outputs are unwrapped; the exit code decides the error flag.
    assert not any(r["text"].startswith('{"output"') for r in results)
    assert any(
        r["is_error"] and not r["text"].startswith(("failed", "patch", "execution"))
        for r in results
    )
    assert images == 1  # the pasted screenshot, without its data
    with engine.connect() as conn:
        assert (
            conn.execute(
                text("SELECT COUNT(*) FROM messages WHERE blocks LIKE '%base64%'")
            ).scalar_one()
            == 0
        )


# -- incremental reads --------------------------------------------------------------------------


def _write(path: Path, data: bytes) -> None:
    path.write_bytes(data)
    # A grown file normally has a new mtime; make sure of it even on coarse clocks.
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


@pytest.mark.parametrize(
    "rel,cut",
    [
        (ROLLOUT_0_77, 0.5),
        (ROLLOUT_0_77, 1345),  # inside the /review sub-agent: its token counter is in cursor.state
        (ROLLOUT_0_40_RESUMED, 350),  # just before the CLI restarted and its counter went back to 0
    ],
    ids=["half", "in-review", "before-restart"],
)
def test_grown_file_ends_like_a_one_shot_ingest(corpus, engine, plugins, tmp_path, rel, cut):
    source = corpus / rel
    raw = source.read_bytes().splitlines(keepends=True)
    n = int(len(raw) * cut) if isinstance(cut, float) else cut
    growing = tmp_path / "grow" / source.name
    growing.parent.mkdir()
    _write(growing, b"".join(raw[:n]))
    first = ingest(engine, plugins, [growing])
    assert first.new == 1 and first.failed == 0
    _write(growing, b"".join(raw))
    second = ingest(engine, plugins, [growing])
    assert second.grown == 1 and second.failed == 0, second.errors

    from auditor.store.db import open_db

    reference = open_db(tmp_path / "one-shot.db")
    ingest(reference, plugins, [source])
    native = raw_rollout(source)["session_id"]
    assert snapshot(engine, native) == snapshot(reference, native)


def test_truncated_last_line_is_read_once_complete(corpus, engine, plugins, tmp_path):
    source = corpus / ROLLOUT_SHORT
    data = source.read_bytes()
    lines = data.splitlines(keepends=True)
    cut = sum(len(x) for x in lines[:20]) + len(lines[20]) // 2  # half of line 21
    growing = tmp_path / source.name
    _write(growing, data[:cut])
    first = ingest(engine, plugins, [growing])
    assert any(":21: truncated last line" in e for e in first.errors)
    _write(growing, data)
    second = ingest(engine, plugins, [growing])
    assert second.grown == 1 and second.failed == 0

    from auditor.store.db import open_db

    reference = open_db(tmp_path / "one-shot.db")
    ingest(reference, plugins, [source])
    native = "019b5669-8da8-7bc3-bed8-e1c1b805dad5"
    assert snapshot(engine, native) == snapshot(reference, native)


def test_ingesting_twice_changes_nothing(corpus, engine, plugins, tmp_path):
    copy = tmp_path / Path(ROLLOUT_0_55).name
    shutil.copy(corpus / ROLLOUT_0_55, copy)
    ingest(engine, plugins, [copy])
    native = "019a5baf-15f8-7f52-84b2-7f5e68d5e8cd"
    before = snapshot(engine, native)
    again = ingest(engine, plugins, [copy])
    assert again.skipped == 1 and again.messages == 0
    # Same size, new mtime: read again from the start; still the same thread.
    os.utime(copy, ns=(copy.stat().st_atime_ns, copy.stat().st_mtime_ns + 5_000_000_000))
    reread = ingest(engine, plugins, [copy])
    assert reread.rewritten == 1 and reread.failed == 0
    assert snapshot(engine, native) == before


def test_malformed_line_is_a_problem_and_the_rest_is_stored(corpus, engine, plugins, tmp_path):
    source = corpus / ROLLOUT_SHORT
    lines = source.read_bytes().splitlines(keepends=True)
    assert b'"summary_text"' in lines[15]  # line 16: a reasoning summary, one message
    broken = tmp_path / source.name
    broken.write_bytes(
        b"".join(lines[:15] + [b'{"timestamp": "2025-12-25T16:59:00Z", "type": \n'] + lines[16:])
    )
    summary = ingest(engine, plugins, [broken])
    assert summary.failed == 1
    (err,) = errors(engine)
    assert err[0] == str(broken) and err[1] == 16 and "malformed JSON" in err[2]
    assert any(e.startswith(f"{broken}:16: ") for e in summary.errors)
    expected = raw_rollout(source)
    got = stored(engine, expected["session_id"])
    assert got.thread["message_count"] == expected["messages"] - 1
    assert set(got.calls) == expected["calls"]


def test_rotated_file_without_session_meta(corpus, tmp_path):
    """A rollout read from its middle (or rotated): detected, and named by its file name."""
    from auditor_plugins.codex_rollout import CodexFormat

    source = corpus / ROLLOUT_SHORT
    lines = source.read_bytes().splitlines(keepends=True)
    tail = tmp_path / source.name
    tail.write_bytes(b"".join(lines[5:]))
    fmt = CodexFormat()
    assert fmt.detect(tail, tail.read_bytes()[:65536])
    records = list(fmt.parse(tail, Cursor()))
    assert not [r for r in records if isinstance(r, Problem)]
    threads = {r.thread for r in records if isinstance(r, (Message, Usage))}
    assert threads == {"019b5669-8da8-7bc3-bed8-e1c1b805dad5"}


# -- codex exec --json --------------------------------------------------------------------------


def raw_exec(path: Path) -> dict:
    events = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    completed = [e["item"] for e in events if e["type"] == "item.completed"]
    usage = [e["usage"] for e in events if e["type"] == "turn.completed"]
    return {
        "thread": next(e["thread_id"] for e in events if e["type"] == "thread.started"),
        # a command is a call and its result; other items one message each
        "messages": sum(2 if i["type"] == "command_execution" else 1 for i in completed),
        "commands": {i["id"]: i for i in completed if i["type"] == "command_execution"},
        "input": sum(u["input_tokens"] - u["cached_input_tokens"] for u in usage),
        "cached": sum(u["cached_input_tokens"] for u in usage),
        "output": sum(u["output_tokens"] for u in usage),
    }


def test_codex_exec_json(corpus, engine, plugins):
    files = sorted((corpus / "codex" / "jnarowski-agentcmd" / "exec-json").glob("*.jsonl"))
    summary = ingest(engine, plugins, files)
    assert summary.failed == 0 and {f.format for f in summary.files} == {"codex-exec"}
    for path in files:
        expected = raw_exec(path)
        got = stored(engine, expected["thread"])
        assert got.thread["message_count"] == expected["messages"]
        assert set(got.calls) == set(expected["commands"])
        for call_id, item in expected["commands"].items():
            assert got.calls[call_id].name == "shell"
            assert bool(got.calls[call_id].is_error) == (item["exit_code"] != 0)
        assert got.tokens[:3] == (expected["input"], expected["cached"], expected["output"])
        # started-then-completed items are stored once, completed
        outputs = [json.loads(m.blocks)[0] for m in got.messages if m.role == "tool"]
        assert all(o["text"] for o in outputs)


def test_codex_exec_other_item_types(tmp_path, engine, plugins):
    log = tmp_path / "exec.jsonl"
    events = [
        {"type": "thread.started", "thread_id": "0199aaaa-0000-7000-8000-000000000001"},
        {"type": "turn.started"},
        {
            "type": "item.started",
            "item": {"id": "item_0", "type": "file_change", "changes": [], "status": "in_progress"},
        },
        {
            "type": "item.completed",
            "item": {
                "id": "item_0",
                "type": "file_change",
                "status": "completed",
                "changes": [
                    {"path": "src/a.py", "kind": "update"},
                    {"path": "src/b.py", "kind": "add"},
                ],
            },
        },
        {
            "type": "item.completed",
            "item": {
                "id": "item_1",
                "type": "command_execution",
                "command": "bash -lc \"sed -i 's/x/y/' src/c.py\"",
                "aggregated_output": "",
                "exit_code": 0,
                "status": "completed",
            },
        },
        {
            "type": "item.completed",
            "item": {
                "id": "item_2",
                "type": "mcp_tool_call",
                "server": "docs",
                "tool": "search",
                "status": "failed",
                "error": {"message": "timeout"},
            },
        },
        {
            "type": "item.started",
            "item": {
                "id": "item_3",
                "type": "command_execution",
                "command": "sleep 100",
                "aggregated_output": "",
                "status": "in_progress",
            },
        },
        {
            "type": "turn.completed",
            "usage": {"input_tokens": 1000, "cached_input_tokens": 600, "output_tokens": 50},
        },
    ]
    log.write_text("".join(json.dumps(e) + "\n" for e in events))
    summary = ingest(engine, plugins, [log])
    assert summary.failed == 0 and summary.files[0].format == "codex-exec"
    got = stored(engine, "0199aaaa-0000-7000-8000-000000000001")
    calls = got.calls
    assert set(calls) == {"item_0", "item_1", "item_2"}  # item_3 never completed
    assert calls["item_0"].is_file_edit and calls["item_0"].edited_paths == ["src/a.py", "src/b.py"]
    assert calls["item_1"].is_file_edit and calls["item_1"].edited_paths == ["src/c.py"]
    assert calls["item_2"].name == "mcp__docs__search" and calls["item_2"].is_error
    assert got.tokens[:3] == (400, 600, 50)


# -- detection ----------------------------------------------------------------------------------


def test_detection_keeps_formats_apart(corpus):
    from auditor_plugins.codex_exec import CodexExecFormat
    from auditor_plugins.codex_rollout import CodexFormat

    rollout, exe = CodexFormat(), CodexExecFormat()
    roll = corpus / ROLLOUT_SHORT
    execf = corpus / "codex" / "jnarowski-agentcmd" / "exec-json" / "stream-output-2.jsonl"
    assert rollout.detect(roll, roll.read_bytes()[:65536]) and not exe.detect(
        roll, roll.read_bytes()[:65536]
    )
    assert exe.detect(execf, execf.read_bytes()) and not rollout.detect(execf, execf.read_bytes())
    claude = next((corpus / "claude-code").rglob("*.jsonl"), None)
    if claude is not None:
        head = claude.read_bytes()[:65536]
        assert not rollout.detect(claude, head) and not exe.detect(claude, head)
    # A first line longer than the 64 KiB head is recognised by its opening.
    big = (
        b'{"timestamp":"2025-01-01T00:00:00.000Z","type":"session_meta","payload":{"instructions":"'
        + b"x" * 70000
    )
    assert rollout.detect(Path("rollout-x.jsonl"), big[:65536])
    assert not rollout.detect(Path("notes.json"), roll.read_bytes()[:65536])


def test_tool_output_shapes():
    from auditor_plugins.codex_rollout import tool_output

    assert tool_output('{"output":"ok\\n","metadata":{"exit_code":0,"duration_seconds":0.1}}') == (
        "ok\n",
        False,
    )
    assert tool_output('{"output":"","metadata":{"exit_code":2}}') == ("", True)
    assert tool_output("Exit code: 0\nWall time: 1 seconds\nOutput:\nfine\n")[1] is False
    assert tool_output("Exit code: 127\nWall time: 0 seconds\nOutput:\nnope\n")[1] is True
    assert tool_output("failed in sandbox MacosSeatbelt with execution error: ...")[1] is True
    assert tool_output("patch rejected by user")[1] is True
    assert tool_output("apply_patch verification failed: Failed to find expected lines")[1] is True
    assert tool_output("Wall time: 16.5 seconds\naborted by user")[1] is True
    assert tool_output("Plan updated") == ("Plan updated", False)


def test_registered(plugins):
    formats = plugins.formats()
    assert formats["codex"].agent == "codex" and formats["codex"].appendable
    assert formats["codex-exec"].agent == "codex" and formats["codex-exec"].appendable


def test_review_sub_agent_session_is_a_sidechain(corpus, engine, plugins):
    ingest(engine, plugins, [corpus / ROLLOUT_SHORT])
    got = stored(engine, "019b5669-8da8-7bc3-bed8-e1c1b805dad5")
    assert got.thread["is_sidechain"] and got.thread["agent_type"] == "review"
    prompts = [m for m in got.messages if m.role == "user" and m.source_type != "meta"]
    assert [m.source_type for m in prompts] == ["command"]  # written by /review, not typed
    assert json.loads(prompts[0].blocks)[0]["text"].startswith("Review the code changes")


def test_codex_exec_resumed_run_appends_to_the_same_thread(tmp_path, engine, plugins):
    def run(text):
        return [
            {"type": "thread.started", "thread_id": "0199bbbb-0000-7000-8000-000000000002"},
            {"type": "turn.started"},
            {
                "type": "item.completed",
                "item": {"id": "item_0", "type": "agent_message", "text": text},
            },
            {
                "type": "turn.completed",
                "usage": {"input_tokens": 10, "cached_input_tokens": 0, "output_tokens": 1},
            },
        ]

    log = tmp_path / "exec.jsonl"
    log.write_text("".join(json.dumps(e) + "\n" for e in run("first")))
    ingest(engine, plugins, [log])
    with log.open("a") as fh:  # `codex exec resume ... --json >> exec.jsonl`
        fh.write("".join(json.dumps(e) + "\n" for e in run("second")))
    assert ingest(engine, plugins, [log]).grown == 1
    got = stored(engine, "0199bbbb-0000-7000-8000-000000000002")
    texts = [json.loads(m.blocks)[0]["text"] for m in got.messages]
    assert texts == ["first", "second"]  # item ids restart; both kept
    assert got.tokens[0] == 20
