"""Several `auditor run` workers sharing one PostgreSQL store, as ratios from one run.

A throwaway PostgreSQL server (tests/pg_server.py), the corpus ingested once, and an observer
stand-in speaking Gemini's wire format on 127.0.0.1 that answers each call after 200 ms. Each
scenario starts from a copy of the ingested store:
1. one worker process: audits per second;
2. N worker processes started together: audits per second, as a ratio to 1 (goal >= 3.5 at 4);
3. N workers, one of them SIGKILLed once a third of the calls were made.
Duplicate calls: requests with the same body sent twice (in 3, those the killed worker had in
flight are re-sent by design and counted apart); recorded twice: checkpoints with more than one
verdict; lost: checkpoints to audit that end without a verdict.

    python benchmarks/workers.py [--corpus DIR ...] [--workers 4] [-j 1]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from helpers import pg_server  # noqa: E402 (found through sys.path above)
from helpers.wire import Reply, Stub, gemini_response  # noqa: E402

LATENCY = 0.2
GATE = ["--mode", "every-inference", "--min-tool-calls", "1"]


def auditor(db: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "auditor", "--db", db, *args]


def _children_cpu() -> float:
    import resource

    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def scenario(server, base: str, stub: Stub, workers: int, jobs: int, to_audit: int, kill=False):
    db = server.url_base + base.rsplit("/", 1)[1] + f"_{workers}{'k' if kill else ''}"
    name = db.rsplit("/", 1)[1]
    server.admin().execute(f"CREATE DATABASE {name} TEMPLATE {base.rsplit('/', 1)[1]}")
    stub.log.clear()
    env = {**os.environ, "GEMINI_API_KEY": "AIza-bench", "GOOGLE_GEMINI_BASE_URL": stub.url}
    argv = auditor(db, "run", "--observer", "gemini", "-j", str(jobs), "--max-retries", "0", *GATE)
    started = time.monotonic()
    cpu_before = _children_cpu()
    logs = [tempfile.TemporaryFile("w+") for _ in range(workers)]
    procs = [subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=log) for log in logs]
    killed_calls = 0
    if kill:
        while len(stub.log) < to_audit // 3 and procs[0].poll() is None:
            time.sleep(0.01)
        killed_calls = stub.in_flight  # at most: the calls in flight when it died
        procs[0].send_signal(signal.SIGKILL)  # a no-op if it already ended
    codes = [p.wait() for p in procs]
    for code, log in zip(codes, logs, strict=True):
        if code not in (0, -signal.SIGKILL):  # a worker that failed says why
            log.seek(0)
            print(f"a worker exited {code}: {log.read()[-2000:]}", file=sys.stderr)
        log.close()
    took = time.monotonic() - started
    cpu = _children_cpu() - cpu_before  # the workers' own CPU time (not the server's)
    bodies = Counter(json.dumps(r["body"], sort_keys=True) for r in stub.log)
    resent = sum(n - 1 for n in bodies.values())
    import psycopg

    port = server.port
    with psycopg.connect(f"host=127.0.0.1 port={port} user=postgres dbname={name}") as conn:
        answered = conn.execute(
            "SELECT count(DISTINCT checkpoint_id) FROM verdicts WHERE status = 'ok'"
        ).fetchone()[0]
        twice = conn.execute(
            "SELECT count(*) FROM (SELECT checkpoint_id FROM verdicts "
            "GROUP BY checkpoint_id HAVING count(*) > 1) d"
        ).fetchone()[0]
    return {
        "workers": workers,
        "seconds": round(took, 2),
        "audits_per_s": round(answered / took, 2),
        "worker_cpu_ms_per_audit": round(1000 * cpu / max(answered, 1), 1),
        "exit_codes": codes,
        "calls": len(stub.log),
        "duplicate_calls": resent,
        "killed_worker_in_flight": killed_calls if kill else None,
        "recorded_twice": twice,
        "lost": to_audit - answered,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", nargs="*", default=None, help="transcript dirs to ingest")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("-j", "--jobs", type=int, default=1, help="calls in flight per worker")
    args = ap.parse_args()
    shared = Path(os.environ.get("AUDITOR_SHARED", ROOT.parent / "shared"))
    corpus = args.corpus or [str(shared / "corpus" / "claude-code")]
    found = pg_server.bindir()
    if found is None:
        sys.exit("PostgreSQL's initdb/pg_ctl are not installed (apt-get install postgresql)")
    server = pg_server.Server(found)
    silent = gemini_response({"needsCorrection": False, "message": None})
    stub = Stub(Reply(200, silent, delay=LATENCY))
    try:
        server.make_template()
        base = server.new_database()
        subprocess.run(auditor(base, "ingest", "-q", *corpus), check=False, capture_output=True)
        plan = subprocess.run(
            auditor(base, "run", "--dry-run", "--json", "--observer", "gemini", *GATE),
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "GEMINI_API_KEY": "AIza-bench"},
        )
        to_audit = json.loads(plan.stdout)["audited"]
        print(f"corpus: {' '.join(corpus)}; {to_audit} checkpoints to audit; observer {LATENCY}s")
        one = scenario(server, base, stub, 1, args.jobs, to_audit)
        many = scenario(server, base, stub, args.workers, args.jobs, to_audit)
        killed = scenario(server, base, stub, args.workers, args.jobs, to_audit, kill=True)
        for row in (one, many, killed):
            print(json.dumps(row))
        print(
            f"throughput {args.workers} workers / 1: "
            f"{many['audits_per_s'] / one['audits_per_s']:.2f}x (goal >= 3.5); "
            f"duplicate calls {many['duplicate_calls']}, recorded twice {many['recorded_twice']}; "
            f"one of {args.workers} SIGKILLed: lost {killed['lost']}, recorded twice "
            f"{killed['recorded_twice']}, re-sent {killed['duplicate_calls']} "
            f"(it had <= {killed['killed_worker_in_flight']} in flight)"
        )
    finally:
        stub.close()
        server.stop()


if __name__ == "__main__":
    main()
