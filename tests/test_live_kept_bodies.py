"""The live worker holds a long session's tool outputs and large inputs in the store, not in
memory (issue 26): what it renders is byte for byte what the thread loaded whole renders, and
a body read back after the store changed is the one loaded, or the thread is loaded again.

Real sessions grow here as they did for the agent (their transcript written out a few lines at
a time, the worker reading each new part), as in `test_formatter_growing_thread`."""

from __future__ import annotations

import asyncio
import json
import re
import sys

import pytest
from auditor_plugins import formatter
from helpers.live import CC_SESSION, CODEX_ROLLOUT
from sqlalchemy import select

from auditor.audit.checkpoints import find_checkpoints, is_typed_user
from auditor.audit.run_types import RunConfig
from auditor.live import lookup
from auditor.live.worker import Worker
from auditor.model import SOURCE_COURSE_CORRECTION as CORRECTION
from auditor.model import Block
from auditor.store import kept_bodies
from auditor.store import schema as s
from auditor.store.threads import load_messages

pytestmark = [pytest.mark.corpus, pytest.mark.both_stores]

SESSIONS = [
    ("claude-code", "claude-code/marot-spotter/4d5611e5-241a-462a-8d15-5122611a9569.jsonl"),
    ("codex", CODEX_ROLLOUT),
    # 29 typed requests: its old turns' messages are compacted as it grows.
    (
        "claude-code",
        "claude-code/4thehalibit-omarchy-backup/-home-vwestberg-Claude/"
        "8fd119a6-9ab8-407b-810f-329cfb6153e0.jsonl",
    ),
]
STEPS = 40  # looks at the transcript as it grows
PART = 400  # lines of the long session read whole


def _thread(engine):
    with engine.connect() as conn:
        return conn.execute(select(s.Thread.__table__)).first()


def _away(messages) -> list:
    return [b for m in messages for b in m.blocks if isinstance(b, kept_bodies.AwayBlock)]


