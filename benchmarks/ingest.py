"""Ingest CPU and memory against the bare parse of the same lines, measured in one run.

Replicas of one agent's corpus (default: ../shared/corpus/claude-code, 5 and 25 copies, each
copy with new session, message and file ids) are built in a scratch directory. For each one
this prints, as CPU seconds (user + system) of child processes, not wall time, since the
machine is shared:
- the bare parse: a plain Python process reading every file and `json.loads`-ing every line
  (the floor any ingest must pay);
- the cold ingest (`auditor ingest` into a new store, interpreter start and imports included:
  the fixed cost of a run counts) and its ratio to the bare parse;
- a re-ingest of the unchanged files, and the peak memory (max RSS) of the cold ingest, which
  must not grow with the corpus.
The last lines say whether the goals hold: cold ingest at most 3x the bare parse on every
replica, and peak memory flat (the largest replica's at most 1.5x the smallest's).

    python benchmarks/ingest.py [--corpus DIR] [--copies 5 25] [--repeat 2] [--work DIR] [--keep]
        [--against OTHER_CHECKOUT/.venv/bin/python]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
UUID = re.compile(rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
RATIO_GOAL = 3.0
RSS_GOAL = 1.5

# The floor, run in a process of its own so that its CPU is measured the same way as the
# ingest's: stdlib json.loads of every line of every .jsonl file, and of every .json file whole.
BARE_PARSE = r"""
import json, sys
from pathlib import Path
records = 0
for path in sorted(Path(sys.argv[1]).rglob("*")):
    if path.suffix == ".jsonl":
        for line in path.read_bytes().splitlines():
            if line.strip():
                try:
                    json.loads(line)
                    records += 1
                except ValueError:
                    pass
    elif path.suffix == ".json":
        try:
            json.loads(path.read_bytes())
            records += 1
        except ValueError:
            pass
print(records)
"""


def measured(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float, str]:
    """Run `cmd`; return (its CPU seconds, its max RSS in MB, its stdout).

    os.wait4 gives this child's own resource use; RUSAGE_CHILDREN would mix in every child
    before it (its max RSS is the largest so far). The child runs in the temporary directory:
    `python -m auditor` started in a checkout imports that checkout's code, whatever the
    interpreter, and `--against` would then measure this checkout twice."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, cwd=tempfile.gettempdir())
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = code = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        output = out.read().decode()
        if code and not output.strip():  # an ingest with failed files still prints its summary
            sys.exit(f"{' '.join(cmd[-3:])} failed ({code}): {err.read().decode()[-800:]}")
        cpu = usage.ru_utime + usage.ru_stime
        return cpu, usage.ru_maxrss / 1024, output


def build_copy(corpus: Path, dest: Path, copies: int) -> None:
    """Replicate `corpus` `copies` times under `dest`, each copy with new ids."""
    sources = sorted(p for p in corpus.rglob("*") if p.is_file())
    for k in range(copies):
        # New ids: rewrite every UUID's first group so sessions, messages and files are new.
        prefix = f"{k:08x}".encode()

        def fresh(m: re.Match, prefix: bytes = prefix) -> bytes:
            return prefix + m.group(0)[8:]

        for src in sources:
            rel = src.relative_to(corpus).as_posix().encode()
            out = dest / f"copy{k:03d}" / UUID.sub(fresh, rel).decode()
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(UUID.sub(fresh, src.read_bytes()))


def _env(db: Path) -> dict[str, str]:
    # Bytecode written, as an installed package has it: with PYTHONDONTWRITEBYTECODE every run
    # would compile the package again (the first of the runs writes it; the least is kept).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "AUDITOR_DB": str(db), "AUDITOR_SOURCE": "bench"}


