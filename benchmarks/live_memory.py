"""What the live worker holds for a session as it grows (issue 26), in one process, in a minute.

`benchmarks/live.py` measures the goal: a long session replayed through the installed hooks,
the worker's resident memory read from outside, ~30 minutes for the 16-copy replica. This
replays the same events (the same replica, the same order) through the worker's own steps in
this process, without hooks or observer: at each tool round and end of turn the transcript is
ingested, the thread's new rows are loaded onto those kept (`Worker._messages`: long bodies left
in the store), the checkpoint is found and planned and rendered as the worker does before it
calls the observer. What the worker keeps between events is what it keeps here.

Printed at 10%, 50% and 90% of the events and at the end: the transcript's size, the thread's
messages, the resident memory (after `malloc_trim`, so that freed pages count as freed); then
what it grew from 10% to 90% per MB of transcript (the quantity `live.py`'s goal bounds) and
per message, the CPU of an event at 10% and at 90% (medians of 40 events) and in all, and the
rows read back for their bodies. `--trace` adds Python's own allocations (tracemalloc, which
makes the run 2-3 times slower) and their growth by where they were made: the formatter's
units and calls, the messages held, the rest.

    python benchmarks/live_memory.py [--copies 16] [--trace] [--session FILE]
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import live  # noqa: E402 (the replica and its events, as the long benchmark makes them)

WINDOW = 40  # events timed around each mark


def rss_mb() -> float:
    """Resident memory, in MB, once the allocator has given back what it can."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:  # not glibc: read as it is
        pass
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def where(filename: str) -> str:
    if "formatter" in filename:
        return "formatter: units, calls, their renderings"
    if any(p in filename for p in ("kept_bodies", "model.py", "threads.py", "sqlalchemy")):
        return "messages held: rows, blocks"
    return "the rest"


