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


def test_a_disk_that_refuses_writes_during_ingest_is_said_in_one_line(corpus, tmp_path):
    """The store's file may not grow past 3 MB (a file size limit, as a quota or a full disk
    would stop it): the ingest stops with one line, and what it stored before is intact."""
    import resource
    import signal

    def limited() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes past the limit fail, not kill
        resource.setrlimit(resource.RLIMIT_FSIZE, (3_000_000, 3_000_000))

    db = tmp_path / "store.db"
    done = subprocess.run(
        [sys.executable, "-m", "auditor", "--db", str(db), "ingest", str(corpus / "claude-code")],
        capture_output=True,
        text=True,
        preexec_fn=limited,
        timeout=600,
        check=False,
    )
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    said = done.stderr.strip().splitlines()
    assert said[-1].startswith(f"Error: The store {db} could not be written (disk I/O error"), said
    assert len(said) <= 3, said
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
