"""Crash safety of ingest: SIGKILL it at random points, resume, compare with a clean ingest.

Builds a copy of the corpus with fresh ids (--target-mb), ingests it once cleanly, then ingests
it again into a second store, killing `auditor ingest` with SIGKILL at --kills random points
(each resumed run is killed again) before letting the last run finish. Then `threads --json`
and `run --dry-run --json --since 2000-01-01` of both stores must be equal. Prints the figures
as JSON: size, kills that landed while ingest was running, threads that differ, and the dry
run's checkpoints / gated-in of both stores.

    python benchmarks/ingest_crash.py [--corpus DIR] [--target-mb 300] [--kills 12] [--seed 1]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
UUID = re.compile(rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def copy_with_fresh_ids(sources: list[Path], corpus: Path, dest: Path, copy: int) -> None:
    """Copy `sources` (files under `corpus`) to `dest`, each UUID's first group set to `copy`."""
    prefix = f"{copy:08x}".encode()

    def fresh(m: re.Match) -> bytes:
        return prefix + m.group(0)[8:]

    for src in sources:
        name = UUID.sub(fresh, src.relative_to(corpus).as_posix().encode()).decode()
        out = dest / f"copy{copy:03d}" / name
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(UUID.sub(fresh, src.read_bytes()))


def ingest_cmd(db: Path, root: Path, commit_seconds: float | None = None) -> list[str]:
    """`auditor ingest` in a child process; `commit_seconds` shortens ingest's commit groups."""
    code = "from auditor.cli.main import main; main()"
    if commit_seconds is not None:
        code = (
            f"import auditor.ingest.ingester as i; i.COMMIT_SECONDS = {commit_seconds!r}; " + code
        )
    return [sys.executable, "-c", code, "--db", str(db), "ingest", "-q", str(root)]


def auditor(db: Path, *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "auditor", "--db", str(db), *args],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"auditor {' '.join(args)} exited {proc.returncode}: {proc.stderr}")
    return proc.stdout


def snapshot(db: Path) -> dict:
    """What a user sees of the store: the threads listing and the dry run over all time."""
    threads = json.loads(auditor(db, "threads", "--json"))
    for row in threads:
        row.pop("id")  # row ids depend on insertion order, not on content
    threads.sort(key=lambda r: (r["agent"], r["native_id"]))
    dry = json.loads(auditor(db, "run", "--dry-run", "--json", "--since", "2000-01-01"))
    return {"threads": threads, "dry_run": dry}


def files_stored(db: Path) -> int:
    """Source files committed so far (0 while the store does not exist yet)."""
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as conn:
            return conn.execute("SELECT count(*) FROM source_files").fetchone()[0]
    except sqlite3.Error:
        return 0


def crash_and_resume(
    root: Path,
    db: Path,
    kills: int,
    rng: random.Random,
    total_files: int,
    commit_seconds: float | None = None,
    max_delay: float = 0.05,
) -> dict:
    """Ingest `root` into `db`, SIGKILLing the ingest at `kills` random points, then finish.

    Each kill waits for a random number of committed files (so it lands at a random point of
    the walk, not before the first commit), then a random few milliseconds more.
    """
    targets = sorted(rng.randint(1, max(1, total_files - 1)) for _ in range(kills))
    landed = finished = 0
    for target in targets:
        proc = subprocess.Popen(
            ingest_cmd(db, root, commit_seconds),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        while proc.poll() is None and files_stored(db) < target:
            time.sleep(0.005)
        time.sleep(rng.uniform(0, max_delay))
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            landed += 1
        else:
            finished += 1
        proc.wait()
    rc = subprocess.run(ingest_cmd(db, root), capture_output=True, check=False).returncode
    return {"kills_landed": landed, "runs_finished_before_kill": finished, "last_exit": rc}


def compare(clean: dict, crashed: dict) -> dict:
    a = {(r["agent"], r["native_id"]): r for r in clean["threads"]}
    b = {(r["agent"], r["native_id"]): r for r in crashed["threads"]}
    differ = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
    return {
        "threads": len(a),
        "threads_differing": len(differ),
        "messages_clean": sum(r["messages"] or 0 for r in a.values()),
        "messages_after_kills": sum(r["messages"] or 0 for r in b.values()),
        "dry_run_clean": [clean["dry_run"]["checkpoints"], clean["dry_run"]["gated_in"]],
        "dry_run_after_kills": [crashed["dry_run"]["checkpoints"], crashed["dry_run"]["gated_in"]],
        "equal": clean == crashed,
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    shared = Path(os.environ.get("AUDITOR_SHARED", ROOT.parent / "shared"))
    ap.add_argument("--corpus", type=Path, default=shared / "corpus")
    ap.add_argument("--target-mb", type=int, default=300)
    ap.add_argument("--kills", type=int, default=12)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--work", type=Path, default=None, help="scratch directory (default: temp)")
    args = ap.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="auditor-crash-"))
    root = work / "copy"
    sources = sorted(
        p
        for agent in ("claude-code", "codex", "amp")
        for p in (args.corpus / agent).rglob("*")
        if p.is_file() and p.suffix in (".jsonl", ".json")
    )
    if not sources:
        sys.exit(f"no transcripts under {args.corpus}")
    if not root.exists():
        size = sum(p.stat().st_size for p in sources)
        for k in range(max(1, -(-args.target_mb * 1024 * 1024 // size))):
            copy_with_fresh_ids(sources, args.corpus, root, k)
    files = [p for p in root.rglob("*") if p.is_file()]
    megabytes = sum(p.stat().st_size for p in files) / 1e6
    clean_db, crash_db = work / "clean.db", work / "crash.db"
    for db in (clean_db, crash_db):
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
    started = time.perf_counter()
    subprocess.run(ingest_cmd(clean_db, root), capture_output=True, check=False)
    clean_s = time.perf_counter() - started
    started = time.perf_counter()
    crash = crash_and_resume(root, crash_db, args.kills, random.Random(args.seed), len(files))
    crash_s = time.perf_counter() - started
    out = {"MB": round(megabytes, 1), "files": len(files), "clean_ingest_s": round(clean_s, 1)}
    out |= crash | {"killed_ingests_s": round(crash_s, 1)}
    out |= compare(snapshot(clean_db), snapshot(crash_db))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
