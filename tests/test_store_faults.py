"""The store failing under a run or an ingest: a SQLite file deleted mid-run, a full disk.
Each is said in one line and the command exits non-zero; nothing is reported as done that was
not kept.

Real transcripts from the corpus; the observer is the `local` backend (the real openai SDK)
against a stub on 127.0.0.1.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import time

import pytest
from helpers.wire import Reply, Stub, openai_response
from test_run_progress import SESSION, observer

pytestmark = [pytest.mark.corpus]


def test_a_store_deleted_during_the_run_is_said_and_fails_the_run(corpus, tmp_path):
    shutil.copy(corpus / SESSION, tmp_path / os.path.basename(SESSION))
    db = tmp_path / "store.db"
    base = [sys.executable, "-m", "auditor", "--db", str(db)]
    subprocess.run([*base, "ingest", "-q", str(tmp_path)], check=True, timeout=300)
    stub = Stub(Reply(body=openai_response(), delay=1.0))
    try:
        run = subprocess.Popen(
            [*base, "run", "-j", "1", *observer(stub)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and run.poll() is None:
            with sqlite3.connect(db) as conn:
                if conn.execute("SELECT count(*) FROM verdicts").fetchone()[0] >= 1:
                    break
            time.sleep(0.05)
        for path in tmp_path.glob("store.db*"):  # as a clean-up job would
            path.unlink()
        out, err = run.communicate(timeout=120)
    finally:
        stub.close()
    assert run.returncode != 0, err
    said = err.strip().splitlines()[-1]
    assert said.startswith(f"Error: The store {db} was deleted during the run: the ")
    assert "Traceback" not in err
    calls = [r for r in stub.log if r["path"].endswith("/chat/completions")]
    assert len(calls) < 3  # no call started once the file was gone (the session has 3)
