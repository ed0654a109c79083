"""Report speed: a warm `auditor report costs --by day` against a bare `import sqlalchemy`,
from 1k to 100k threads, and beside ccusage on the same Claude Code files.

Steps:
1. ingest the real corpus ($AUDITOR_SHARED/corpus/{claude-code,codex,amp}) into a store and
   audit it with a deterministic fake observer (registered through the real hook), so that there
   are checkpoints, gate decisions and verdicts (kept as base.db in --work, reused next time);
2. for each of --threads: replicate what the reports read (threads, token_usage, checkpoints,
   verdicts) with new ids in SQL until the store holds that many threads. Messages and tool
   calls are not copied: no report reads them;
3. run the report once (it brings the rollup and the stored prices up to date), then time it
   warm as the CLI, each run paired with a bare `python -c "import sqlalchemy"` in the same
   loop: wall and CPU medians and their ratio (goal: <= 1.5x, the same at every size); and in
   process (library call), against a cold re-parse of the source files as file-parsing cost
   tools do on every run (the corpus parsed for real, scaled by the replication factor);
4. where the warm report's import time goes (`python -X importtime`), by package;
5. Claude Code files: copies of the corpus's Claude Code sessions with fresh ids (sessions,
   message and request ids) laid out as ~/.claude/projects up to --claude-mb, ingested once,
   then `report costs --by day` beside `ccusage daily --json --offline` reading the same files
   through CLAUDE_CONFIG_DIR (--ccusage; "ccusage not available" when it cannot be run offline:
   fetch it once with `npx -y ccusage@VERSION --version`).

    python benchmarks/report.py [--corpus DIR] [--threads 1000,100000] [--claude-mb 100]
                                [--work DIR] [--repeat 7] [--ccusage CMD]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import resource
import shlex
import shutil
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
sys.path.insert(0, str(ROOT / "benchmarks"))
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
        from auditor.audit.observe import ObserveResult, ObserverUsage

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
    from auditor.audit.run import run
    from auditor.audit.run_types import RunConfig
    from auditor.ingest.ingester import ingest
    from auditor.plugins import get_plugin_manager
    from auditor.store.db import open_db

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


def timed(argv: list[str], env: dict | None = None) -> tuple[float, float]:
    """Run `argv` to the end, output dropped; return (wall s, CPU s of the child)."""
    started = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, stderr = proc.communicate()
    wall = time.perf_counter() - started
    if proc.returncode:
        raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}: {stderr.decode()[-500:]}")
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, cpu.ru_utime + cpu.ru_stime


def paired(commands: dict[str, tuple[list[str], dict | None]], repeat: int) -> dict:
    """Run the commands in turn, `repeat` rounds; return name -> (median wall, median CPU)."""
    walls: dict[str, list[float]] = defaultdict(list)
    cpus: dict[str, list[float]] = defaultdict(list)
    for _ in range(repeat):
        for name, (argv, env) in commands.items():
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            wall, after = timed(argv, env)
            walls[name].append(wall)
            cpus[name].append(after - before.ru_utime - before.ru_stime)
    return {n: (statistics.median(walls[n]), statistics.median(cpus[n])) for n in commands}


SQLALCHEMY = [sys.executable, "-c", "import sqlalchemy"]


def report_cmd(db: Path) -> list[str]:
    return [sys.executable, "-m", "auditor", "--db", str(db), "report", "costs", "--by", "day"]


def print_paired(results: dict, base: str = "import sqlalchemy") -> None:
    bw, bc = results[base]
    for name, (wall, cpu) in results.items():
        print(
            f"  {name:<34} wall {wall:7.3f}s ({wall / bw:5.2f}x)  CPU {cpu:6.3f}s ({cpu / bc:5.2f}x)"
        )


def import_breakdown(argv: list[str]) -> str:
    """Where a run's import time goes (ms): each module's own time counted to the nearest
    package that is not the standard library among it and the modules importing it (asyncio
    imported by sqlalchemy counts to sqlalchemy), else to the standard library."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", *argv[1:]],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=True,
    )
    rows = []  # (self us, depth, top-level name), children listed before their parent
    for line in proc.stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[0][12:].strip().isdigit():
            name = parts[2].rstrip()
            depth = (len(name) - len(name.lstrip())) // 2
            rows.append((int(parts[0][12:]), depth, name.strip().split(".")[0]))
    by: dict[str, int] = defaultdict(int)
    for i, (own, depth, top) in enumerate(rows):
        owner = top
        for _, d, parent in rows[i + 1 :]:  # the ancestors: the next rows with a smaller depth
            if owner not in sys.stdlib_module_names:
                break
            if d < depth:
                owner, depth = parent, d
        if owner.startswith("auditor"):
            owner = "auditor"
        elif owner in sys.stdlib_module_names:
            owner = "standard library"
        elif owner.startswith("_"):  # a .pth file's hook, sysconfig data: Python's start-up
            owner = "site start-up"
        by[owner] += own
    total = sum(by.values())
    top = sorted(by.items(), key=lambda kv: -kv[1])
    return f"{total / 1000:.0f} ms: " + ", ".join(f"{k} {v / 1000:.0f}" for k, v in top if v >= 500)


