"""A worker never waits for the store with no end: a writer that holds the store's lock and
never lets it go (an `auditor ingest` stopped mid-write, a session left open in a shell) costs
the worker the event at hand, said in one line, and the worker still ends when the session is
idle. On SQLite the busy timeout bounded that wait already; on PostgreSQL the worker waited
for the ingest lock for ever, alive with nothing logged after "serving". Through the real hook
command and worker, on both stores.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time

import pytest
from sqlalchemy import text
from test_hook_live import FINAL, cc, stub, verdicts  # noqa: F401 (fixtures)

from auditor.ingest.ingester import INGEST_LOCK
from auditor.store.db import open_db

pytestmark = [pytest.mark.corpus, pytest.mark.both_stores]
LOCK_WAIT = 4  # seconds, for the worker (AUDITOR_LOCK_WAIT): the default 30 bounds it alike
ENDS_WITHIN = LOCK_WAIT + 90  # the lock wait, the idle wait and ample room: never reached


@contextlib.contextmanager
def lock_held(store_url: str):
    """Another process's write that holds the store's lock until the block ends: SQLite's
    write lock, or PostgreSQL's ingest lock (as an ingest writing a group holds it)."""
    engine = open_db(store_url)
    if engine.dialect.name == "sqlite":
        db = sqlite3.connect(engine.url.database, isolation_level=None)
        db.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            db.rollback()
            db.close()
            engine.dispose()
        return
    with engine.connect() as conn:
        tx = conn.begin()
        conn.execute(text(f"SELECT pg_advisory_xact_lock({INGEST_LOCK})"))
        try:
            yield
        finally:
            tx.rollback()
    engine.dispose()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_store_lock_never_let_go_costs_the_event_not_the_workers_end(cc, store_url, tmp_path):  # noqa: F811
    cc.idle = 3
    cc.env["AUDITOR_LOCK_WAIT"] = str(LOCK_WAIT)
    cc.grow(FINAL)
    with lock_held(store_url):
        cc.event("Stop")
        cc.wait_until(lambda: cc.worker_pid() is not None, why="the worker to start")
        pid = cc.worker_pid()
        started = time.monotonic()
        while alive(pid) and time.monotonic() - started < ENDS_WITHIN:
            time.sleep(0.5)
        log = (cc.sdir / "worker.log").read_text()
        assert not alive(pid), f"the worker waits on the store with no end:\n{log}"
    # One line says what happened, and no statement or traceback follows it.
    [said] = [line for line in log.splitlines() if "audit at Stop failed" in line]
    assert f"another process held the store's lock for {LOCK_WAIT:g} s" in said, log
    assert "[SQL:" not in log and "Traceback" not in log, log
    assert "idle: exiting" in log
    # The lock let go, the session's next stop is audited as usual.
    cc.event("Stop")
    cc.wait_until(lambda: len(verdicts(tmp_path)) == 1, why="the next stop's verdict")
