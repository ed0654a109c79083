"""Ingest speed and memory, as ratios measured in one run.

For the real corpus (../shared/corpus/{claude-code,codex,amp}) and for a larger copy built by
replicating it with new session ids (--target-mb, default 500), this prints:
- cold ingest time / the time to merely read and json-parse every record of the same files;
- MB/s and messages/s of the cold ingest;
- re-ingest of the unchanged files as a share of the cold time;
- peak memory (max RSS) of the ingest process, for both sizes: it must not grow with the corpus.

Each ingest runs in its own process (`python -m auditor.cli.main ingest`), so RSS is its own.

    python benchmarks/ingest.py [--corpus DIR] [--target-mb 500] [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
AGENTS = ("claude-code", "codex", "amp")
UUID = re.compile(rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def files_of(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in (".jsonl", ".json"))


def plain_parse(root: Path) -> tuple[float, int]:
    """Read every file and json.loads every record: the floor any ingest must pay."""
    started = time.perf_counter()
    records = 0
    for path in files_of(root):
        data = path.read_bytes()
        if path.suffix == ".jsonl":
            for line in data.splitlines():
                if line.strip():
                    try:
                        json.loads(line)
                        records += 1
                    except ValueError:
                        pass
        else:
            try:
                json.loads(data)
                records += 1
            except ValueError:
                pass
    return time.perf_counter() - started, records


def run_ingest(root: Path, db: Path) -> tuple[float, int, dict]:
    """Ingest `root` into `db` in a child process; return (seconds, max RSS KiB, summary)."""
    cmd = [
        sys.executable,
        "-c",
        "from auditor.cli.main import main; main()",
        "--db",
        str(db),
        "ingest",
        "--json",
        str(root),
    ]
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    summary = json.loads(proc.stdout) if proc.stdout.strip() else {"stderr": proc.stderr[-500:]}
    return elapsed, max(rss, before), summary


def startup_seconds() -> float:
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", "import auditor.cli.main, auditor.ingest.ingester"], check=True
    )
    return time.perf_counter() - started


def build_copy(corpus: Path, dest: Path, target_mb: int) -> None:
    """Replicate the corpus under `dest` until it holds `target_mb`, each copy with new ids."""
    sources = [p for agent in AGENTS for p in files_of(corpus / agent)]
    size = sum(p.stat().st_size for p in sources)
    copies = max(1, -(-target_mb * 1024 * 1024 // size))
    for k in range(copies):
        for src in sources:
            rel = src.relative_to(corpus)
            data = src.read_bytes()
            # New ids: rewrite every UUID's first group so sessions, messages and files are new.
            prefix = f"{k:08x}".encode()

            def fresh(m: re.Match, prefix: bytes = prefix) -> bytes:
                return prefix + m.group(0)[8:]

            data = UUID.sub(fresh, data)
            name = UUID.sub(fresh, rel.as_posix().encode()).decode()
            out = dest / f"copy{k:03d}" / name
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(data)


def measure(label: str, root: Path, work: Path) -> dict:
    megabytes = sum(p.stat().st_size for p in files_of(root)) / 1e6
    parse_s, records = plain_parse(root)
    db = work / f"{label}.db"
    for suffix in ("", "-wal", "-shm"):
        Path(str(db) + suffix).unlink(missing_ok=True)
    cold_s, cold_rss, summary = run_ingest(root, db)
    warm_s, warm_rss, _ = run_ingest(root, db)
    base = startup_seconds()
    cold_net, warm_net = cold_s - base, warm_s - base
    out = {
        "label": label,
        "MB": round(megabytes, 1),
        "records": records,
        "messages": summary.get("messages"),
        "files": summary.get("files_seen"),
        "failed_files": summary.get("failed"),
        "plain_parse_s": round(parse_s, 2),
        "cold_ingest_s": round(cold_s, 2),
        "process_startup_s": round(base, 2),
        "ratio_cold_vs_parse": round(cold_net / parse_s, 2),
        "MB_per_s": round(megabytes / cold_net, 1),
        "messages_per_s": round((summary.get("messages") or 0) / cold_net),
        "reingest_s": round(warm_s, 2),
        "reingest_share_of_cold": round(max(warm_net, 0) / cold_net, 4),
        "peak_rss_MB": round(cold_rss / 1024, 1),
    }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--corpus", type=Path, default=ROOT.parent / "shared" / "corpus")
    ap.add_argument("--target-mb", type=int, default=500)
    ap.add_argument(
        "--work", type=Path, default=None, help="scratch directory (default: a temp dir)"
    )
    args = ap.parse_args()
    if not args.corpus.is_dir():
        sys.exit(f"no corpus at {args.corpus}")
    work = args.work or Path(tempfile.mkdtemp(prefix="auditor-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        small = work / "corpus"
        if not small.exists():
            for agent in AGENTS:
                shutil.copytree(args.corpus / agent, small / agent)
        results = [measure("corpus", small, work)]
        if args.target_mb:
            big = work / f"corpus-{args.target_mb}MB"
            if not big.exists():
                build_copy(args.corpus, big, args.target_mb)
            results.append(measure(f"copy-{args.target_mb}MB", big, work))
        for r in results:
            print(json.dumps(r))
        if len(results) == 2:
            print(
                json.dumps(
                    {
                        "peak_rss_growth": round(
                            results[1]["peak_rss_MB"] / results[0]["peak_rss_MB"], 2
                        ),
                        "size_growth": round(results[1]["MB"] / results[0]["MB"], 1),
                    }
                )
            )
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