MSG_ID = re.compile(rb'"(msg|req)_')


def claude_config(corpus: Path, dest: Path, megabytes: int) -> tuple[int, int]:
    """Lay copies of the corpus's Claude Code sessions out as a Claude config dir's projects/,
    each copy with fresh session, message and request ids; return (files, bytes)."""
    from ingest_crash import copy_with_fresh_ids

    src = corpus / "claude-code"
    sources = sorted(p for p in src.rglob("*.jsonl") if p.is_file())
    projects = dest / "projects"
    if not projects.exists():
        size = sum(p.stat().st_size for p in sources)
        for k in range(max(1, -(-megabytes * 1_000_000 // size))):
            copy_with_fresh_ids(sources, src, projects, k)
            for out in (projects / f"copy{k:03d}").rglob("*.jsonl"):
                out.write_bytes(
                    MSG_ID.sub(lambda m, k=k: b'"%s_c%03d' % (m[1], k), out.read_bytes())
                )
    files = [p for p in projects.rglob("*.jsonl")]
    return len(files), sum(p.stat().st_size for p in files)


def ccusage_env(config: Path, home: Path) -> dict:
    env = dict(os.environ)
    env.setdefault("npm_config_cache", str(Path.home() / ".npm"))
    env.update(
        CLAUDE_CONFIG_DIR=str(config),
        HOME=str(home),  # read no other agent's logs of this machine's user
        npm_config_update_notifier="false",
    )
    return env


def section_sizes(args, base_db: Path, work: Path) -> None:
    parse_times = [reparse(args.corpus) for _ in range(3)]
    corpus_parse = min(t for t, _ in parse_times)
    print(
        f"cold re-parse of the corpus files (as file-parsing tools do each run): "
        f"{corpus_parse:.3f}s ({parse_times[0][1]:,} lines)"
    )
    from auditor.reports import cost_report
    from auditor.store.db import open_db

    summary = []
    for target in args.threads:
        db = work / f"threads-{target}.db"
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
        shutil.copyfile(base_db, db)
        started = time.perf_counter()
        copies = replicate(db, target)
        big = counts(db)
        print(
            f"\n{big['threads']:,} threads (corpus x{copies + 1}): {big['token_usage']:,} usage rows, "
            f"{big['checkpoints']:,} checkpoints, {big['verdicts']:,} verdicts; "
            f"{db.stat().st_size / 1e6:.0f} MB ({time.perf_counter() - started:.1f}s)"
        )
        started = time.perf_counter()
        timed(report_cmd(db) + ["--format", "json"])
        print(
            f"  first report (rollup and stored prices built): {time.perf_counter() - started:.1f}s"
        )
        results = paired(
            {
                "import sqlalchemy": (SQLALCHEMY, None),
                "report costs --by day --format json": (
                    report_cmd(db) + ["--format", "json"],
                    None,
                ),
            },
            args.repeat,
        )
        print_paired(results)
        print(
            "  imports of the warm report:", import_breakdown(report_cmd(db) + ["--format", "json"])
        )
        engine = open_db(db)
        fn = functools.partial(cost_report, engine, ["day"])
        fn()
        lib = best(fn, 5)
        engine.dispose()
        scaled = corpus_parse * (copies + 1)
        (bw, bc), (rw, rc) = results.values()
        print(
            f"  library call (warm) {lib:.3f}s; re-parsing the files it stands for ~{scaled:.1f}s "
            f"({scaled / lib:.0f}x the library call, {scaled / rw:.0f}x the CLI)"
        )
        summary.append((big["threads"], rw / bw, rc / bc))
    print("\nwarm `report costs --by day` / bare `import sqlalchemy` (goal <= 1.5x at every size):")
    for threads, wall, cpu in summary:
        print(f"  {threads:>9,} threads: wall {wall:.2f}x, CPU {cpu:.2f}x")


def section_ccusage(args, work: Path) -> None:
    config = work / "claude"
    files, size = claude_config(args.corpus, config, args.claude_mb)
    db = work / f"claude-{args.claude_mb}mb.db"
    print(f"\nClaude Code files: {files} sessions, {size / 1e6:.0f} MB under {config}/projects")
    if not db.exists():
        started = time.perf_counter()
        subprocess.run(
            [
                sys.executable,
                "-m",
                "auditor",
                "--db",
                str(db),
                "ingest",
                "-q",
                str(config / "projects"),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        print(f"  ingested once: {time.perf_counter() - started:.1f}s")
    report = report_cmd(db) + ["--format", "json"]
    mine = json.loads(subprocess.run(report, capture_output=True, check=True).stdout)["total"]
    commands = {
        "import sqlalchemy": (SQLALCHEMY, None),
        "auditor report costs --by day": (report, None),
    }
    ccusage = [*shlex.split(args.ccusage), "daily", "--json", "--offline"]
    home = work / "empty-home"
    home.mkdir(exist_ok=True)
    env = ccusage_env(config, home)
    reason = None
    if not shutil.which(ccusage[0]):
        reason = f"{ccusage[0]} not found"
    else:
        try:
            theirs = json.loads(
                subprocess.run(
                    ccusage, capture_output=True, check=True, env=env, timeout=600
                ).stdout
            )["totals"]
        except subprocess.CalledProcessError as exc:
            said = [line for line in exc.stderr.decode(errors="replace").splitlines() if line]
            reason = f"exit {exc.returncode}: {said[0] if said else 'no message'}"
        except (subprocess.SubprocessError, ValueError, KeyError) as exc:
            reason = str(exc).splitlines()[0]
    if reason:
        print(
            f"  ccusage not available ({reason}); with network once: "
            f"npx -y {args.ccusage.split()[-1]} --version"
        )
    else:
        commands["ccusage daily --json --offline"] = (ccusage, env)
        commands["ccusage --version (its start-up)"] = (
            [*shlex.split(args.ccusage), "--version"],
            env,
        )
        print(
            f"  totals: auditor {mine['input_tokens']:,} in / {mine['output_tokens']:,} out / "
            f"${mine['agent_usd'] or 0:,.2f}; ccusage {theirs['inputTokens']:,} in / "
            f"{theirs['outputTokens']:,} out / ${theirs['totalCost']:,.2f}"
        )
    timed(report)
    results = paired(commands, args.repeat)
    print_paired(results)
    if not reason:
        ours, theirs_t = (
            results["auditor report costs --by day"][0],
            results["ccusage daily --json --offline"][0],
        )
        print(f"  ccusage / auditor (wall): {theirs_t / ours:.1f}x")


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    shared = Path(os.environ.get("AUDITOR_SHARED", ROOT.parent / "shared"))
    ap.add_argument("--corpus", type=Path, default=shared / "corpus")
    ap.add_argument(
        "--threads",
        type=lambda v: [int(x) for x in v.split(",")],
        default=[1000, 100_000],
        help="store sizes, comma-separated (default: 1000,100000)",
    )
    ap.add_argument(
        "--claude-mb", type=int, default=100, help="size of the Claude Code files (0: skip)"
    )
    ap.add_argument("--repeat", type=int, default=7, help="rounds of paired runs (medians)")
    ap.add_argument(
        "--ccusage",
        default="npx --offline --yes ccusage@20.0.24",
        help="how to run ccusage (default: %(default)s)",
    )
    ap.add_argument(
        "--work",
        type=Path,
        default=None,
        help="directory for the stores (default: a temporary one)",
    )
    args = ap.parse_args()
    # Installed, auditor's modules are byte-compiled: a setting that keeps Python from writing
    # bytecode would time compiling them in every run (the first, untimed run writes it).
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    work = args.work or Path(tempfile.mkdtemp(prefix="auditor-report-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    prices = work / "prices.json"
    prices.write_text('{"bench-observer-1": {"input": 0.3, "output": 2.5}}')
    os.environ["AUDITOR_PRICES"] = str(prices)

    base_db = work / "base.db"
    if not base_db.exists():
        started = time.perf_counter()
        build_base(work / "base-building.db", args.corpus)
        (work / "base-building.db").rename(base_db)
        print(f"corpus store built ({time.perf_counter() - started:.1f}s)")
    base = counts(base_db)
    print(
        f"corpus store: {base['threads']} threads, {base['messages']} messages, "
        f"{base['token_usage']} usage rows, {base['checkpoints']} checkpoints, {base['verdicts']} verdicts"
    )
    if not base["threads"]:
        sys.exit(f"no threads: is the corpus at {args.corpus}? (--corpus, $AUDITOR_SHARED)")
    if args.threads:
        section_sizes(args, base_db, work)
    if args.claude_mb:
        section_ccusage(args, work)
    print(f"\nstores kept in {work}")


if __name__ == "__main__":
    main()
