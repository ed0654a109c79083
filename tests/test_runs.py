"""`auditor runs`: a run killed with SIGKILL is shown as interrupted, never `running` forever."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

import pytest
from helpers.wire import Reply, Stub, openai_response
from sqlalchemy import select

from auditor.store import schema as s
from auditor.store.db import open_db
from auditor.store.run_rows import Heartbeat, list_runs

pytestmark = pytest.mark.both_stores

SESSION = (
    "claude-code/daaain-claude-code-log/-Users-dain-workspace-claude-code-log-sample/"
    "37f83ec9-f2ea-42a9-925e-0d5c105cb6e8.jsonl"
)


def auditor(*args: str, db) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "auditor", "--db", str(db), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def calling(stub) -> bool:
    """The run is under way: it sent an observer call (its backend's check came before)."""
    return any(r["path"].endswith("/chat/completions") for r in stub.log)


def run_status(db, run_id: int) -> str:
    engine = open_db(db)
    with engine.connect() as conn:
        status = conn.execute(select(s.Run.status).where(s.Run.id == run_id)).scalar_one()
    engine.dispose()
    return status


@pytest.mark.corpus
def test_a_killed_run_is_listed_as_interrupted(corpus, tmp_path, store_url):
    shutil.copy(corpus / SESSION, tmp_path / os.path.basename(SESSION))
    db = store_url
    assert auditor("ingest", "-q", str(tmp_path), db=db).returncode == 0
    silent = json.dumps({"needsCorrection": False, "message": None})
    stub = Stub(Reply(body=openai_response(silent), delay=30))  # still calling when listed
    stub.queue.append(Reply(body=openai_response(silent)))  # the backend's check, at once
    try:
        run = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "auditor",
                "--db",
                str(db),
                "run",
                "--observer",
                "local",
                "--base-url",
                stub.url + "/v1",
                "--min-tool-calls",
                "1",
                "--max-retries",
                "0",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while not calling(stub) and time.monotonic() < deadline and run.poll() is None:
            time.sleep(0.05)
        [live] = json.loads(auditor("runs", "--json", db=db).stdout)
        assert live["status"] == "running"  # alive and beating: left alone
        run.send_signal(signal.SIGKILL)
        run.wait()
    finally:
        stub.close()
    assert run_status(db, live["id"]) == "running"  # nothing wrote its end

    [killed] = json.loads(auditor("runs", "--json", db=db).stdout)
    assert killed["status"] == "interrupted" and killed["ended_at"] is not None
    assert killed["error"].startswith(
        f"stopped without finishing (process {run.pid} is gone; killed or crashed)"
    )
    assert run_status(db, live["id"]) == "interrupted"
    table = auditor("runs", db=db).stdout
    assert "interrupted" in table and "killed or crashed" in table


def add_run(engine, owner: str, silent_for: float) -> int:
    beat = datetime.now(UTC) - timedelta(seconds=silent_for)
    with engine.begin() as conn:
        return conn.execute(
            s.Run.__table__.insert()
            .values(
                started_at=beat - timedelta(minutes=1),
                heartbeat_at=beat,
                status="running",
                owner=owner,
                observer="local",
                model="m",
            )
            .returning(s.Run.id)
        ).scalar_one()


def test_a_run_of_another_machine_is_interrupted_once_it_stops_beating(engine):
    quiet = add_run(engine, "other-host:4242:abcd1234", silent_for=600)
    beating = add_run(engine, "other-host:4243:abcd1234", silent_for=10)
    listed = {r["id"]: r for r in list_runs(engine)}
    assert listed[beating]["status"] == "running"
    assert listed[quiet]["status"] == "interrupted"
    assert listed[quiet]["error"].startswith(
        "stopped without finishing (no heartbeat for 600 s; killed or crashed)"
    )


def test_a_working_run_keeps_beating(engine):
    run_id = add_run(engine, "other-host:4242:abcd1234", silent_for=600)
    heart = Heartbeat(engine, run_id, every=0.05)
    try:
        time.sleep(0.5)
    finally:
        heart.stop()
    [run] = list_runs(engine)
    assert run["status"] == "running"
    assert datetime.fromisoformat(run["heartbeat_at"]) > datetime.now(UTC) - timedelta(seconds=5)


def test_runs_has_the_wide_option_its_footer_names(tmp_path, monkeypatch):
    """At 80 columns the table leaves out `corrections` (never `errors`: a run whose calls all
    failed must show it) and says '--wide shows all': that option did not exist ('No such
    option: --wide', exit 2)."""
    db = tmp_path / "auditor.db"
    with open_db(db).begin() as conn:
        conn.execute(
            s.Run.__table__.insert().values(
                started_at=datetime.now(UTC),
                heartbeat_at=datetime.now(UTC),
                ended_at=datetime.now(UTC),
                status="done",
                owner="qa",
                observer="embedded",
                model="gemma-3-270m-q4_k_m",
            )
        )
    monkeypatch.setenv("COLUMNS", "80")
    narrow = auditor("runs", db=db)
    assert narrow.returncode == 0
    assert "(left out for width: corrections; --wide shows all)" in narrow.stdout
    assert "errors" in narrow.stdout.splitlines()[0]
    wide = auditor("runs", "--wide", db=db)
    assert wide.returncode == 0, wide.stderr
    assert (
        "corrections" in wide.stdout.splitlines()[0]
        and "embedded gemma-3-270m-q4_k_m" in wide.stdout
    )
    assert "left out" not in wide.stdout
