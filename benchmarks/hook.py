"""What a hook event costs the agent: the non-blocking hooks, and the synchronous Stop hook.

The figure that matters (issue 12): a hook runs after every tool call, so an event with
nothing to deliver must cost next to nothing. On a real 5.9 MB Claude Code session (two real
sessions of one project put end to end under one session id), already in the store:

- the median wall time of `auditor hook claude-code` for a `PostToolUse` and for a `Stop` with
  nothing to deliver (the session's worker running, as it is during a session), and of a bare
  `python -c pass` start of the same interpreter measured in the same rounds; reported as a
  ratio to that start (goal <= 4x); the same events through `--sync` (the hook as it was: it
  reads the tail into the store and gates the turn itself) for comparison;
- with a stand-in observer that takes 20 s to answer: an audited stop, ten tool rounds and a
  prompt while the call is in flight; the slowest event's wall time (goal < 0.5 s).

`--sync-detail` adds the former report of the synchronous Stop hook (its steps, an audited
stop and one the gate lets go, on the 3.2 MB and 5.9 MB sessions).

    python benchmarks/hook.py [--corpus DIR] [--runs 21] [--sync-detail]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from helpers.wire import Reply, Stub, anthropic_response  # noqa: E402 (found through sys.path above)

SPOTTER = "claude-code/marot-spotter"
BIG = "4d5611e5-241a-462a-8d15-5122611a9569"
OTHER = "ae4a77f8-aedd-4bc1-888f-c94edc91af04"
STEP = re.compile(r"(\w[\w+]*) (\d+) ms")


def auditor_argv() -> list[str]:
    script = Path(sys.executable).parent / "auditor"
    return (
        [str(script)]
        if script.is_file()
        else [sys.executable, "-c", "from auditor.cli.main import main; main()"]
    )


def last_turn(lines: list[bytes]) -> tuple[int, int]:
    """(start, end) line indexes of the last turn: from the last user message that is not a tool
    result, to the agent's last text message (inclusive); the hook fires right after it."""
    end = start = None
    for i in range(len(lines) - 1, -1, -1):
        rec = json.loads(lines[i])
        msg = rec.get("message") or {}
        content = msg.get("content")
        if end is None:
            if (
                rec.get("type") == "assistant"
                and isinstance(content, list)
                and any(b.get("type") == "text" and b.get("text", "").strip() for b in content)
            ):
                end = i
            continue
        if rec.get("type") == "user" and not (
            isinstance(content, list)
            and content
            and all(b.get("type") == "tool_result" for b in content)
        ):
            start = i
            break
    return start, end


def build_sessions(corpus: Path, work: Path) -> dict[str, Path]:
    real = corpus / SPOTTER / f"{BIG}.jsonl"
    other = (corpus / SPOTTER / f"{OTHER}.jsonl").read_bytes().replace(OTHER.encode(), BIG.encode())
    joined = work / "joined" / f"{BIG}.jsonl"
    joined.parent.mkdir(parents=True)
    joined.write_bytes(other + real.read_bytes())
    return {"real 3.2 MB": real, "joined 5.9 MB": joined}


def prepare(name: str, source: Path, work: Path) -> dict:
    """Ingest the session up to its last turn into a base store; return what each run needs."""
    lines = source.read_bytes().splitlines(keepends=True)
    start, end = last_turn(lines)
    base = work / name.replace(" ", "_")
    base.mkdir()
    # The transcript keeps one path across runs: the store knows a file by its path.
    prefix = base / "live" / f"{BIG}.jsonl"
    prefix.parent.mkdir()
    prefix.write_bytes(b"".join(lines[:start]))
    db = base / "base.db"
    env = {**os.environ, "AUDITOR_DB": str(db)}
    subprocess.run(auditor_argv() + ["ingest", "-q", str(prefix)], check=True, env=env)
    with sqlite3.connect(db) as conn:  # fold the WAL in, so a copy of the file is the whole store
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    tail = b"".join(lines[start : end + 1])
    final = json.loads(lines[end])["message"]["content"]
    text = next(b["text"] for b in final if b.get("type") == "text")
    return {
        "prefix": prefix,
        "head": prefix.read_bytes(),
        "db": db,
        "tail": tail,
        "text": text,
        "size": len(b"".join(lines[: end + 1])),
        "tail_size": len(tail),
        "tail_lines": end + 1 - start,
    }


def one_run(case: dict, work: Path, stub: Stub, i: int, extra: list[str]) -> dict:
    run_dir = work / f"run{i}"
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir()
    db = run_dir / "a.db"
    shutil.copyfile(case["db"], db)
    transcript = case["prefix"]
    transcript.write_bytes(case["head"] + case["tail"])  # the last turn, as Claude Code wrote it
    payload = json.dumps(
        {
            "session_id": BIG,
            "transcript_path": str(transcript),
            "cwd": "/home/u/projects/spotter",
            "hook_event_name": "Stop",
            "stop_hook_active": False,
            "last_assistant_message": case["text"],
        }
    )
    env = {
        **os.environ,
        "AUDITOR_DB": str(db),
        "ANTHROPIC_API_KEY": "sk-ant-bench",
        "AUDITOR_CONFIG": str(run_dir / "none.toml"),
    }
    argv = auditor_argv() + [
        "hook",
        "claude-code",
        "--sync",
        "--observer",
        "claude",
        "--base-url",
        stub.url,
        "-v",
        *extra,
    ]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(argv, input=payload, capture_output=True, text=True, env=env, check=False)
    wall = (time.perf_counter() - started) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000
    line = done.stderr.strip().splitlines()[-1]
    steps = {k: int(v) for k, v in STEP.findall(line)}
    return {"wall": wall, "cpu": cpu, "stdout": done.stdout, "line": line, **steps}


