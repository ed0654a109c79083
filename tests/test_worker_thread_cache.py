"""The session worker keeps each thread's messages between hook events and loads only the rows
stored since (issue 26: an event's cost must not grow with the session). What it hands the
audit must be exactly what loading the thread whole gives: as the transcript grows, and when a
rewritten transcript is read again under new row ids."""

from __future__ import annotations

import pytest
from helpers.live import CC_SESSION, append_lines, copy_lines
from sqlalchemy import select

from auditor.audit.run_types import RunConfig
from auditor.live.worker import Worker
from auditor.store import schema as s
from auditor.store.threads import load_messages

pytestmark = [pytest.mark.corpus, pytest.mark.both_stores]


def thread_id(engine) -> int:
    with engine.connect() as conn:
        return conn.execute(select(s.Thread.id).where(s.Thread.agent == "claude-code")).scalar_one()


def worker_on(corpus, tmp_path, engine, plugins, lines: int):
    """A worker that has read the first `lines` lines of the session's transcript: the
    transcript's source, its copy, the worker and the thread's id."""
    src = corpus / CC_SESSION
    path = copy_lines(src, tmp_path / "s.jsonl", lines)
    worker = Worker(str(tmp_path / "spool"), "claude-code", engine, plugins, RunConfig())
    worker._ingest(str(path))
    return src, path, worker, thread_id(engine)


def test_worker_loads_a_growing_thread_the_same_as_a_whole_load(corpus, tmp_path, engine, plugins):
    src, path, worker, tid = worker_on(corpus, tmp_path, engine, plugins, 10)
    first = worker._messages(tid)
    assert first == load_messages(engine, tid) and first
    for start, stop in ((10, 20), (20, 29)):
        append_lines(path, src, start, stop)
        worker._ingest(str(path))
        grown = worker._messages(tid)
        assert grown == load_messages(engine, tid)
        assert grown[: len(first)] == first and len(grown) > len(first)
        first = grown


def test_worker_reloads_a_thread_whose_transcript_was_rewritten(corpus, tmp_path, engine, plugins):
    src, path, worker, tid = worker_on(corpus, tmp_path, engine, plugins, 20)
    before = worker._messages(tid)
    copy_lines(src, path, 12)  # the file rewritten shorter: read again from its start
    append_lines(path, src, 14, 25)
    worker._ingest(str(path))
    after = worker._messages(tid)
    assert after == load_messages(engine, tid)
    assert [m.id for m in after] != [m.id for m in before]


def test_worker_reloads_a_thread_another_ingest_rewrote(corpus, tmp_path, engine, plugins):
    # Another process (the Stop hook's own audit, `auditor ingest`) read the rewritten file:
    # the worker learns it only from the stored rows, not from its own ingest's result.
    from auditor.ingest.ingester import ingest

    src, path, worker, tid = worker_on(corpus, tmp_path, engine, plugins, 20)
    before = worker._messages(tid)
    copy_lines(src, path, 8)
    append_lines(path, src, 14, 30)
    assert ingest(engine, plugins, [path]).rewritten == 1
    after = worker._messages(tid)
    assert after == load_messages(engine, tid)
    assert [m.native_id for m in after] != [m.native_id for m in before]
    append_lines(path, src, 30, 40)
    worker._ingest(str(path))
    assert worker._messages(tid) == load_messages(engine, tid)


def test_a_stop_and_the_next_prompt_read_together_leave_the_worker_free(tmp_path, engine, plugins):
    # On a loaded machine the worker can read a Stop and the user's next prompt in one look at
    # the events: the stop's audit is cancelled before its task ever ran. The worker must not
    # wait for it forever (it would audit nothing more, and never exit).
    import asyncio

    (tmp_path / "spool").mkdir()
    worker = Worker(str(tmp_path / "spool"), "claude-code", engine, plugins, RunConfig())
    stop = {"hook_event_name": "Stop", "session_id": "s1", "thread": "s1"}
    prompt = {"hook_event_name": "UserPromptSubmit", "session_id": "s1", "typed": True}

    async def read_together():
        worker.handle([(stop, 0, 100), (prompt, 100, 200)])
        await asyncio.sleep(0.05)
        return worker.threads["s1"].current, worker.done

    current, done = asyncio.run(read_together())
    assert current is None
    assert done == {"s1": 100}


def half_written(path, src, line: int) -> bytes:
    """Append the first half of line `line` (0-based) of `src` to `path`, as an agent caught
    mid-write leaves it; return the rest of that line."""
    with open(src, "rb") as fh:
        whole = next(x for i, x in enumerate(fh) if i == line)
    with open(path, "ab") as out:
        out.write(whole[: len(whole) // 2])
    return whole[len(whole) // 2 :]


def test_worker_keeps_a_thread_whose_last_line_was_caught_half_written(
    corpus, tmp_path, engine, plugins
):
    # The agent writes its transcript while the worker reads it: a read that ends in a line
    # without its end is a failed read of that line (it is read again at the next event), not
    # a rewrite. The messages loaded before stay loaded: a whole load at such events gave the
    # formatter a new thread state each time, the old ones kept beside it.
    src, path, worker, tid = worker_on(corpus, tmp_path, engine, plugins, 20)
    first = worker._messages(tid)
    rest = half_written(path, src, 20)
    assert worker._ingest(str(path)).failed == 1
    assert worker._messages(tid)[0] is first[0]
    with open(path, "ab") as out:
        out.write(rest)
    append_lines(path, src, 21, 30)
    worker._ingest(str(path))
    grown = worker._messages(tid)
    assert grown == load_messages(engine, tid) and len(grown) > len(first)
    assert all(a is b for a, b in zip(grown, first))


def test_worker_reloads_a_rewritten_thread_even_when_its_last_line_is_half_written(
    corpus, tmp_path, engine, plugins
):
    src, path, worker, tid = worker_on(corpus, tmp_path, engine, plugins, 20)
    before = worker._messages(tid)
    copy_lines(src, path, 12)  # rewritten shorter, then caught mid-line
    append_lines(path, src, 14, 25)
    half_written(path, src, 25)
    done = worker._ingest(str(path))
    assert done.failed == 1 and done.rewritten == 0  # the re-read says "failed"
    after = worker._messages(tid)
    assert after == load_messages(engine, tid)
    assert [m.id for m in after] != [m.id for m in before]
