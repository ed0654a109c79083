"""Several machines ingesting into one PostgreSQL store at the same time.

Four `auditor ingest` processes start together on the same transcripts, standing in for
machines (`--source`): two of them the same machine, read twice at once. The store ends as one
ingest leaves it: each message once, one file per (source, path).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from auditor.store.db import open_db

pytestmark = pytest.mark.corpus

SOURCES = ["laptop-a", "laptop-a", "laptop-b", "ci-runner"]


def argv(db: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "auditor", "--db", db, *args]


def counts(db: str) -> dict[str, int]:
    engine = open_db(db)
    with engine.connect() as conn:
        out = {
            table: conn.exec_driver_sql(f"SELECT count(*) FROM {table}").scalar()
            for table in ("source_files", "threads", "messages", "tool_calls", "token_usage")
        }
        out["distinct files"] = conn.exec_driver_sql(
            "SELECT count(*) FROM (SELECT DISTINCT source, path FROM source_files) f"
        ).scalar()
    engine.dispose()
    return out


def test_four_ingesters_at_once_store_everything_once(corpus, tmp_path, pg_server):
    src = corpus / "claude-code" / "daaain-claude-code-log"
    files = tmp_path / "transcripts"
    shutil.copytree(src, files)
    n_files = sum(1 for p in files.rglob("*.jsonl") if p.stat().st_size)

    alone = pg_server.new_database()
    subprocess.run(argv(alone, "ingest", "-q", str(files)), check=True, timeout=600)

    shared = pg_server.new_database()
    procs = [
        subprocess.Popen(
            argv(shared, "ingest", "-q", "--source", name, str(files)),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in SOURCES
    ]
    results = [(p.wait(timeout=600), p.stdout.read(), p.stderr.read()) for p in procs]
    for p in procs:
        p.stdout.close()
        p.stderr.close()
    assert [r[0] for r in results] == [0] * 4, results

    one, four = counts(alone), counts(shared)
    assert four["source_files"] == four["distinct files"] == 3 * one["source_files"]
    assert one["source_files"] >= n_files > 5
    for table in ("threads", "messages", "tool_calls", "token_usage"):
        assert four[table] == one[table], table

    def threads(db: str) -> list[dict]:
        out = subprocess.run(
            argv(db, "threads", "--json"), capture_output=True, text=True, check=True
        ).stdout
        return [{k: v for k, v in t.items() if k != "id"} for t in json.loads(out)]

    assert threads(shared) == threads(alone)
