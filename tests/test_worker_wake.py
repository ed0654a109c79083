"""The session worker waits beside the user's agent for the whole session: it waits on a pipe
each hook event writes a byte into, not by looking at its spool many times a second, and it
looks at a lagging transcript less and less often. What is asserted is how often it looks,
never how long anything took."""

from __future__ import annotations

import asyncio
import json
import os
import time

from auditor.audit.run_types import RunConfig
from auditor.live import fast_path as live
from auditor.live import worker as worker_module
from auditor.live.worker import Worker, WorkerOptions


def counting(worker: Worker, name: str) -> list[float]:
    """Record when `worker.name` is called (its calls go on as before)."""
    calls: list[float] = []
    method = getattr(worker, name)

    def counted(*args, **kwargs):
        calls.append(time.monotonic())
        return method(*args, **kwargs)

    setattr(worker, name, counted)
    return calls


def event(name: str) -> bytes:
    return json.dumps({"hook_event_name": name, "session_id": "s", "env": live.env_mark()}).encode()


def test_an_idle_worker_looks_when_a_hook_wakes_it(tmp_path, engine, plugins, monkeypatch):
    # Left to itself the worker would look again only after a minute: only the wake-up can
    # make it read the event in time.
    monkeypatch.setattr(worker_module, "LOOK", 60.0)
    sdir = tmp_path / "spool"
    sdir.mkdir()
    worker = Worker(str(sdir), "claude-code", engine, plugins, RunConfig(), log=lambda _: None)
    looks = counting(worker, "_read_events")

    async def session() -> None:
        served = asyncio.create_task(worker.serve())
        await asyncio.sleep(1.0)  # idle: it looked once, at its start
        idle_looks = len(looks)
        live._append(str(sdir / live.EVENTS), event("SessionEnd") + b"\n")
        await asyncio.wait_for(served, 30)
        assert idle_looks == 1
        assert worker.ending == "the session ended"

    asyncio.run(session())
    assert len(looks) <= 3
    assert (sdir / live.WAKE).is_fifo()


def test_a_hook_wakes_no_one_when_no_worker_listens(tmp_path):
    live.wake(str(tmp_path))  # no pipe: nothing happens
    os.mkfifo(tmp_path / live.WAKE)
    live.wake(str(tmp_path))  # a pipe nobody reads: the hook does not wait for a reader
    plain = tmp_path / "other"
    plain.mkdir()
    (plain / live.WAKE).write_text("kept\n")
    live.wake(str(plain))  # a file that is no pipe is left as it was
    assert (plain / live.WAKE).read_text() == "kept\n"


def test_a_lagging_transcript_is_looked_at_less_and_less_often(
    tmp_path, engine, plugins, monkeypatch
):
    worker = Worker(
        str(tmp_path / "spool"),
        "claude-code",
        engine,
        plugins,
        RunConfig(),
        WorkerOptions(lag=3.0),
        log=lambda _: None,
    )
    sizes: list[float] = []
    size = worker_module._size

    def measured(path):
        sizes.append(time.monotonic())
        return size(path)

    monkeypatch.setattr(worker_module, "_size", measured)
    transcript = tmp_path / "s.jsonl"
    transcript.write_text("")  # the event's call never shows up in it
    stop = {"hook_event_name": "PostToolUse", "tool_use_id": "toolu_never"}
    assert asyncio.run(worker._wait_for("s", stop, str(transcript))) is None
    # Every WATCH seconds over the 3 s it waits would be 60 looks: the pauses grow to
    # WATCH_MOST, a dozen looks then one every WATCH_MOST.
    assert len(sizes) <= 3.0 / worker_module.WATCH_MOST + 8
    gaps = [b - a for a, b in zip(sizes, sizes[1:], strict=False)]
    assert max(gaps) >= worker_module.WATCH_MOST * 0.9