def median(values) -> float:
    return statistics.median(values) if values else float("nan")


def report(name: str, case: dict, runs: list[dict], blocked: bool) -> None:
    wall = median([r["wall"] for r in runs])
    observer = median([r.get("observer", 0) for r in runs])
    overhead = median([r["wall"] - r.get("observer", 0) for r in runs])
    inside = median([r.get("total", 0) - r.get("observer", 0) for r in runs])
    steps = ["open", "ingest", "load", "gate+format", "deliver"]
    print(
        f"\n{name}: {case['size'] / 1e6:.1f} MB session, last turn {case['tail_lines']} lines / "
        f"{case['tail_size'] / 1e3:.0f} kB; {len(runs)} runs; outcome: {runs[-1]['line'].split(' (')[0]}"
    )
    if blocked:
        assert all(r["stdout"].startswith('{"decision": "block"') for r in runs), runs[-1]
    print(
        f"  wall {wall:.0f} ms = observer {observer:.0f} ms + overhead {overhead:.0f} ms "
        f"({'meets' if overhead < 150 else 'misses'} the 150 ms goal); "
        f"CPU time of the whole process {median([r['cpu'] for r in runs]):.0f} ms"
    )
    print(
        "  in process: "
        + ", ".join(f"{k} {median([r.get(k, 0) for r in runs]):.0f}" for k in steps)
        + f" ms; sum {inside:.0f} ms; interpreter + imports {overhead - inside:.0f} ms"
    )


def timed(argv: list[str], stdin: str, env: dict) -> tuple[float, subprocess.CompletedProcess]:
    started = time.perf_counter()
    done = subprocess.run(argv, input=stdin, capture_output=True, text=True, env=env, check=False)
    return (time.perf_counter() - started) * 1000, done


def event_payload(name: str, transcript: Path, text: str, **extra) -> str:
    data = {
        "session_id": BIG,
        "transcript_path": str(transcript),
        "cwd": "/home/u/projects/spotter",
        "permission_mode": "default",
        "hook_event_name": name,
    }
    if name == "PostToolUse":
        data.update(
            tool_name="Bash",
            tool_input={"command": "pytest -q"},
            tool_response={"stdout": "12 passed\n" * 40, "stderr": "", "interrupted": False},
            tool_use_id="toolu_bench",
        )
    elif name in ("Stop", "SubagentStop"):
        data.update(stop_hook_active=False, last_assistant_message=text)
    elif name == "UserPromptSubmit":
        data["prompt"] = "go on"
    data.update(extra)
    return json.dumps(data)


def stop_workers(state: Path) -> None:
    """End the session workers this benchmark started (their pids are in worker.lock)."""
    for lock in state.rglob("worker.lock"):
        try:
            os.kill(int(lock.read_text().split()[0]), 15)
        except (ValueError, IndexError, OSError):
            pass