def prepare(session: Path, copies: int, work: Path) -> None:
    """Write the replica and its events (`live.replay`'s) into `work`."""
    lines = live.replica(session.read_bytes().splitlines(keepends=True), copies)
    events = live.plan_events(lines)
    thens = [  # as `live.replay`: after a tool event the agent writes up to the next one
        (events[n + 1][0] - 1 if n + 1 < len(events) else len(lines))
        if name == "PostToolUse"
        else 0
        for n, (_, name, _) in enumerate(events)
    ]
    first = json.loads(next(x for x in lines if b'"sessionId"' in x))
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    (work / "replica.jsonl").write_bytes(b"".join(lines))
    plan = {"events": events, "thens": thens, "offsets": offsets, "session": first["sessionId"]}
    (work / "plan.json").write_text(json.dumps(plan))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default = Path(__file__).resolve().parents[2] / "shared" / "corpus" / live.SESSION
    ap.add_argument("--session", type=Path, default=default)
    ap.add_argument("--copies", type=int, default=16)
    ap.add_argument("--trace", action="store_true", help="Python's allocations too (slower)")
    ap.add_argument("--prepare", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.prepare:
        prepare(args.session, args.copies, args.prepare)
        return
    if not args.session.is_file():
        sys.exit(f"{args.session}: no such session (give one with --session)")
    work = Path(tempfile.mkdtemp(prefix="auditor-live-memory-"))
    # The replica is made in a process of its own: memory this one freed would be taken again
    # by what the worker keeps, unseen in its RSS.
    made = [sys.executable, __file__, "--session", str(args.session), "--copies", str(args.copies)]
    subprocess.run([*made, "--prepare", str(work)], check=True)
    plan = json.loads((work / "plan.json").read_text())
    events, thens, offsets = plan["events"], plan["thens"], plan["offsets"]
    session_id = plan["session"]
    replica = (work / "replica.jsonl").open("rb")
    os.environ["AUDITOR_DB"] = str(work / "store.db")
    from auditor.audit.checkpoint_plan import CheckpointPlanner
    from auditor.audit.run_types import RunConfig
    from auditor.live import lookup
    from auditor.live.worker import Worker, small_page_cache
    from auditor.plugins import get_plugin_manager
    from auditor.store.db import open_db

    engine = open_db(str(work / "store.db"))
    small_page_cache(engine)  # as `run_worker` sets up the worker's store
    plugins = get_plugin_manager()
    (work / "spool").mkdir()
    worker = Worker(str(work / "spool"), "claude-code", engine, plugins, RunConfig())
    planner = CheckpointPlanner(plugins, gate={"mode": "every-inference", "min_tool_calls": 1})
    transcript = work / "session.jsonl"
    out = transcript.open("wb")
    written = 0

    n = len(events)
    marks = {int(n * f): f for f in (0.1, 0.5, 0.9)} | {n - 1: 1.0}
    timed = {f: range(int(n * f) - WINDOW, int(n * f)) for f in (0.1, 0.9)}
    cpu: dict[float, list[float]] = {f: [] for f in timed}
    at: dict[float, tuple[float, int, float, int]] = {}
    snaps: dict[float, tracemalloc.Snapshot] = {}
    if args.trace:
        tracemalloc.start(1)
    began = time.process_time()
    for i, (upto, name, extra) in enumerate(events):
        upto = max(upto, thens[i])
        if upto > written:
            replica.seek(offsets[written])
            out.write(replica.read(offsets[upto] - offsets[written]))
            out.flush()
            written = upto
        if name in ("PostToolUse", "Stop"):
            t0 = time.process_time()
            worker._ingest(str(transcript))
            thread = lookup.find_thread(engine, "claude-code", session_id)
            assert thread is not None, "the replica's thread was not stored"
            messages = worker._messages(thread.id)
            if name == "Stop":
                cp = lookup.end_of_turn(thread.id, messages, extra["last_assistant_message"])
            else:
                cp = lookup.tool_round(thread.id, messages, extra["tool_use_id"])
            if cp is not None:
                with engine.connect() as conn:
                    planner.plan(conn, cp, thread, messages, render=True)
            took = (time.process_time() - t0) * 1000
            for f, span in timed.items():
                if i in span:
                    cpu[f].append(took)
        if i in marks:
            f = marks[i]
            gc.collect()
            count = len(worker._loaded[thread.id][0]) if worker._loaded else 0
            at[f] = (offsets[written] / 1e6, count, rss_mb(), i)
            line = f"{f:4.0%} of events ({i + 1}/{n}): transcript {at[f][0]:5.1f} MB, "
            line += f"{count:5d} messages, RSS {at[f][2]:6.1f} MB"
            if args.trace:
                snaps[f] = tracemalloc.take_snapshot()
                line += f", Python's allocations {tracemalloc.get_traced_memory()[0] / 1e6:5.1f} MB"
            print(line, flush=True)
    total = time.process_time() - began
    out.close()
    replica.close()

    (mb0, n0, rss0, _), (mb1, n1, rss1, _) = at[0.1], at[0.9]
    grew = rss1 - rss0
    print(
        f"RSS grew {grew:.1f} MB from 10% to 90% of the events, while the transcript grew "
        f"{mb1 - mb0:.1f} MB and the thread {n1 - n0} messages: {grew / (mb1 - mb0):.2f} MB per "
        f"MB of transcript (the goal of benchmarks/live.py: <= {live.RSS_PER_MB}), "
        f"{grew * 1e3 / (n1 - n0):.2f} KB per message"
    )
    per = ", ".join(f"at {f:.0%} {statistics.median(v):.1f} ms" for f, v in cpu.items() if v)
    print(f"CPU per audited event (medians of {WINDOW}): {per}; in all {total:.1f} s")
    print(f"rows read back for their bodies: {worker.bodies.reads}")
    if args.trace:
        parts: dict[str, dict[float, int]] = {}
        for f, snap in snaps.items():
            for stat in snap.statistics("filename"):
                part = parts.setdefault(where(stat.traceback[0].filename), {})
                part[f] = part.get(f, 0) + stat.size
        print("Python's allocations by where they were made, MB (10% -> 90%: KB per message):")
        for name, by in sorted(parts.items(), key=lambda kv: -kv[1].get(0.9, 0)):
            step = (by.get(0.9, 0) - by.get(0.1, 0)) / (n1 - n0) / 1e3
            sizes = "  ".join(f"{f:.0%} {by.get(f, 0) / 1e6:5.1f}" for f in (0.1, 0.5, 0.9))
            print(f"  {name:42s} {sizes}  ({step:+.2f} KB per message)")
    worker.bodies.close()
    engine.dispose()
    for p in sorted(work.rglob("*"), reverse=True):
        p.rmdir() if p.is_dir() else p.unlink()
    work.rmdir()


if __name__ == "__main__":
    main()
