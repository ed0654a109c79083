"""The Stop hook's own overhead: what the agent waits for beyond the observer call.

For real Claude Code sessions of the corpus, already ingested except for their last turn, the
last turn is appended to the transcript and `auditor hook claude-code` runs as Claude Code runs
it (a process, the hook input on stdin). The observer is the claude backend against a local
server speaking the Anthropic wire format, answering at once with a correction. Each run starts
from a copy of the same pre-ingested store and transcript, so every run reads the same new tail.

Reported, as medians over --runs:
- wall: the whole process, from start to exit (interpreter, imports, everything);
- observer: the observer step as the hook times it (the backend's check, which imports its SDK,
  and the HTTP call);
- overhead = wall - observer: the hook's own cost. Goal: < 150 ms;
- the in-process steps (open, ingest of the new tail, load, gate+format, deliver), and what is
  left for the interpreter and imports;
- a stop the gate lets go (no observer at all), the common case;
- the CPU time of the process (user + system), which other work on the machine inflates less
  than wall time.

The sessions: the largest real one (3.2 MB), and a 5.9 MB one made of two real sessions of the
same project put end to end under one session id (the largest single file is 3.2 MB).

    python benchmarks/hook.py [--corpus DIR] [--runs 15]
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

from wire_stubs import Reply, Stub, anthropic_response  # noqa: E402 (found through sys.path above)

SPOTTER = "claude-code/marot-spotter"
BIG = "4d5611e5-241a-462a-8d15-5122611a9569"
OTHER = "ae4a77f8-aedd-4bc1-888f-c94edc91af04"
STEP = re.compile(r"(\w[\w+]*) (\d+) ms")


def auditor_argv() -> list[str]:
    script = Path(sys.executable).parent / "auditor"
    return (
        [str(script)]
        if script.is_file()
        else [sys.executable, "-c", "from auditor.cli import main; main()"]
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=ROOT.parent / "shared" / "corpus")
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
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
        for name, source in build_sessions(args.corpus, work).items():
            case = prepare(name, source, work)
            one_run(case, work, stub, -1, [])  # warm the file cache and the bytecode
            audited = [one_run(case, work, stub, i, []) for i in range(args.runs)]
            report(f"{name}, audited stop", case, audited, blocked=True)
            quiet = [
                one_run(case, work, stub, i, ["--min-tool-calls", "100000"])
                for i in range(args.runs)
            ]
            report(f"{name}, stop the gate lets go", case, quiet, blocked=False)
    stub.close()
    print(
        f"\nload average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; python {sys.version.split()[0]}"
    )


if __name__ == "__main__":
    main()
