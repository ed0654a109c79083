"""Report speed on a store of >= 100,000 threads, against re-parsing the transcripts each time.

Steps:
1. ingest the real corpus (../shared/corpus/{claude-code,codex,amp}) into a fresh store and audit
   it with a deterministic fake observer (registered through the real hook), so that there are
   checkpoints, gate decisions and verdicts;
2. replicate what the reports read (threads, token_usage, checkpoints, verdicts) with new ids in
   SQL (INSERT ... SELECT with offset ids) until the store holds --threads threads. Messages and
   tool calls are not copied: no report reads them, and 1,300 copies of their text would be ~40 GB;
3. time `report costs --by day` and `report verdicts`, in process (library call, warm: after one
   untimed call) and as the CLI (a new process each time, so including interpreter start-up);
4. time a cold re-parse of the source files, as file-parsing cost tools do on every run: read
   each file, parse every line (orjson), keep the last usage per message id, sum per day. The
   corpus is parsed for real (best of 3) and the time scaled by the replication factor.

    python benchmarks/report.py [--corpus DIR] [--threads 100000] [--work DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
AGENTS = ("claude-code", "codex", "amp")
COPIED = ("threads", "token_usage", "checkpoints", "verdicts")

from auditor.hookspecs import hookimpl  # noqa: E402


@dataclass
class BenchObserver:
    """Answers at once; asks for a correction at one checkpoint in five (by a hash of the input)."""

    name: str = "bench"
    default_model: str = "bench-observer-1"

    def check(self, options):
        return None

    async def observe(self, request, options):
        from auditor.observe import ObserveResult, ObserverUsage

        h = zlib.crc32(request.user.encode())
        needs = h % 5 == 0
        args = {
            "needsCorrection": needs,
            "message": "check the failing test again" if needs else None,
        }
        usage = ObserverUsage(input=len(request.user) // 4, output=30, cached=0, thinking=20)
        return ObserveResult("course_correct", args, usage, request.model, 0.2 + (h % 100) / 100)


class BenchPlugin:
    @hookimpl
    def register_observers(self, register):
        register(BenchObserver())


def build_base(db: Path, corpus: Path) -> None:
    from auditor.db import open_db
    from auditor.ingest import ingest
    from auditor.plugins import get_plugin_manager
    from auditor.run import RunConfig, run

    engine = open_db(db)
    pm = get_plugin_manager(extra=[BenchPlugin()])
    ingest(engine, pm, [corpus / a for a in AGENTS if (corpus / a).is_dir()])
    run(
        engine,
        pm,
        RunConfig(observer="bench", gate={"min_tool_calls": 3, "require_edit": False}),
        announce=lambda line: None,
    )
    engine.dispose()


def replicate(db: Path, target: int) -> int:
    """Copy the rows the reports read until there are `target` threads; return the copies made."""
    import sqlite3

    conn = sqlite3.connect(db)
    base = conn.execute("SELECT count(*) FROM threads").fetchone()[0]
    copies = -(-target // base) - 1
    offsets = {
        t: conn.execute(f"SELECT coalesce(max(id), 0) + 1 FROM {t}").fetchone()[0] for t in COPIED
    }
    rewrite = {  # column -> expression in copy n
        "threads": {
            "id": f"id + n * {offsets['threads']}",
            "native_id": "native_id || '~' || n",
            "parent_id": f"parent_id + n * {offsets['threads']}",
        },
        "token_usage": {
            "id": f"id + n * {offsets['token_usage']}",
            "thread_id": f"thread_id + n * {offsets['threads']}",
        },
        "checkpoints": {
            "id": f"id + n * {offsets['checkpoints']}",
            "thread_id": f"thread_id + n * {offsets['threads']}",
        },
        "verdicts": {
            "id": f"id + n * {offsets['verdicts']}",
            "thread_id": f"thread_id + n * {offsets['threads']}",
            "checkpoint_id": f"checkpoint_id + n * {offsets['checkpoints']}",
        },
    }
    conn.execute("PRAGMA foreign_keys = OFF")
    conn.execute("PRAGMA journal_mode = OFF")
    conn.execute("PRAGMA synchronous = OFF")
    for table in COPIED:
        cols = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
        exprs = [rewrite[table].get(c, c) for c in cols]
        conn.execute(
            f"WITH RECURSIVE k(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM k WHERE n < {copies}) "
            f"INSERT INTO {table} ({', '.join(cols)}) SELECT {', '.join(exprs)} FROM {table} "
            f"CROSS JOIN k WHERE {table}.id < {offsets[table]}"
        )
        conn.commit()
    conn.execute("ANALYZE")
    conn.commit()
    conn.close()
    return copies


def counts(db: Path) -> dict[str, int]:
    import sqlite3

    conn = sqlite3.connect(db)
    out = {
        t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in COPIED + ("messages",)
    }
    conn.close()
    return out


def reparse(corpus: Path) -> tuple[float, int]:
    """What a file-parsing cost tool does on every run: parse every line, dedupe, sum per day."""
    started = time.perf_counter()
    last: dict[str, tuple[str, dict]] = {}
    lines = 0
    for agent in AGENTS:
        for path in sorted((corpus / agent).rglob("*")):
            if not path.is_file() or path.suffix not in (".jsonl", ".json"):
                continue
            for raw in path.read_bytes().splitlines():
                lines += 1
                try:
                    obj = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    continue
                if not isinstance(obj, dict):
                    continue
                msg = obj.get("message")
                if (
                    obj.get("type") == "assistant"
                    and isinstance(msg, dict)
                    and isinstance(msg.get("usage"), dict)
                ):
                    last[msg.get("id") or obj.get("uuid")] = (
                        str(obj.get("timestamp"))[:10],
                        msg["usage"],
                    )
                elif obj.get("type") == "event_msg":  # codex token_count events
                    payload = obj.get("payload") or {}
                    info = payload.get("info") if isinstance(payload, dict) else None
                    if isinstance(info, dict) and info.get("last_token_usage"):
                        last[f"{path}:{lines}"] = (
                            str(obj.get("timestamp"))[:10],
                            info["last_token_usage"],
                        )
    days: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for day, u in last.values():
        d = days[day]
        d[0] += u.get("input_tokens") or 0
        d[1] += u.get("output_tokens") or 0
        d[2] += u.get("cache_read_input_tokens") or u.get("cached_input_tokens") or 0
        d[3] += u.get("cache_creation_input_tokens") or 0
    return time.perf_counter() - started, lines


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=ROOT.parent / "shared" / "corpus")
    ap.add_argument("--threads", type=int, default=100_000)
    ap.add_argument(
        "--work", type=Path, default=None, help="directory for the store (default: a temporary one)"
    )
    args = ap.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="auditor-report-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    db = work / "bench.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    prices = work / "prices.json"
    prices.write_text('{"bench-observer-1": {"input": 0.3, "output": 2.5}}')
    os.environ["AUDITOR_PRICES"] = str(prices)

    started = time.perf_counter()
    build_base(db, args.corpus)
    base = counts(db)
    print(
        f"corpus store: {base['threads']} threads, {base['messages']} messages, {base['token_usage']} usage rows, "
        f"{base['checkpoints']} checkpoints, {base['verdicts']} verdicts ({time.perf_counter() - started:.1f}s)"
    )
    started = time.perf_counter()
    copies = replicate(db, args.threads)
    big = counts(db)
    size_mb = db.stat().st_size / 1e6
    print(
        f"replicated x{copies + 1}: {big['threads']:,} threads, {big['token_usage']:,} usage rows, "
        f"{big['checkpoints']:,} checkpoints, {big['verdicts']:,} verdicts; {size_mb:.0f} MB "
        f"({time.perf_counter() - started:.1f}s)"
    )

    from auditor.db import open_db
    from auditor.reports import cost_report, verdict_report

    engine = open_db(db)
    results = {}
    for name, fn, argv in (
        (
            "report costs --by day",
            lambda: cost_report(engine, ["day"]),
            ["report", "costs", "--by", "day"],
        ),
        (
            "report verdicts",
            lambda: verdict_report(engine, ["observer", "model"]),
            ["report", "verdicts"],
        ),
    ):
        fn()  # warm the page cache and the price probes
        lib = best(fn, 5)
        cli_times = []
        for _ in range(3):
            t = time.perf_counter()
            subprocess.run(
                [
                    sys.executable,
                    "-c",
                    "from auditor.cli import main; main()",
                    "--db",
                    str(db),
                    *argv,
                    "--format",
                    "json",
                ],
                check=True,
                stdout=subprocess.DEVNULL,
            )
            cli_times.append(time.perf_counter() - t)
        results[name] = (lib, min(cli_times))
    parse_times = [reparse(args.corpus) for _ in range(3)]
    corpus_parse = min(t for t, _ in parse_times)
    scaled = corpus_parse * (copies + 1)
    print(
        f"cold re-parse of the corpus files: {corpus_parse:.3f}s ({parse_times[0][1]:,} lines); "
        f"scaled to x{copies + 1}: {scaled:.1f}s"
    )
    print(
        f"{'report':<24} {'library (warm)':>15} {'CLI process':>12} {'re-parse / library':>19} {'re-parse / CLI':>15}"
    )
    for name, (lib, cli) in results.items():
        print(
            f"{name:<24} {lib:>14.3f}s {cli:>11.3f}s {scaled / lib:>18.0f}x {scaled / cli:>14.0f}x"
        )
    print(
        f"(CLI start-up alone, `auditor --help`: "
        f"{statistics.median(best(lambda: subprocess.run([sys.executable, '-c', 'from auditor.cli import main; main()', '--help'], stdout=subprocess.DEVNULL, check=True), 1) for _ in range(3)):.3f}s)"
    )
    print(f"store kept at {db}")


if __name__ == "__main__":
    main()
