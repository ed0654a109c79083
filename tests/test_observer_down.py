"""An observer that cannot be reached (its server stopped, a wrong address) is not called for
every checkpoint: after a few connection failures in a row the run stops, saying so in one line,
and the same command resumes once the observer is back.

Real transcripts from the corpus; Anthropic's real SDK against a port nothing listens on, then
against a stub on 127.0.0.1 answering in its wire format.
"""

from __future__ import annotations

import os
import shutil
import socket
import sqlite3
import subprocess
import sys

import pytest
from helpers.wire import Reply, Stub, anthropic_response
from test_workers import GATE, SESSIONS

from auditor.audit.reachability import LIMIT

pytestmark = [pytest.mark.corpus]


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_run_stops_calling_an_observer_that_is_down(corpus, tmp_path):
    for rel in SESSIONS:
        shutil.copy(corpus / rel, tmp_path / os.path.basename(rel))
    db = tmp_path / "store.db"
    base = [sys.executable, "-m", "auditor", "--db", str(db)]
    subprocess.run([*base, "ingest", "-q", str(tmp_path)], check=True, timeout=300)
    env = {**os.environ, "ANTHROPIC_API_KEY": "sk-ant-test-dummy", "COLUMNS": "200"}
    run = [*base, "run", "--observer", "claude", "--max-retries", "0", "-j", "2", *GATE]
    down = subprocess.run(
        [*run, "--base-url", f"http://127.0.0.1:{closed_port()}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert down.returncode != 0
    said = down.stderr.strip().splitlines()[-1]
    # LIMIT failures in a row, and the other call (-j 2) that was in flight
    assert any(
        said.startswith(f"Error: Stopped: the claude observer could not be reached {n} times")
        for n in (LIMIT, LIMIT + 1)
    ), said
    assert said.endswith("then run the same command again to resume")
    with sqlite3.connect(db) as conn:
        errors = conn.execute("SELECT count(*) FROM verdicts WHERE status = 'error'").fetchone()[0]
        status = conn.execute("SELECT status FROM runs").fetchone()[0]
    assert LIMIT <= errors <= LIMIT + 1
    assert status == "failed"

    stub = Stub(Reply(body=anthropic_response({"needsCorrection": False, "message": None})))
    try:
        back = subprocess.run(
            [*run, "--base-url", stub.url],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
            check=False,
        )
    finally:
        stub.close()
    assert back.returncode == 0, back.stderr[-2000:]
    with sqlite3.connect(db) as conn:
        ok = conn.execute("SELECT count(*) FROM verdicts WHERE status = 'ok'").fetchone()[0]
    assert ok == len(stub.log) >= 12  # every checkpoint answered once the observer is back
