"""The whole corpus through SQLite and PostgreSQL: the same threads, verdicts and costs.

Both stores get the same ingest and the same run (the gemini backend against a local stub
speaking its wire format); the commands' JSON must be equal, but for what differs by nature:
row ids (PostgreSQL's sequences skip numbers on upserts), and each call's time and latency.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers.wire import Reply, Stub, gemini_response

pytestmark = [pytest.mark.corpus, pytest.mark.slow]

ANSWER = {"needsCorrection": True, "message": "Run the tests before saying they pass."}


def auditor(db: str, *args: str, env: dict | None = None, codes=(0,)) -> str:
    import os

    done = subprocess.run(
        [sys.executable, "-m", "auditor", "--db", db, *args],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **(env or {})},
        timeout=900,
    )
    assert done.returncode in codes, done.stderr
    return done.stdout


def without(rows: list[dict], *keys: str) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in keys} for r in rows]


def test_the_corpus_gives_the_same_results_on_sqlite_and_postgresql(corpus, tmp_path, pg_server):
    stub = Stub(Reply(200, gemini_response(ANSWER)))
    env = {"GEMINI_API_KEY": "AIza-TEST-dummy", "GOOGLE_GEMINI_BASE_URL": stub.url}
    results = {}
    try:
        for db in (str(tmp_path / "same.db"), pg_server.new_database()):
            auditor(db, "ingest", "-q", str(corpus), codes=(0, 1))  # 1: files it cannot read
            auditor(db, "run", "--observer", "gemini", "--max-retries", "0", env=env)
            threads = json.loads(auditor(db, "threads", "--json"))
            verdicts = json.loads(auditor(db, "verdicts", "--json", "-n", "0"))
            costs = json.loads(
                auditor(db, "report", "costs", "--by", "day,agent", "--format", "json")
            )
            results[db.split(":")[0]] = (threads, verdicts, costs)
    finally:
        stub.close()
    (threads, verdicts, costs), (pg_threads, pg_verdicts, pg_costs) = results.values()
    assert len(threads) > 50 and len(verdicts) > 50
    assert without(pg_threads, "id") == without(threads, "id")
    key = lambda v: (v["thread_native_id"], v["message_id"], v["kind"])  # noqa: E731
    volatile = ("id", "created_at", "run_id", "thread_id", "checkpoint_id", "latency_ms")
    assert without(sorted(pg_verdicts, key=key), *volatile) == without(
        sorted(verdicts, key=key), *volatile
    )
    assert pg_costs == costs