@pytest.mark.parametrize(
    ("agent", "session"), SESSIONS, ids=["claude-code", "codex", "claude-code-turns"]
)
def test_a_growing_session_renders_the_same_with_its_bodies_in_the_store(
    corpus, tmp_path, engine, plugins, agent, session
):
    lines = (corpus / session).read_bytes().splitlines(keepends=True)
    path = tmp_path / "session.jsonl"
    path.write_bytes(b"")
    worker = Worker(str(tmp_path / "spool"), agent, engine, plugins, RunConfig())
    worker.bodies.kept_bytes = 0  # each body read back from the store, none kept decoded
    formatter.forget()
    rendered, done = 0, -1
    step = -(-len(lines) // STEPS)
    for stop in range(step, len(lines) + step, step):
        with open(path, "ab") as out:
            out.writelines(lines[stop - step : stop])
        worker._ingest(str(path))
        thread = _thread(engine)
        if thread is None:
            continue
        messages = worker._messages(thread.id)
        whole = load_messages(engine, thread.id)  # every body decoded and held
        for cp in find_checkpoints(thread.id, messages, "every-inference"):
            if cp.index <= done:
                continue
            light = formatter.render(cp, thread, messages[: cp.index + 1], {})
            kept = formatter.render(cp, thread, whole[: cp.index + 1], {})
            assert light == kept, f"{session}: the checkpoint at message {cp.index}"
            rendered, done = rendered + 1, cp.index
    assert rendered > 20
    away = _away(worker._messages(thread.id))
    assert len(away) > 20, "the session's long bodies stay in the store"
    assert worker.bodies.reads > len(away) // 2, "and were read back to be rendered"
    # Held, an away block keeps in place of a body where to read it; read, it gives what the
    # store holds.
    assert all(kept_bodies._Row in map(type, _held_bodies(b)) for b in away)
    # The turns before the last two hold no body worth leaving in the store (their messages
    # compacted) but in what a person typed, which signals and the prompt read each time.
    held = worker._messages(thread.id)
    starts = [i for i, m in enumerate(held) if is_typed_user(m) or m.source_type == CORRECTION]
    old = held[: starts[-2]] if len(starts) > 1 else []
    assert not any(kept_bodies._compactable(m) for m in old)
    if len(starts) > 2:
        compacted = [m for m in old if kept_bodies._Row in _slot_types(m)]
        assert len(compacted) >= worker.bodies.compacted > 20
    for m in held:
        if is_typed_user(m):
            assert kept_bodies._Row not in _slot_types(m)
    assert [[b.as_json() for b in m.blocks] for m in worker._messages(thread.id)] == [
        [b.as_json() for b in m.blocks] for m in load_messages(engine, thread.id)
    ]


def _slot_types(message) -> set:
    return {type(v) for b in message.blocks for v in _held_bodies(b)}


def _held_bodies(block) -> tuple:
    """The values a block holds in its body slots."""
    return Block.text.__get__(block), Block.tool_input.__get__(block)


def _write(path, lines) -> None:
    path.write_bytes(b"".join(lines))


def test_a_body_read_back_after_the_transcript_was_rewritten_is_the_one_loaded(
    corpus, tmp_path, engine, plugins
):
    lines = (corpus / SESSIONS[0][1]).read_bytes().splitlines(keepends=True)[:PART]
    path = tmp_path / "session.jsonl"
    _write(path, lines)
    worker = Worker(str(tmp_path / "spool"), "claude-code", engine, plugins, RunConfig())
    worker._ingest(str(path))
    thread = _thread(engine)
    held = worker._messages(thread.id)
    away = _away(held)
    assert away, "the session has long tool outputs"
    loaded = [b.as_json() for m in load_messages(engine, thread.id) for b in m.blocks]
    ids_before = {m.id for m in held}
    # Another session's rows are stored after them: the file's rows stored again cannot take
    # their old ids back.
    lookup.ingest(engine, plugins, worker.format_name, str(corpus / CC_SESSION))

    # The client rewrites the file (a line before the bodies changes: the whole file is
    # stored again, under new row ids), and another process reads it into the store.
    first = json.loads(lines[0])
    first["timestamp"] = "2020-01-01T00:00:00.000Z"
    _write(path, [json.dumps(first).encode() + b"\n", *lines[1:]])
    worker.bodies.clear()
    done = lookup.ingest(engine, plugins, worker.format_name, str(path))
    assert done.rewritten == 1
    assert not ids_before & {m.id for m in load_messages(engine, thread.id)}

    # The messages held from before the rewrite still read their bodies, unchanged.
    assert [b.as_json() for m in held for b in m.blocks] == loaded


def test_a_body_changed_in_the_store_is_not_passed_off_as_the_one_loaded(
    corpus, tmp_path, engine, plugins
):
    lines = (corpus / SESSIONS[0][1]).read_bytes().splitlines(keepends=True)[:PART]
    path = tmp_path / "session.jsonl"
    _write(path, lines)
    worker = Worker(str(tmp_path / "spool"), "claude-code", engine, plugins, RunConfig())
    worker._ingest(str(path))
    thread = _thread(engine)
    held = worker._messages(thread.id)
    block = next(b for b in _away(held) if b.kind == "tool_result")
    words = re.search(r"[A-Za-z][A-Za-z0-9 _.-]{19}", block.text).group(0)
    # The transcript is rewritten with that output changed (in the lines holding it), and
    # stored again.
    changed = [
        line.replace(words.encode(), b"CHANGED-OUTPUT-TEXT!")
        if block.tool_use_id.encode() in line
        else line
        for line in lines
    ]
    assert changed != lines
    _write(path, changed)
    worker.bodies.clear()
    worker._ingest(str(path))
    with pytest.raises(kept_bodies.BodyChanged, match="load the thread again"):
        block.text  # noqa: B018 - reading it is the test
    # Loaded again, the thread holds the output the store holds now.
    fresh = worker._messages(thread.id)
    again = next(
        b
        for m in fresh
        for b in m.blocks
        if b.tool_use_id == block.tool_use_id and b.kind == "tool_result"
    )
    assert "CHANGED-OUTPUT-TEXT!" in again.text and words not in again.text


@pytest.mark.sqlite_only
def test_the_worker_s_store_connections_keep_a_small_page_cache(tmp_path):
    from auditor.live.worker import WORKER_PAGE_CACHE_KIB, small_page_cache
    from auditor.store.db import open_db

    engine = open_db(tmp_path / "a.db")
    with engine.connect() as conn:  # the store's own setting, for a cold ingest
        assert conn.exec_driver_sql("PRAGMA cache_size").scalar() == -65536
    small_page_cache(engine)
    with engine.connect() as one, engine.connect() as other:
        for conn in (one, other):
            assert conn.exec_driver_sql("PRAGMA cache_size").scalar() == -WORKER_PAGE_CACHE_KIB
    engine.dispose()


def test_a_checkpoint_whose_thread_changed_in_the_store_meanwhile_is_audited_as_stored(
    corpus, tmp_path, engine, plugins, monkeypatch
):
    from helpers.wire import Reply, Stub, gemini_response

    from auditor.audit.observer_audit import CheckpointNow
    from auditor.live.worker import _Audit, _Thread

    lines = (corpus / SESSIONS[0][1]).read_bytes().splitlines(keepends=True)[:PART]
    path = tmp_path / "session.jsonl"
    _write(path, lines)
    stub = Stub(Reply(200, gemini_response({"needsCorrection": False, "message": ""})))
    monkeypatch.setenv("GEMINI_API_KEY", "AIza-test")
    config = RunConfig(
        observer="gemini",
        observer_options={"base_url": stub.url, "max_retries": 0},
        gate={"min_tool_calls": 1},
    )
    said: list[str] = []
    worker = Worker(
        str(tmp_path / "spool"), "claude-code", engine, plugins, config, log=said.append
    )
    worker._ingest(str(path))
    thread = _thread(engine)
    held = worker._messages(thread.id)  # the thread as the worker keeps it between events
    cp = [
        c for c in find_checkpoints(thread.id, held, "every-inference") if c.index < len(held) - 1
    ][-1]
    result = next(
        b
        for m in reversed(held[: cp.index + 1])
        for b in m.blocks
        if isinstance(b, kept_bodies.AwayBlock) and b.kind == "tool_result"
    )
    words = re.search(r"[A-Za-z][A-Za-z0-9 _.-]{19}", result.text).group(0)
    audits = []
    real = CheckpointNow.audit

    async def audit(self, cp, thread, messages, note, deadline):
        if not audits:
            # Another process stores the transcript again, rewritten, after the worker
            # loaded the thread and before it renders the checkpoint.
            _write(
                path,
                [
                    line.replace(words.encode(), b"CHANGED-OUTPUT-TEXT!")
                    if result.tool_use_id.encode() in line
                    else line
                    for line in lines
                ],
            )
            worker.bodies.clear()
            formatter.forget()
            assert lookup.ingest(engine, plugins, worker.format_name, str(path)).rewritten == 1
        audits.append(messages)
        return await real(self, cp, thread, messages, note, deadline)

    monkeypatch.setattr(CheckpointNow, "audit", audit)
    event = {
        "hook_event_name": "PostToolUse",
        "session_id": thread.native_id,
        "tool_use_id": result.tool_use_id,
        "transcript_path": str(path),
    }
    asyncio.run(worker._audit_inner(thread.native_id, _Thread(), _Audit(event, 0, 1)))
    stub.close()

    assert len(audits) == 2, "audited again"
    assert audits[0][0] is held[0] and audits[1][0] is not held[0], "from the thread loaded again"
    assert any("changed in the store since it was loaded" in line for line in said)
    [request] = stub.log
    prompt = json.dumps(request)
    assert "CHANGED-OUTPUT-TEXT!" in prompt and json.dumps(words)[1:-1] not in prompt
    with engine.connect() as conn:
        runs = conn.execute(select(s.Run.status, s.Run.error).order_by(s.Run.id)).all()
    assert [r.status for r in runs] == ["failed", "done"]
    assert "changed in the store" in runs[0].error


def test_a_block_whose_body_is_in_the_store_equals_the_block_loaded_whole(
    corpus, tmp_path, engine, plugins
):
    lines = (corpus / SESSIONS[0][1]).read_bytes().splitlines(keepends=True)[:PART]
    path = tmp_path / "session.jsonl"
    _write(path, lines)
    worker = Worker(str(tmp_path / "spool"), "claude-code", engine, plugins, RunConfig())
    worker._ingest(str(path))
    thread = _thread(engine)
    held = worker._messages(thread.id)
    whole = load_messages(engine, thread.id)
    assert _away(held), "the session has long tool outputs"
    assert held == whole and whole == held  # either way round, bodies read back
    away = _away(held)[0]
    other = Block(**{**Block.as_json(away), "is_error": not away.is_error})
    assert away != other and other != away


def test_an_old_turn_changed_in_the_store_since_it_was_loaded_keeps_its_bodies(
    corpus, tmp_path, engine, plugins
):
    from sqlalchemy import update

    path = tmp_path / "session.jsonl"
    _write(path, (corpus / SESSIONS[2][1]).read_bytes().splitlines(keepends=True))
    worker = Worker(str(tmp_path / "spool"), "claude-code", engine, plugins, RunConfig())
    worker._ingest(str(path))
    thread = _thread(engine)
    held = kept_bodies.load_messages(engine, thread.id, worker.bodies)
    before = [[b.as_json() for b in m.blocks] for m in held]
    old = [m for m in held[: len(held) // 2] if kept_bodies._compactable(m)]
    changed = next(m for m in old if kept_bodies._Row not in _slot_types(m))
    # Another process stores that message again with another body, after it was loaded.
    blocks = [b.as_json() for b in changed.blocks]
    body = "text" if "text" in blocks[-1] else "tool_input"
    blocks[-1][body] = "CHANGED" if body == "text" else {"command": "CHANGED"}
    with engine.begin() as conn:
        conn.execute(update(s.Message).where(s.Message.id == changed.id).values(blocks=blocks))

    worker.bodies.compact(thread.id, held)
    assert kept_bodies._Row not in _slot_types(changed), "left as loaded"
    assert sum(kept_bodies._Row in _slot_types(m) for m in held) >= worker.bodies.compacted > 20
    worker.bodies.clear()  # each body read back from the store
    assert [[b.as_json() for b in m.blocks] for m in held] == before


def test_the_messages_held_take_no_room_beyond_what_they_hold(corpus, tmp_path, engine, plugins):
    path = tmp_path / "session.jsonl"
    _write(path, (corpus / SESSIONS[0][1]).read_bytes().splitlines(keepends=True)[: PART * 2])
    worker = Worker(str(tmp_path / "spool"), "claude-code", engine, plugins, RunConfig())
    worker._ingest(str(path))
    held = worker._messages(_thread(engine).id)
    # A message's list of blocks is as long as its blocks (one grown by appending takes room
    # for four).
    assert all(sys.getsizeof(m.blocks) == sys.getsizeof([None] * len(m.blocks)) for m in held)
    # A file edited again and again: each edit holds its path as the first one does.
    edited: dict[str, list[str]] = {}
    for m in held:
        for b in m.blocks:
            for p in b.edited_paths or ():
                edited.setdefault(p, []).append(p)
    again = [paths for paths in edited.values() if len(paths) > 1]
    assert again and all(p is paths[0] for paths in again for p in paths)


def test_a_copy_of_a_block_whose_body_is_in_the_store_holds_the_body(
    corpus, tmp_path, engine, plugins
):
    import copy

    path = tmp_path / "session.jsonl"
    _write(path, (corpus / SESSIONS[2][1]).read_bytes().splitlines(keepends=True))
    worker = Worker(str(tmp_path / "spool"), "claude-code", engine, plugins, RunConfig())
    worker._ingest(str(path))
    held = worker._messages(_thread(engine).id)
    away = _away(held)
    assert away and worker.bodies.compacted
    for block in away:
        for made in (copy.copy(block), copy.deepcopy(block)):
            assert type(made) is Block and made == block
            assert kept_bodies._Row not in map(type, _held_bodies(made))
