"""Several `auditor run` workers on one PostgreSQL store: the work is shared through leases
claimed with FOR UPDATE SKIP LOCKED; nothing is called twice, and a worker SIGKILLed mid-run
loses nothing (the others make what it had not recorded)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest
from helpers.wire import Reply, Stub, gemini_response

from auditor.store.db import open_db

pytestmark = [pytest.mark.corpus, pytest.mark.slow]

SESSIONS = [
    "claude-code/daaain-claude-code-log/-Users-dain-workspace-claude-code-log-sample/37f83ec9-f2ea-42a9-925e-0d5c105cb6e8.jsonl",
    "claude-code/daaain-claude-code-log/-Users-dain-workspace-danieldemmel-me-next/9e953218-585f-4692-89df-9e0747a31c68.jsonl",
]
GATE = ["--mode", "every-inference", "--min-tool-calls", "1"]


def verdicts(db: str) -> list[tuple]:
    engine = open_db(db, migrate=False)
    with engine.connect() as conn:
        rows = [
            tuple(r)
            for r in conn.exec_driver_sql("SELECT checkpoint_id, status, run_id FROM verdicts")
        ]
    engine.dispose()
    return rows


@pytest.mark.parametrize("kill", [False, True], ids=["all-finish", "one-killed"])
@pytest.mark.parametrize("sessions", [SESSIONS, SESSIONS[1:]], ids=["two-threads", "one-thread"])
def test_workers_share_the_calls_and_lose_none(corpus, tmp_path, pg_server, kill, sessions):
    """With one thread, the workers that find it held help with it from its end."""
    for rel in sessions:
        shutil.copy(corpus / rel, tmp_path / os.path.basename(rel))
    db = pg_server.new_database()
    base = [sys.executable, "-m", "auditor", "--db", db]
    subprocess.run([*base, "ingest", "-q", str(tmp_path)], check=True, timeout=300)
    env = {**os.environ, "GEMINI_API_KEY": "AIza-TEST-dummy"}
    planned = subprocess.run(
        [*base, "run", "--dry-run", "--json", "--observer", "gemini", *GATE],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    to_audit = json.loads(planned.stdout)["audited"]
    assert to_audit >= 12

    stub = Stub(Reply(200, gemini_response({"needsCorrection": False, "message": None}), delay=0.3))
    env["GOOGLE_GEMINI_BASE_URL"] = stub.url
    run = [*base, "run", "--observer", "gemini", "--max-retries", "0", "-j", "2", *GATE]
    try:
        workers = [
            subprocess.Popen(run, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for _ in range(3)
        ]
        if kill:
            deadline = time.monotonic() + 120
            while len(verdicts(db)) < 4 and time.monotonic() < deadline:
                time.sleep(0.05)
            workers[0].send_signal(signal.SIGKILL)
        codes = [w.wait(timeout=600) for w in workers]
    finally:
        stub.close()
    assert codes[1:] == [0, 0] and codes[0] == (-signal.SIGKILL if kill else 0)
    rows = verdicts(db)
    answered = Counter(cp for cp, status, _ in rows if status == "ok")
    assert len(answered) == to_audit  # none lost
    assert set(answered.values()) == {1}  # none recorded twice
    sent = Counter(json.dumps(r["body"], sort_keys=True) for r in stub.log)
    resent = sum(n - 1 for n in sent.values())
    # Only a call the killed worker had in flight (at most -j 2) is ever sent again.
    assert resent == 0 if not kill else resent <= 2
    assert len({run for _, _, run in rows}) >= 2  # the work was shared


def test_claims_older_than_a_day_that_nobody_holds_are_dropped(pg_server):
    from datetime import UTC, datetime, timedelta

    from auditor.store import leases
    from auditor.store import schema as s

    engine = open_db(pg_server.new_database())
    now = datetime.now(UTC)
    claims = s.Claim.__table__
    rows = [
        ("old-done", leases.DONE, 30),
        ("new-done", leases.DONE, 2),
        ("old-of-a-dead-worker", "host:1:x", 30),
        ("old-held", "host:2:y", 30),
    ]
    with engine.begin() as conn:
        for key, owner, age in rows:
            at = now - timedelta(hours=age)
            conn.execute(claims.insert().values(key=key, owner=owner, claimed_at=at, expires_at=at))
    holder = leases.hold(engine, "old-held", None, "host:2:y")  # a live worker's lease
    assert holder is not None
    assert leases.forget_old(engine, now - timedelta(days=1)) == 2
    with engine.connect() as conn:
        kept = sorted(conn.scalars(claims.select().with_only_columns(claims.c.key)))
    assert kept == ["new-done", "old-held"]
    leases.let_go(holder, "old-held")
    engine.dispose()


def test_a_run_that_is_over_stops_waiting_for_a_thread_another_worker_holds(pg_server):
    """A run whose calls failed ends: its planning thread, waiting for a thread another worker
    holds (which may itself wait for this run's leases), is told to stop."""
    import threading
    from types import SimpleNamespace

    from auditor.audit.run_types import RunSummary
    from auditor.audit.sharing import WAIT_FOR_THREADS, LeasedSharing
    from auditor.store import leases

    engine = open_db(pg_server.new_database())
    observing = SimpleNamespace(name="gemini", model="m", prompt=SimpleNamespace(sha256="p"))
    sharing = LeasedSharing(engine, observing, RunSummary(None, "gemini", "m"), "host:1:me", 60)
    thread = SimpleNamespace(id=1, message_count=3, ended_at=None)
    planner = SimpleNamespace(
        threads=lambda busiest_first: [thread],
        checkpoints=SimpleNamespace(gate_config={"mode": "end-turn"}),
    )
    key = sharing._thread_key(thread)
    other = leases.hold(engine, key, None, "host:2:other")  # another worker's thread
    assert other is not None
    ended = threading.Event()
    planning = threading.Thread(target=lambda: (list(sharing.jobs(planner)), ended.set()))
    planning.start()
    try:
        assert not ended.wait(3 * WAIT_FOR_THREADS)  # it waits for the other worker...
        sharing.stop()
        assert ended.wait(60)  # ...until the run is over
    finally:
        leases.let_go(other, key)
        planning.join(60)
        engine.dispose()
