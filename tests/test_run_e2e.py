"""End to end on real transcripts: ingest, run, kill the run midway, run again.

The observer is the `local` backend (the real openai SDK) against a slow stub server on
127.0.0.1; the run is a real subprocess stopped with a real SIGKILL.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
from helpers.wire import Reply, Stub, openai_response

from auditor.store.db import open_db

pytestmark = pytest.mark.both_stores

SESSIONS = [
    "claude-code/daaain-claude-code-log/-Users-dain-workspace-claude-code-log-sample/37f83ec9-f2ea-42a9-925e-0d5c105cb6e8.jsonl",
    "claude-code/daaain-claude-code-log/-Users-dain-workspace-danieldemmel-me-next/9e953218-585f-4692-89df-9e0747a31c68.jsonl",
]


def auditor(*args: str, db, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "auditor", "--db", str(db), *args],
        capture_output=True,
        text=True,
        check=False,
        **kwargs,
    )


def verdict_rows(db) -> list[tuple]:
    engine = open_db(db, migrate=False)
    with engine.connect() as conn:
        rows = [
            tuple(r) for r in conn.exec_driver_sql("SELECT checkpoint_id, status FROM verdicts")
        ]
    engine.dispose()
    return rows


@pytest.fixture
def stub():
    silent = json.dumps({"needsCorrection": False, "message": None})
    server = Stub(Reply(body=openai_response(silent), delay=0.3))
    yield server
    server.close()


@pytest.mark.slow
def test_a_killed_run_loses_nothing_and_repeats_nothing(corpus, tmp_path, stub, store_url):
    for rel in SESSIONS:
        shutil.copy(corpus / rel, tmp_path / os.path.basename(rel))
    db = store_url
    assert auditor("ingest", "-q", str(tmp_path), db=db).returncode == 0

    observer = [
        "--observer",
        "local",
        "--base-url",
        stub.url + "/v1",
        "--min-tool-calls",
        "1",
        "--max-retries",
        "0",
    ]
    planned = auditor("run", "--dry-run", "--json", *observer, db=db)
    to_audit = json.loads(planned.stdout)["audited"]
    assert to_audit >= 8, planned.stderr

    run = subprocess.Popen(
        [sys.executable, "-m", "auditor", "--db", str(db), "run", "-j", "2", *observer],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while len(verdict_rows(db)) < 3 and time.monotonic() < deadline and run.poll() is None:
        time.sleep(0.05)
    run.send_signal(signal.SIGKILL)
    run.wait()
    before = verdict_rows(db)
    assert 3 <= len(before) < to_audit, "the kill should land midway"

    finish = auditor("run", "--json", "-j", "4", *observer, db=db)
    assert finish.returncode == 0, finish.stderr
    summary = json.loads(finish.stdout)
    after = verdict_rows(db)
    checkpoints = [cp for cp, _ in after]
    assert len(checkpoints) == len(set(checkpoints)) == to_audit  # none twice, none lost
    assert summary["reused"] == len(before) and summary["audited"] == to_audit - len(before)
    assert {status for _, status in after} == {"ok"}
    # A third run has nothing left to pay for.
    again = json.loads(auditor("run", "--json", *observer, db=db).stdout)
    assert again["audited"] == 0 and again["reused"] == to_audit
