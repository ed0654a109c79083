"""The Claude Code format plugin, against the real transcripts in ../shared/corpus/claude-code.

The numbers the store must hold are counted here straight from the raw JSON lines, by code that
does not share anything with the parser.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections import defaultdict
from pathlib import Path

import orjson
import pytest
from auditor_plugins.claude_code import ClaudeCodeFormat
from auditor_plugins.claude_code_edits import tool_edits
from sqlalchemy import func, select

from auditor.ingest.ingester import ingest
from auditor.model import (
    SOURCE_AGENT,
    SOURCE_COMMAND,
    SOURCE_COMPACT,
    SOURCE_COURSE_CORRECTION,
    SOURCE_ERROR,
    SOURCE_INTERRUPT,
    SOURCE_META,
    SOURCE_TOOL_RESULT,
    SOURCE_TYPED,
    Cursor,
    Message,
    Problem,
    ThreadInfo,
    Usage,
)
from auditor.store import schema as s

pytestmark = pytest.mark.corpus

UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
STRUCTURED_EDITS = {"Edit", "Write", "MultiEdit", "NotebookEdit"}

HALIBIT = "4thehalibit-omarchy-backup/-home-vwestberg-Claude"
SAMPLE = "daaain-claude-code-log/-Users-dain-workspace-claude-code-log-sample"
INLINE = "d-kimuson-claude-code-viewer/sample-project/fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl"
BIG_IMAGES = f"{HALIBIT}/1fb5e404-604d-4a2b-baf1-3beb42a67371.jsonl"
FAILED_RESULTS = f"{SAMPLE}/37f83ec9-f2ea-42a9-925e-0d5c105cb6e8.jsonl"
MULTI_EDIT = f"{SAMPLE}/07f2e15c-a38b-454b-9148-60edc06de401.jsonl"
SPILLED_PARENT = f"{HALIBIT}/8c880a68-969b-4b92-8733-a4927179d072.jsonl"
SPILLED_AGENT = (
    f"{HALIBIT}/8c880a68-969b-4b92-8733-a4927179d072/subagents/agent-a2df51c9276581f81.jsonl"
)
SYNTHETIC = "csm-kr-riemannian_flow_det/-workspace-riemannian-flow-det/391d60d7-dca3-490d-9054-c5aeb6c3f125.jsonl"
COMPACTED = "marot-spotter/4d5611e5-241a-462a-8d15-5122611a9569.jsonl"
LEGACY_AGENT = (
    "daaain-claude-code-log/-Users-dain-workspace-coderabbit-review-helper/agent-ea02459f.jsonl"
)
LEGACY_PARENT = "daaain-claude-code-log/-Users-dain-workspace-coderabbit-review-helper/cb2e607c-c758-415a-8b45-c49e4631906a.jsonl"


@pytest.fixture
def cc(corpus) -> Path:
    return corpus / "claude-code"


# -- counting from the raw lines ------------------------------------------------------------
def _is_message(rec: dict) -> bool:
    """Which lines the spec says become messages."""
    if not rec.get("uuid"):
        return False
    kind = rec.get("type")
    if kind in ("user", "assistant"):
        return isinstance(rec.get("message"), dict)
    if kind == "system":
        sub = rec.get("subtype")
        if sub in ("compact_boundary", "local_command", "api_error"):
            return True
        if sub == "stop_hook_summary":
            return bool(rec.get("hookErrors") or rec.get("preventedContinuation"))
        return (
            sub != "turn_duration" and isinstance(rec.get("content"), str) and rec["content"] != ""
        )
    return False


def _raw_thread(rec: dict, stem: str, sid: str | None, by_uuid: dict) -> str:
    """The documented thread naming, worked out from one record and its file."""
    if stem.startswith("agent-"):
        return f"{sid}/agent-{stem[len('agent-') :]}"
    session = stem if UUID.match(stem) else sid
    if not rec.get("isSidechain"):
        return session
    # Inline sidechain: named after its first record, found by walking up the parents.
    cur = rec
    while cur.get("parentUuid") in by_uuid and by_uuid[cur["parentUuid"]].get("isSidechain"):
        cur = by_uuid[cur["parentUuid"]]
    return f"{session}/sidechain-{cur['uuid']}"


def raw_expectations(files: list[Path]) -> dict[str, dict]:
    """Per thread native id: message uuids, tool call ids, structured edit ids, bills by key."""
    out: dict[str, dict] = defaultdict(
        lambda: {"messages": set(), "calls": set(), "edits": set(), "bills": {}}
    )
    for path in files:
        recs = [
            json.loads(line)
            for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()
        ]
        recs = [r for r in recs if isinstance(r, dict)]
        stem = path.name[: -len(".jsonl")]
        sid = next((r["sessionId"] for r in recs if r.get("sessionId")), None)
        by_uuid = {r["uuid"]: r for r in recs if r.get("uuid")}
        for rec in recs:
            if not _is_message(rec):
                continue
            t = out[_raw_thread(rec, stem, sid, by_uuid)]
            t["messages"].add(rec["uuid"])
            content = rec.get("message", {}).get("content")
            for block in content if isinstance(content, list) else []:
                if block.get("type") == "tool_use":
                    t["calls"].add(block["id"])
                    if block["name"] in STRUCTURED_EDITS or block["name"].endswith(
                        "__create_or_update_file"
                    ):
                        t["edits"].add(block["id"])
                elif block.get("type") == "tool_result":
                    t["calls"].add(block["tool_use_id"])
            if rec["type"] == "assistant" and rec["message"].get("model") != "<synthetic>":
                usage = rec["message"].get("usage")
                if isinstance(usage, dict):
                    key = rec["message"].get("id") or rec.get("requestId") or rec["uuid"]
                    t["bills"][key] = (  # the last streamed copy wins
                        usage.get("input_tokens") or 0,
                        usage.get("output_tokens") or 0,
                        usage.get("cache_read_input_tokens") or 0,
                        usage.get("cache_creation_input_tokens") or 0,
                    )
    return dict(out)


def stored(engine) -> dict[str, dict]:
    """The same numbers, read back from the store."""
    out: dict[str, dict] = {}
    with engine.connect() as conn:
        threads = conn.execute(select(s.Thread)).all()
        for th in threads:
            msgs = conn.execute(
                select(s.Message.native_id).where(s.Message.thread_id == th.id)
            ).scalars()
            calls = conn.execute(select(s.ToolCall).where(s.ToolCall.thread_id == th.id)).all()
            tokens = conn.execute(
                select(
                    func.coalesce(func.sum(s.TokenUsage.input_tokens), 0),
                    func.coalesce(func.sum(s.TokenUsage.output_tokens), 0),
                    func.coalesce(func.sum(s.TokenUsage.cache_read_tokens), 0),
                    func.coalesce(func.sum(s.TokenUsage.cache_write_tokens), 0),
                ).where(s.TokenUsage.thread_id == th.id)
            ).one()
            out[th.native_id] = {
                "row": th,
                "messages": set(msgs),
                "calls": {c.call_id for c in calls},
                "edits": {c.call_id for c in calls if c.is_file_edit and c.name != "Bash"},
                "bash_edits": {c.call_id for c in calls if c.is_file_edit and c.name == "Bash"},
                "tokens": tuple(int(x) for x in tokens),
            }
    return out


def assert_matches_raw(engine, files: list[Path]) -> dict[str, dict]:
    want = raw_expectations(files)
    got = stored(engine)
    for native_id, exp in want.items():
        assert native_id in got, f"thread {native_id} missing"
        have = got[native_id]
        row = have["row"]
        assert have["messages"] == exp["messages"], native_id
        assert row.message_count == len(exp["messages"]), native_id
        assert have["calls"] == exp["calls"], native_id
        assert row.tool_call_count == len(exp["calls"]), native_id
        assert have["edits"] == exp["edits"], native_id
        assert row.file_edit_count == len(exp["edits"]) + len(have["bash_edits"]), native_id
        bills = exp["bills"].values()
        assert have["tokens"] == tuple(sum(b[i] for b in bills) for i in range(4)), native_id
    # Threads with no messages are only subagent threads named by a parent whose log exists.
    for native_id, have in got.items():
        if native_id not in want:
            assert not have["messages"] and have["row"].is_sidechain, native_id
    return got


def ingest_ok(engine, plugins, paths):
    summary = ingest(engine, plugins, paths)
    assert summary.failed == 0, summary.errors
    return summary


# -- the corpus ---------------------------------------------------------------------------
def test_every_claude_code_file_is_detected_and_nothing_else(cc, corpus):
    fmt = ClaudeCodeFormat()
    for path in sorted(corpus.rglob("*.json*")):
        if path.stat().st_size == 0:
            continue
        head = path.read_bytes()[:65536]
        assert fmt.detect(path, head) == (cc in path.parents), path


def test_whole_corpus_ingests_and_matches_the_raw_lines(cc, engine, plugins):
    summary = ingest(engine, plugins, [cc])
    empty = [f for f in summary.files if f.status == "empty"]
    assert [Path(f.path).name for f in empty] == ["4fe49c7c-ff82-4ac7-b3f2-79c22036bd58.jsonl"]
    assert summary.failed == 0, summary.errors
    assert all(f.format == "claude-code" for f in summary.files if f.status == "new")
    with engine.connect() as conn:
        errors = conn.execute(select(s.IngestError.path, s.IngestError.error)).all()
    assert len(errors) == 1 and "0 bytes" in errors[0].error
    got = assert_matches_raw(engine, sorted(cc.rglob("*.jsonl")))
    assert sum(len(t["messages"]) for t in got.values()) == summary.messages


@pytest.mark.parametrize(
    "files",
    [
        [INLINE],
        [
            BIG_IMAGES,
            f"{HALIBIT}/1fb5e404-604d-4a2b-baf1-3beb42a67371/subagents/agent-aa9b6813c05338fac.jsonl",
        ],
        [FAILED_RESULTS],
        [MULTI_EDIT],
        [SPILLED_PARENT, SPILLED_AGENT],
        [COMPACTED],
        [LEGACY_PARENT, LEGACY_AGENT],
        ["daaain-claude-code-log/-experiments-worktrees"],
    ],
    ids=[
        "inline-sidechains",
        "images+subagent",
        "failed-results",
        "multiedit",
        "spilled",
        "compaction",
        "legacy-agent",
        "subagents-dir",
    ],
)
def test_counts_match_the_raw_lines(cc, engine, plugins, files):
    paths = [cc / f for f in files]
    ingest_ok(engine, plugins, paths)
    jsonl = [p for f in paths for p in ([f] if f.is_file() else sorted(f.rglob("*.jsonl")))]
    got = assert_matches_raw(engine, jsonl)
    assert sum(bool(t["messages"]) for t in got.values()) == len(raw_expectations(jsonl))


def test_known_numbers_of_the_multiedit_session(cc, engine, plugins):
    ingest_ok(engine, plugins, [cc / MULTI_EDIT])
    got = stored(engine)["07f2e15c-a38b-454b-9148-60edc06de401"]
    with engine.connect() as conn:
        multi = conn.execute(select(s.ToolCall).where(s.ToolCall.name == "MultiEdit")).all()
        # Streamed copies of msg_01HDXxNg5wW8UsNyf6XHSdqs say 1 then 99 output tokens: one bill, the last.
        bill = conn.execute(
            select(s.TokenUsage).where(s.TokenUsage.key == "msg_01HDXxNg5wW8UsNyf6XHSdqs")
        ).one()
        lines = (
            conn.execute(
                select(s.Message.line).where(s.Message.usage_key == "msg_01HDXxNg5wW8UsNyf6XHSdqs")
            )
            .scalars()
            .all()
        )
    assert len(multi) == 3
    assert all(
        c.is_file_edit and c.edited_paths[0].startswith("/Users/dain/workspace/claude-code-log/")
        for c in multi
    )
    assert bill.output_tokens == 99 and sorted(lines) == [17, 18]
    assert len(got["messages"]) == 53


def test_failed_tool_results_are_errors(cc, engine, plugins):
    ingest_ok(engine, plugins, [cc / FAILED_RESULTS])
    raw_errors = set()
    for line in (cc / FAILED_RESULTS).read_text().splitlines():
        rec = json.loads(line)
        content = rec.get("message", {}).get("content") if rec.get("type") == "user" else None
        for b in content if isinstance(content, list) else []:
            if b.get("type") == "tool_result" and b.get("is_error"):
                raw_errors.add(b["tool_use_id"])
    with engine.connect() as conn:
        failed = set(
            conn.execute(select(s.ToolCall.call_id).where(s.ToolCall.is_error.is_(True))).scalars()
        )
    assert failed == raw_errors and len(failed) == 21


# -- threads and sidechains -----------------------------------------------------------------
def _threads(engine) -> dict[str, s.Thread]:
    with engine.connect() as conn:
        return {t.native_id: t for t in conn.execute(select(s.Thread)).all()}


def test_subagent_thread_is_linked_to_its_session(cc, engine, plugins):
    ingest_ok(engine, plugins, [cc / SPILLED_AGENT, cc / SPILLED_PARENT])  # child first on purpose
    threads = _threads(engine)
    parent = threads["8c880a68-969b-4b92-8733-a4927179d072"]
    child = threads["8c880a68-969b-4b92-8733-a4927179d072/agent-a2df51c9276581f81"]
    assert child.is_sidechain and not parent.is_sidechain
    assert child.parent_id == parent.id and child.parent_native_id == parent.native_id
    assert child.agent_type == "claude-code-guide"  # from agent-….meta.json
    assert child.title == "Claude Code conversation history"
    # The parent's Agent call (toolUseResult.agentId) names the child's spawning call.
    assert child.parent_tool_use_id == "toolu_01KwQtvsHzWCZByyy8N4b1q9"
    with engine.connect() as conn:
        call = conn.execute(
            select(s.ToolCall).where(s.ToolCall.call_id == child.parent_tool_use_id)
        ).one()
    assert call.thread_id == parent.id and call.name == "Agent"


def test_legacy_agent_file_and_orphans(cc, engine, plugins):
    orphan = (
        cc
        / f"{HALIBIT}/6e3aa12b-9c1b-4b7d-aad7-901bff58dffb/subagents/agent-a610ebe7eea0c9ec8.jsonl"
    )
    lone = (
        cc
        / "daaain-claude-code-log/-Users-dain-workspace-coderabbit-review-helper/agent-659acfed.jsonl"
    )
    ingest_ok(engine, plugins, [cc / LEGACY_PARENT, cc / LEGACY_AGENT, orphan, lone])
    threads = _threads(engine)
    legacy = threads["cb2e607c-c758-415a-8b45-c49e4631906a/agent-ea02459f"]
    assert legacy.parent_id == threads["cb2e607c-c758-415a-8b45-c49e4631906a"].id
    assert (
        legacy.parent_tool_use_id == "toolu_01HD7PpSCWhP2gP8dXvJiyZN"
        and legacy.agent_type == "Plan"
    )
    lost = threads["6e3aa12b-9c1b-4b7d-aad7-901bff58dffb/agent-a610ebe7eea0c9ec8"]
    assert lost.is_sidechain and lost.parent_native_id == "6e3aa12b-9c1b-4b7d-aad7-901bff58dffb"
    assert lost.parent_id is None and lost.agent_type == "Explore"
    assert threads["4227a68e-2b1f-4923-b824-6e04a67f77c1/agent-659acfed"].message_count == 1


def test_inline_sidechains_become_linked_threads(cc, engine, plugins):
    ingest_ok(engine, plugins, [cc / INLINE])
    threads = _threads(engine)
    main = threads["fe5e1c67-53e7-4862-81ae-d0e013e3270b"]
    sides = [t for t in threads.values() if t.is_sidechain]
    assert len(sides) == 5
    assert all(
        t.parent_id == main.id and t.native_id.startswith(main.native_id + "/sidechain-")
        for t in sides
    )
    assert main.message_count == 32 and sum(t.message_count for t in sides) == 405
    with engine.connect() as conn:
        tasks = set(
            conn.execute(
                select(s.ToolCall.call_id).where(
                    s.ToolCall.thread_id == main.id, s.ToolCall.name == "Task"
                )
            ).scalars()
        )
        flags = set(
            conn.execute(
                select(s.Message.is_sidechain).where(s.Message.thread_id == sides[0].id)
            ).scalars()
        )
    assert {t.parent_tool_use_id for t in sides} == tasks and len(tasks) == 5
    assert {t.agent_type for t in sides} == {"general-purpose"}
    assert "Create data models" in {t.title for t in sides}
    assert flags == {True}


def test_titles_and_session_metadata(cc, engine, plugins):
    ingest_ok(
        engine,
        plugins,
        [
            cc / f"{HALIBIT}/44ef5cbf-9cc3-4f7b-ac40-337a4d39713b.jsonl",
            cc / "frederick-douglas-pearce-claude-code-sessions/hook-trace-stop-hook-error.jsonl",
            cc / "jnarowski-agentcmd/full-session-five.jsonl",
        ],
    )
    threads = _threads(engine)
    assert (
        threads["44ef5cbf-9cc3-4f7b-ac40-337a4d39713b"].title == "add-teams-keybinding"
    )  # custom-title
    hook = threads["72162b18-8016-4f7d-ba44-c4408a3e1948"]  # file name is not the session id
    assert (
        hook.title == "Run three"
        and hook.version == "2.1.280"
        and hook.cwd == "/home/user/ccs-hook-fixture"
    )
    assert hook.meta["cost"]["total_cost_usd"] > 0
    # 16 leading summaries all describe other sessions: kept aside, never the title.
    five = threads["10cd5911-8704-4996-9e33-32010589c357"]
    assert five.title is None and len(five.meta["summaries"]) == 16


def test_compaction(cc, engine, plugins):
    ingest_ok(engine, plugins, [cc / COMPACTED])
    with engine.connect() as conn:
        rows = conn.execute(
            select(s.Message).where(s.Message.role == "system", s.Message.line == 754)
        ).all()
        summary = conn.execute(
            select(s.Message).where(s.Message.source_type == SOURCE_COMPACT)
        ).all()
    (boundary,) = rows
    assert boundary.source_type == SOURCE_META and boundary.blocks == [
        {"kind": "text", "text": "Conversation compacted"}
    ]
    assert boundary.parent_native_id == "459e838f-d7ea-4f7d-94ad-2cb4d227dc77"  # logicalParentUuid
    assert len(summary) == 1 and summary[0].parent_native_id == boundary.native_id


# -- content ----------------------------------------------------------------------------------
def test_synthetic_replies_are_errors_without_tokens(cc, engine, plugins):
    ingest_ok(engine, plugins, [cc / SYNTHETIC])
    with engine.connect() as conn:
        errors = conn.execute(select(s.Message).where(s.Message.source_type == SOURCE_ERROR)).all()
        models = set(conn.execute(select(s.TokenUsage.model)).scalars())
        thread = conn.execute(select(s.Thread)).one()
    assert len(errors) == 2 and all(
        m.model == "<synthetic>" and m.usage_key is None for m in errors
    )
    assert errors[0].blocks[0]["text"].startswith("Not logged in")
    assert "<synthetic>" not in models and thread.models == "claude-sonnet-4-6"


def test_spilled_tool_output_is_read_from_tool_results(cc, engine, plugins):
    ingest_ok(engine, plugins, [cc / SPILLED_AGENT])
    spill = (
        cc
        / f"{HALIBIT}/8c880a68-969b-4b92-8733-a4927179d072/tool-results/toolu_018hMKvat8La6q8hyt1UZYAo.txt"
    )
    with engine.connect() as conn:
        msgs = conn.execute(select(s.Message.blocks)).scalars().all()
    results = {
        b["tool_use_id"]: b.get("text")
        for blocks in msgs
        for b in blocks
        if b["kind"] == "tool_result"
    }
    assert results["toolu_018hMKvat8La6q8hyt1UZYAo"] == spill.read_text(encoding="utf-8")
    assert not any((t or "").startswith("<persisted-output>") for t in results.values())


def test_spilled_output_missing_or_huge(cc, tmp_path, engine, plugins):
    session = tmp_path / "proj" / "8c880a68-969b-4b92-8733-a4927179d072"
    (session / "subagents").mkdir(parents=True)
    agent = session / "subagents" / "agent-a2df51c9276581f81.jsonl"
    shutil.copy(cc / SPILLED_AGENT, agent)
    (session / "tool-results").mkdir()
    big = "HEAD" + "x" * 300_000 + "TAIL"
    (session / "tool-results" / "toolu_017fP86AX62HwZ71WujGKwVh.txt").write_text(big)
    ingest_ok(engine, plugins, [agent])
    with engine.connect() as conn:
        msgs = conn.execute(select(s.Message.blocks)).scalars().all()
    results = {
        b["tool_use_id"]: b.get("text")
        for blocks in msgs
        for b in blocks
        if b["kind"] == "tool_result"
    }
    capped = results["toolu_017fP86AX62HwZ71WujGKwVh"]
    assert capped.startswith("HEAD") and capped.endswith("TAIL") and len(capped) < 210_000
    # Not here: the preview stays.
    assert results["toolu_018hMKvat8La6q8hyt1UZYAo"].startswith("<persisted-output>")


def test_images_are_named_not_stored(cc, engine, plugins):
    ingest_ok(
        engine, plugins, [cc / BIG_IMAGES, cc / "daaain-claude-code-log/debug_image_message.jsonl"]
    )
    with engine.connect() as conn:
        blocks = [b for bl in conn.execute(select(s.Message.blocks)).scalars() for b in bl]
    images = [b for b in blocks if b["kind"] == "image"]
    assert len(images) >= 10 and all(
        b["text"] in ("[image image/png]", "[image image/jpeg]") for b in images
    )
    dumped = orjson.dumps(blocks)
    assert b"iVBORw0KGgo" not in dumped and b"/9j/4AAQ" not in dumped and b'"base64"' not in dumped


def test_source_types_on_real_sessions(cc, engine, plugins):
    ingest_ok(
        engine,
        plugins,
        [
            cc / f"{SAMPLE}/71c9afe9-d9cc-4583-86b3-e62ba682b83a.jsonl",
            cc / "marot-spotter/tool_heavy.jsonl",
            cc / BIG_IMAGES,
        ],
    )
    with engine.connect() as conn:
        rows = conn.execute(select(s.Message.role, s.Message.source_type, s.Message.blocks)).all()

    def first_text(blocks):
        return next((b.get("text") or "" for b in blocks if b["kind"] == "text"), "")

    by_type = defaultdict(list)
    for role, source, blocks in rows:
        by_type[(role, source)].append(blocks)
    assert all(
        first_text(b).startswith("[Request interrupted by user")
        for b in by_type[("user", SOURCE_INTERRUPT)]
    )
    assert by_type[("user", SOURCE_INTERRUPT)]
    assert all(
        b and all(x["kind"] == "tool_result" for x in b)
        for b in by_type[("user", SOURCE_TOOL_RESULT)]
    )
    assert any("<command-name>/clear" in first_text(b) for b in by_type[("user", SOURCE_COMMAND)])
    assert any(
        first_text(b).startswith("<local-command-stdout>")
        for b in by_type[("user", SOURCE_COMMAND)]
    )
    assert by_type[("user", SOURCE_META)] and by_type[("assistant", SOURCE_AGENT)]
    assert by_type[("system", SOURCE_COMMAND)]  # local_command system records (tool_heavy)
    typed = [first_text(b) for b in by_type[("user", SOURCE_TYPED)]]
    assert "my screen saver comes up way to fast" in typed
    assert not any(
        t.startswith(("<command-", "<local-command", "[Request interrupted", "Caveat:"))
        for t in typed
    )


# -- a made-up session for the cases the corpus lacks ---------------------------------------
SID = "11111111-2222-3333-4444-555555555555"


def _rec(kind, uuid, parent, **extra):
    rec = {
        "type": kind,
        "uuid": uuid,
        "parentUuid": parent,
        "sessionId": SID,
        "isSidechain": False,
        "timestamp": "2026-01-01T00:00:00.000Z",
        "cwd": "/p",
        "version": "2.1.0",
        "gitBranch": "main",
    }
    rec.update(extra)
    return rec


def _user(uuid, parent, content, **extra):
    return _rec("user", uuid, parent, message={"role": "user", "content": content}, **extra)


def _assistant(uuid, parent, content, msg_id="msg_1", model="claude-x", output=10, **extra):
    usage = {
        "input_tokens": 5,
        "output_tokens": output,
        "cache_read_input_tokens": 100,
        "cache_creation_input_tokens": 7,
    }
    return _rec(
        "assistant",
        uuid,
        parent,
        message={
            "id": msg_id,
            "role": "assistant",
            "model": model,
            "content": content,
            "usage": usage,
        },
        **extra,
    )


CLAUDE_MD = (
    "<system-reminder>\nAs you answer the user's questions, you can use the following context:\n"
    "# claudeMd\nCodebase and user instructions are shown below.\n\n"
    "Contents of /p/CLAUDE.md (project instructions, checked into the codebase):\n\n"
    "Always run the tests.\n\n# currentDate\nToday's date is 2026-01-01.\n</system-reminder>"
)


def made_up_session() -> list:
    return [
        {"type": "summary", "summary": "Some other session", "leafUuid": "elsewhere"},
        {"type": "permission-mode", "permissionMode": "acceptEdits", "sessionId": SID},
        _user("u1", None, CLAUDE_MD, isMeta=True),
        _user("u2", "u1", "Please fix the bug"),
        {
            "type": "progress",
            "uuid": "p1",
            "parentUuid": "u2",
            "sessionId": SID,
            "data": {"type": "hook_progress"},
        },
        _assistant(
            "a1", "p1", [{"type": "thinking", "thinking": "hmm", "signature": "x"}], output=1
        ),
        _assistant(
            "a2",
            "a1",
            [
                {
                    "type": "tool_use",
                    "id": "t1",
                    "name": "Bash",
                    "input": {"command": "cat > notes.txt <<'EOF'\nhi > there\nEOF"},
                }
            ],
            output=30,
        ),
        _user(
            "u3",
            "a2",
            [
                {
                    "type": "tool_result",
                    "tool_use_id": "t1",
                    "content": [
                        {"type": "text", "text": "done"},
                        {
                            "type": "image",
                            "source": {
                                "type": "base64",
                                "media_type": "image/png",
                                "data": "iVBORw0KGgoAAAA",
                            },
                        },
                    ],
                }
            ],
        ),
        _assistant(
            "a3",
            "u3",
            [
                {
                    "type": "tool_use",
                    "id": "t2",
                    "name": "Edit",
                    "input": {"file_path": "/p/x.py", "old_string": "a", "new_string": "b"},
                }
            ],
            msg_id="msg_2",
        ),
        _user(
            "u4",
            "a3",
            [{"type": "tool_result", "tool_use_id": "t2", "content": "boom", "is_error": True}],
        ),
        _user("u5", "u4", [{"type": "text", "text": "[Request interrupted by user for tool use]"}]),
        _user("u6", "u5", "Stop and check the tests first.", source={"type": "course-correction"}),
        _user("u7", "u6", "<command-name>/model</command-name>\n<command-args></command-args>"),
        _rec("system", "s1", "u7", subtype="turn_duration", durationMs=5),
        _assistant(
            "a4",
            "s1",
            [{"type": "text", "text": "Not logged in"}],
            msg_id="x",
            model="<synthetic>",
            output=0,
            isApiErrorMessage=True,
        ),
        _rec(
            "system",
            "s2",
            None,
            subtype="compact_boundary",
            content="Conversation compacted",
            logicalParentUuid="a4",
        ),
        _user("u8", "s2", "This session is being continued...", isCompactSummary=True),
        _rec(
            "system",
            "s3",
            "u8",
            subtype="local_command",
            content="<local-command-stdout>ok</local-command-stdout>",
        ),
        {"type": "some-future-type", "sessionId": SID, "whatever": 1},
        {"type": "user", "message": {"role": "user", "content": "no uuid: not a message"}},
        [1, 2, 3],
        {"type": "ai-title", "aiTitle": "Fixing the bug", "sessionId": SID},
        {"type": "summary", "summary": "The bug got fixed", "leafUuid": "u8"},
    ]


def write_jsonl(path: Path, records: list) -> Path:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    return path


def parse_all(path: Path, cursor: Cursor | None = None) -> list:
    return list(ClaudeCodeFormat().parse(path, cursor or Cursor()))


def test_made_up_session_records(tmp_path):
    path = write_jsonl(tmp_path / f"{SID}.jsonl", made_up_session())
    recs = parse_all(path)
    msgs = {m.native_id: m for m in recs if isinstance(m, Message)}
    problems = [r for r in recs if isinstance(r, Problem)]
    assert [p.line for p in problems] == [21]  # the JSON array; unknown types are silent
    assert list(msgs) == [
        "u1",
        "u2",
        "a1",
        "a2",
        "u3",
        "a3",
        "u4",
        "u5",
        "u6",
        "u7",
        "a4",
        "s2",
        "u8",
        "s3",
    ]
    types = {k: m.source_type for k, m in msgs.items()}
    assert types == {
        "u1": SOURCE_META,
        "u2": SOURCE_TYPED,
        "a1": SOURCE_AGENT,
        "a2": SOURCE_AGENT,
        "u3": SOURCE_TOOL_RESULT,
        "a3": SOURCE_AGENT,
        "u4": SOURCE_TOOL_RESULT,
        "u5": SOURCE_INTERRUPT,
        "u6": SOURCE_COURSE_CORRECTION,
        "u7": SOURCE_COMMAND,
        "a4": SOURCE_ERROR,
        "s2": SOURCE_META,
        "u8": SOURCE_COMPACT,
        "s3": SOURCE_COMMAND,
    }
    assert msgs["a1"].parent_id == "u2"  # skipped the progress line
    assert msgs["a4"].parent_id == "u7"  # skipped turn_duration
    assert msgs["s2"].parent_id == "a4" and msgs["s2"].text == "Conversation compacted"
    assert msgs["a1"].seq == msgs["a1"].line == 6
    assert msgs["a1"].blocks[0].kind == "thinking" and msgs["a1"].blocks[0].text == "hmm"
    bash = msgs["a2"].blocks[0]
    assert bash.is_file_edit and bash.edited_paths == ["notes.txt"]
    edit = msgs["a3"].blocks[0]
    assert (
        edit.is_file_edit
        and edit.edited_paths == ["/p/x.py"]
        and edit.tool_input["new_string"] == "b"
    )
    assert msgs["u3"].blocks[0].text == "done\n[image]" and msgs["u3"].blocks[0].is_error is False
    assert msgs["u4"].blocks[0].is_error is True
    assert msgs["a1"].usage_key == msgs["a2"].usage_key == "msg_1" and msgs["a4"].usage_key is None
    bills = [(u.key, u.output_tokens) for u in recs if isinstance(u, Usage)]
    assert bills == [("msg_1", 1), ("msg_1", 30), ("msg_2", 10)]  # synthetic: no bill
    infos = [r for r in recs if isinstance(r, ThreadInfo)]
    last = infos[-1]
    assert {i.native_id for i in infos} == {SID}
    assert last.title == "Fixing the bug"  # an ai-title outranks a summary of this session
    assert last.guidance == {"/p/CLAUDE.md": "Always run the tests."}
    assert last.meta["permission_mode"] == "acceptEdits" and "elsewhere" in last.meta["summaries"]
    assert (last.cwd, last.git_branch, last.version) == ("/p", "main", "2.1.0")


def test_summary_of_this_session_titles_it(tmp_path):
    recs = [
        r for r in made_up_session() if not (isinstance(r, dict) and r.get("type") == "ai-title")
    ]
    infos = [
        r
        for r in parse_all(write_jsonl(tmp_path / f"{SID}.jsonl", recs))
        if isinstance(r, ThreadInfo)
    ]
    assert infos[-1].title == "The bug got fixed"


def test_state_carries_across_any_line_boundary(cc, tmp_path):
    """Reading a file one line at a time gives exactly what one read gives."""
    fmt = ClaudeCodeFormat()
    for rel in (INLINE, f"{HALIBIT}/44ef5cbf-9cc3-4f7b-ac40-337a4d39713b.jsonl"):
        src = cc / rel
        whole = [r for r in fmt.parse(src, Cursor())]
        copy = tmp_path / src.name
        if src.with_suffix("").is_dir():  # the subagent logs the session links to
            shutil.copytree(src.with_suffix(""), copy.with_suffix(""))
        copy.write_bytes(b"")
        cursor, pieces = Cursor(), []
        for line in src.read_bytes().splitlines(keepends=True):
            with open(copy, "ab") as fh:
                fh.write(line)
            cursor = Cursor(cursor.offset, cursor.line, orjson.loads(orjson.dumps(cursor.state)))
            pieces.extend(fmt.parse(copy, cursor))
            assert len(orjson.dumps(cursor.state)) < 8192
        assert _final(pieces) == _final(whole), rel


def _final(recs: list) -> tuple:
    msgs = {
        (m.thread, m.native_id): (
            m.parent_id,
            m.source_type,
            m.seq,
            [b.as_json() for b in m.blocks],
        )
        for m in recs
        if isinstance(m, Message)
    }
    bills = {
        (u.thread, u.key): (u.input_tokens, u.output_tokens) for u in recs if isinstance(u, Usage)
    }
    infos: dict = {}
    for r in recs:
        if isinstance(r, ThreadInfo):
            d = infos.setdefault(r.native_id, {})
            for k in (
                "cwd",
                "title",
                "parent_native_id",
                "parent_tool_use_id",
                "agent_type",
                "meta",
                "is_sidechain",
            ):
                if getattr(r, k) not in (None, False):
                    d[k] = getattr(r, k)
    return msgs, bills, infos


# -- the ingest lifecycle -------------------------------------------------------------------
def _table_counts(engine) -> dict:
    with engine.connect() as conn:
        return {
            t.__tablename__: conn.execute(select(func.count()).select_from(t)).scalar_one()
            for t in (s.Thread, s.Message, s.ToolCall, s.TokenUsage, s.IngestError)
        }


def test_empty_and_summary_only_files(cc, engine, plugins):
    empty = cc / f"{SAMPLE}/4fe49c7c-ff82-4ac7-b3f2-79c22036bd58.jsonl"
    summary_only = cc / f"{SAMPLE}/4e27c414-a885-46a0-b5c8-d58e1417377d.jsonl"
    summary = ingest(engine, plugins, [empty, summary_only])
    assert [f.status for f in summary.files] == ["empty", "new"]
    assert summary.files[1].errors == [] and summary.files[1].format == "claude-code"
    assert _table_counts(engine)["threads"] == 0


def test_meta_sidecar_is_claimed_and_parses_to_nothing(cc, engine, plugins):
    sidecar = (
        cc
        / f"{HALIBIT}/8c880a68-969b-4b92-8733-a4927179d072/subagents/agent-a2df51c9276581f81.meta.json"
    )
    summary = ingest_ok(engine, plugins, [sidecar])
    assert summary.files[0].format == "claude-code" and summary.messages == 0
    assert _table_counts(engine)["threads"] == 0


def test_ingesting_twice_changes_nothing(cc, engine, plugins):
    paths = [cc / INLINE, cc / SPILLED_PARENT, cc / SPILLED_AGENT, cc / SYNTHETIC]
    ingest_ok(engine, plugins, paths)
    before = _table_counts(engine)
    again = ingest_ok(engine, plugins, paths)
    assert {f.status for f in again.files} == {"skipped"} and _table_counts(engine) == before


def test_reread_of_a_rewritten_file_changes_nothing(cc, tmp_path, engine, plugins):
    copy = tmp_path / Path(INLINE).name
    shutil.copy(cc / INLINE, copy)
    ingest_ok(engine, plugins, [copy])
    before, threads = _table_counts(engine), _threads(engine)
    st = copy.stat()
    os.utime(copy, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    again = ingest_ok(engine, plugins, [copy])
    assert again.files[0].status == "rewritten"
    assert _table_counts(engine) == before
    assert {k: (t.parent_tool_use_id, t.title) for k, t in _threads(engine).items()} == {
        k: (t.parent_tool_use_id, t.title) for k, t in threads.items()
    }


def test_truncated_last_line_then_completed(cc, tmp_path, engine, plugins):
    src = cc / "jnarowski-agentcmd/full-session.jsonl"
    lines = src.read_bytes().splitlines(keepends=True)
    last = lines[-1]
    assert json.loads(last)["type"] in ("user", "assistant")
    copy = tmp_path / src.name
    copy.write_bytes(b"".join(lines[:-1]) + last[: len(last) // 2])
    first = ingest(engine, plugins, [copy])
    assert first.failed == 1
    with engine.connect() as conn:
        (err,) = conn.execute(select(s.IngestError)).all()
    assert err.path == str(copy.resolve()) and err.line == len(lines) and "truncated" in err.error
    assert f"{copy.resolve()}:{len(lines)}:" in first.errors[0]
    complete = [json.loads(x) for x in lines[:-1]]
    assert first.messages == sum(_is_message(r) for r in complete)
    with open(copy, "ab") as fh:
        fh.write(last[len(last) // 2 :])
    second = ingest_ok(engine, plugins, [copy])
    assert second.files[0].status == "grown" and second.messages == 1
    with engine.connect() as conn:
        assert conn.execute(
            select(s.Message).where(s.Message.native_id == json.loads(last)["uuid"])
        ).one()
    assert_matches_raw(engine, [copy])


def test_appending_records_adds_exactly_them(cc, tmp_path, engine, plugins):
    src = cc / BIG_IMAGES
    lines = src.read_bytes().splitlines(keepends=True)
    cut = 400
    copy = tmp_path / src.name
    copy.write_bytes(b"".join(lines[:cut]))
    ingest_ok(engine, plugins, [copy])
    before = _table_counts(engine)["messages"]
    with open(copy, "ab") as fh:
        fh.write(b"".join(lines[cut:]))
    grown = ingest_ok(engine, plugins, [copy])
    added = sum(_is_message(json.loads(x)) for x in lines[cut:])
    assert grown.files[0].status == "grown" and grown.messages == added
    assert _table_counts(engine)["messages"] == before + added
    assert_matches_raw(engine, [copy])


# -- file edits (shell commands: tests/test_shell_edits.py) ------------------------------------
def test_structured_and_mcp_edits():
    assert tool_edits("NotebookEdit", {"notebook_path": "n.ipynb"}) == (True, ["n.ipynb"])
    assert tool_edits("MultiEdit", {"file_path": "/a.py", "edits": []}) == (True, ["/a.py"])
    assert tool_edits("mcp__github__create_or_update_file", {"path": "README.md"}) == (
        True,
        ["README.md"],
    )
    assert tool_edits("mcp__github__push_files", {"files": [{"path": "a"}, {"path": "b"}]}) == (
        True,
        ["a", "b"],
    )
    assert tool_edits("Read", {"file_path": "/a.py"}) == (False, None)


def test_bash_edits_in_a_real_session(cc, engine, plugins):
    ingest_ok(engine, plugins, [cc / BIG_IMAGES])
    with engine.connect() as conn:
        calls = conn.execute(select(s.ToolCall).where(s.ToolCall.name == "Bash")).all()
    edits = {p for c in calls if c.is_file_edit for p in (c.edited_paths or [])}
    assert "~/.config/omarchy/branding/screensaver.txt" in edits
    assert not any(p.startswith("/dev/") or p.isdigit() for p in edits)
    assert 0 < sum(c.is_file_edit for c in calls) < len(calls) // 3


def test_fields_of_odd_types_never_reach_the_store(tmp_path, engine, plugins):
    recs = [
        _assistant(
            "a1",
            ["not", "a", "uuid"],
            [
                {"type": "text", "text": {"a": 1}},
                {"type": "tool_use", "id": 7, "name": ["Edit"], "input": "x"},
            ],
            msg_id={"weird": True},
        ),
        _user(12, None, "uuid is a number: not a message"),
        _user(
            "u1",
            "a1",
            [{"type": "tool_result", "tool_use_id": 7, "content": [{"type": "text", "text": 3}]}],
            cwd=["/x"],
            gitBranch=5,
        ),
        {"type": "assistant", "uuid": "a2", "sessionId": {"x": 1}, "message": "not a dict"},
        _assistant("a3", "u1", "plain string content", msg_id="m3", output="12"),
    ]
    path = write_jsonl(tmp_path / f"{SID}.jsonl", recs)
    ingest_ok(engine, plugins, [path])
    with engine.connect() as conn:
        msgs = {m.native_id: m for m in conn.execute(select(s.Message)).all()}
        bill = conn.execute(select(s.TokenUsage).where(s.TokenUsage.key == "m3")).one()
        thread = conn.execute(select(s.Thread)).one()
    assert sorted(msgs) == ["a1", "a3", "u1"]
    assert msgs["a1"].parent_native_id is None and msgs["a1"].blocks[0] == {
        "kind": "text",
        "text": '{"a":1}',
    }
    assert msgs["a1"].usage_key == '{"weird":true}' and msgs["u1"].blocks[0]["tool_use_id"] == "7"
    assert msgs["a3"].blocks == [{"kind": "text", "text": "plain string content"}]
    assert bill.output_tokens == 0 and thread.cwd == "/p" and thread.native_id == SID