def events_benchmark(corpus: Path, runs: int, work: Path) -> None:
    sessions = build_sessions(corpus, work)
    joined = sessions["joined 5.9 MB"]
    transcript = work / "events" / "live" / f"{BIG}.jsonl"
    transcript.parent.mkdir(parents=True)
    shutil.copyfile(joined, transcript)
    lines = transcript.read_bytes().splitlines()
    _, end = last_turn(lines)
    final = json.loads(lines[end])["message"]["content"]
    text = next(b["text"] for b in final if b.get("type") == "text")
    db = work / "events" / "a.db"
    state = work / "events" / "state"
    # Bytecode written, as an installed package has it: with PYTHONDONTWRITEBYTECODE every
    # event would compile the checkout's code again.
    env = {
        **{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
        "AUDITOR_DB": str(db),
        "AUDITOR_STATE_DIR": str(state),
        "ANTHROPIC_API_KEY": "sk-ant-bench",
        "AUDITOR_CONFIG": str(work / "none.toml"),
        "AUDITOR_WORKER_IDLE": "60",
    }
    subprocess.run(auditor_argv() + ["ingest", "-q", str(transcript)], check=True, env=env)
    quiet = [
        "--observer",
        "claude",
        "--base-url",
        "http://127.0.0.1:9",
        "--min-tool-calls",
        "100000",
    ]
    hook = auditor_argv() + ["hook", "claude-code", *quiet]
    post = event_payload("PostToolUse", transcript, text)
    stop = event_payload("Stop", transcript, text)
    timed(hook, post, env)  # starts the session's worker, as the session's first event does
    time.sleep(3)
    figures: dict[str, list[float]] = {
        k: [] for k in ("pass", "bare", "post", "stop", "post-sync", "stop-sync")
    }
    outputs = set()
    for i in range(runs):
        figures["pass"].append(timed([sys.executable, "-c", "pass"], "", env)[0])
        figures["bare"].append(timed([sys.executable, "-S", "-c", "pass"], "", env)[0])
        for key, payload in (("post", post), ("stop", stop)):
            took, done = timed(hook, payload, env)
            figures[key].append(took)
            outputs.add(done.stdout)
        if i < max(3, runs // 3):  # the synchronous hook is slow: fewer rounds
            for key, payload in (("post-sync", post), ("stop-sync", stop)):
                figures[key].append(timed(hook + ["--sync"], payload, env)[0])
    assert outputs == {""}, outputs  # nothing was due, nothing was handed over
    base = median(figures["pass"])
    print(
        f"\nhook events with nothing to deliver, {len(lines)} lines / "
        f"{transcript.stat().st_size / 1e6:.1f} MB session in the store, its worker running; "
        f"medians of {runs} rounds (synchronous: {len(figures['post-sync'])})"
    )
    print(
        f"  python -c pass            {base:7.1f} ms   1.0x  (the baseline: the hook's interpreter)"
    )
    bare = median(figures["bare"])
    print(
        f"  python -S -c pass         {bare:7.1f} ms {bare / base:5.1f}x  (no site-packages at all)"
    )
    for key, label in (
        ("post", "PostToolUse"),
        ("stop", "Stop"),
        ("post-sync", "PostToolUse --sync"),
        ("stop-sync", "Stop --sync"),
    ):
        m = median(figures[key])
        goal = (
            ""
            if key.endswith("sync")
            else f"  ({'meets' if m / base <= 4 else 'misses'} the 4x goal)"
        )
        print(f"  {label:<25} {m:7.1f} ms {m / base:5.1f}x{goal}; {m / bare:.1f}x python -S")
    stop_workers(state)

    # A hung observer: every event still returns at once.
    slow = Stub(
        Reply(
            200,
            anthropic_response({"needsCorrection": True, "message": "Run the suite."}),
            delay=20,
        )
    )
    state2 = work / "events" / "state-slow"
    db2 = work / "events" / "b.db"
    shutil.copyfile(db, db2)
    env2 = {**env, "AUDITOR_STATE_DIR": str(state2), "AUDITOR_DB": str(db2)}
    audited = auditor_argv() + [
        "hook",
        "claude-code",
        "--observer",
        "claude",
        "--base-url",
        slow.url,
    ]
    walls = [timed(audited, event_payload("Stop", transcript, text), env2)[0]]
    deadline = time.monotonic() + 30
    while not slow.log and time.monotonic() < deadline:
        time.sleep(0.1)
    for _ in range(10):
        walls.append(timed(audited, post, env2)[0])
    walls.append(timed(audited, event_payload("UserPromptSubmit", transcript, text), env2)[0])
    walls.append(timed(audited, stop, env2)[0])
    print(
        f"\nwith a 20 s stand-in observer (call under way: {bool(slow.log)}): an audited Stop, "
        f"10 PostToolUse, a UserPromptSubmit, a Stop: slowest {max(walls):.0f} ms, median "
        f"{median(walls):.0f} ms ({'meets' if max(walls) < 500 else 'misses'} the 0.5 s goal)"
    )
    time.sleep(2)
    stop_workers(state2)
    cancelled = (
        sqlite3.connect(db2)
        .execute("select status, latency_ms from verdicts order by id desc limit 1")
        .fetchone()
    )
    print(f"  the call in flight when the user wrote: {cancelled}")
    slow.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--corpus",
        type=Path,
        default=Path(os.environ.get("AUDITOR_SHARED", ROOT.parent / "shared")) / "corpus",
    )
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--sync-detail", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="auditor-hook-bench-") as tmp:
        events_benchmark(args.corpus, args.runs, Path(tmp))
    if args.sync_detail:
        sync_detail(args.corpus, max(3, args.runs // 2))
    print(
        f"\nload average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; python {sys.version.split()[0]}"
    )


def sync_detail(corpus: Path, runs: int) -> None:
    stub = Stub(
        Reply(
            200,
            anthropic_response(
                {"needsCorrection": True, "message": "Run the full suite before saying it passes."}
            ),
        )
    )
    with tempfile.TemporaryDirectory(prefix="auditor-hook-bench-") as tmp:
        work = Path(tmp)
        for name, source in build_sessions(corpus, work).items():
            case = prepare(name, source, work)
            one_run(case, work, stub, -1, [])  # warm the file cache and the bytecode
            audited = [one_run(case, work, stub, i, []) for i in range(runs)]
            report(f"{name}, audited stop (--sync)", case, audited, blocked=True)
            quiet = [
                one_run(case, work, stub, i, ["--min-tool-calls", "100000"]) for i in range(runs)
            ]
            report(f"{name}, stop the gate lets go (--sync)", case, quiet, blocked=False)
    stub.close()


if __name__ == "__main__":
    main()