def measure(label: str, root: Path, work: Path, repeat: int, pythons: dict[str, str]) -> list:
    """The bare parse and the cold ingest of `root` by each of `pythons` (an interpreter whose
    environment holds an auditor), all run `repeat` times in turn, the least CPU of each kept:
    neighbours on a shared machine only ever add to a process's CPU."""
    megabytes = sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) / 1e6
    parses: list[float] = []
    colds: dict[str, list[tuple[float, float]]] = {name: [] for name in pythons}
    summaries: dict[str, dict] = {}
    for _ in range(repeat):
        parse_cpu, _, records = measured([sys.executable, "-c", BARE_PARSE, str(root)])
        parses.append(parse_cpu)
        for name, python in pythons.items():
            db = work / f"{label}-{name}.db"
            for suffix in ("", "-wal", "-shm"):
                Path(f"{db}{suffix}").unlink(missing_ok=True)
            env = _env(db)
            cpu, rss, out = measured([python, "-m", "auditor", "ingest", "--json", str(root)], env)
            colds[name].append((cpu, rss))
            summaries[name] = json.loads(out)
    results = []
    for name, python in pythons.items():
        db = work / f"{label}-{name}.db"
        env = _env(db)
        warm_cpu, _, _ = measured([python, "-m", "auditor", "ingest", "--json", str(root)], env)
        cold_cpu, cold_rss = min(colds[name])
        results.append(
            {
                "auditor": name,
                "replica": label,
                "MB": round(megabytes, 1),
                "records": int(records),
                "messages": summaries[name]["messages"],
                "failed_files": summaries[name]["failed"],
                "bare_parse_cpu_s": round(min(parses), 2),
                "cold_ingest_cpu_s": round(cold_cpu, 2),
                "ratio": round(cold_cpu / min(parses), 2),
                "reingest_cpu_s": round(warm_cpu, 2),
                "peak_rss_MB": round(cold_rss, 1),
                "store_MB": round(sum(p.stat().st_size for p in work.glob(f"{db.name}*")) / 1e6, 1),
            }
        )
    return results


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--corpus", type=Path, default=ROOT.parent / "shared" / "corpus")
    ap.add_argument("--agent", default="claude-code", help="the corpus folder replicated")
    ap.add_argument("--copies", type=int, nargs="+", default=[5, 25])
    ap.add_argument("--work", type=Path, default=None, help="scratch directory (default: temp)")
    ap.add_argument("--repeat", type=int, default=2, help="runs of each, the least kept")
    ap.add_argument(
        "--against",
        metavar="PYTHON",
        help="also measure the auditor of this interpreter's environment (another checkout's "
        "venv), in turn with this one: before and after, paired",
    )
    ap.add_argument("--keep", action="store_true", help="keep the replicas and stores")
    args = ap.parse_args()
    source = args.corpus / args.agent
    if not source.is_dir():
        sys.exit(f"no corpus at {source}")
    pythons = {"this": sys.executable}
    if args.against:
        pythons["against"] = args.against
    work = args.work or Path(tempfile.mkdtemp(prefix="auditor-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    results: dict[str, list[dict]] = {name: [] for name in pythons}
    try:
        for copies in args.copies:
            root = work / f"{args.agent}-x{copies}"
            if not root.exists():
                build_copy(source, root, copies)
            for r in measure(f"x{copies}", root, work, args.repeat, pythons):
                results[r["auditor"]].append(r)
                print(json.dumps(r), flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    for name, rows in results.items():
        ratios = ", ".join(f"{r['replica']} {r['ratio']}x" for r in rows)
        met = all(r["ratio"] <= RATIO_GOAL for r in rows)
        print(
            f"{name}: cold ingest CPU / bare parse CPU: {ratios} "
            f"(goal <= {RATIO_GOAL}x: {_said(met)})"
        )
        rss = [r["peak_rss_MB"] for r in rows]
        growth = rss[-1] / rss[0]
        size = rows[-1]["MB"] / rows[0]["MB"]
        print(
            f"{name}: peak RSS {' -> '.join(f'{x:.0f} MB' for x in rss)} for {size:.1f}x the "
            f"data ({growth:.2f}x; goal <= {RSS_GOAL}x: {_said(growth <= RSS_GOAL)})"
        )


def _said(met: bool) -> str:
    return "met" if met else "NOT met"


if __name__ == "__main__":
    main()
