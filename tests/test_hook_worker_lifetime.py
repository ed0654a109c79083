"""A live worker's lifetime has a ceiling: a session whose hooks keep firing (so the worker is
never idle), or whose events keep an audit under way, still sees it exit once the ceiling
passes, saying why; the next event starts a new one. Through the real hook command and worker.
"""

from __future__ import annotations

import os
import time

import pytest
from helpers.wire import Reply, Stub
from test_hook_live import NO_EDIT, WRITE, Session, cc, stub  # noqa: F401 (fixtures)

pytestmark = pytest.mark.corpus


def test_a_busy_sessions_worker_exits_at_its_lifetime_ceiling(cc):  # noqa: F811
    cc.env["AUDITOR_WORKER_LIFETIME"] = "3"
    cc.grow(NO_EDIT)
    cc.event("PostToolUse", tool_name="TodoWrite")  # gated out; the worker starts
    cc.wait_until(lambda: cc.worker_pid() is not None, why="the worker to start")
    first = cc.worker_pid()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # an event every half second: never idle (--idle 20)
        cc.event("PostToolUse", tool_name="TodoWrite")
        try:
            os.kill(first, 0)
        except ProcessLookupError:
            break
        time.sleep(0.5)
    log = (cc.sdir / "worker.log").read_text()
    assert f"worker {first} serving" in log
    assert "lifetime ceiling (3 s): exiting" in log, log[-2000:]


@pytest.fixture
def overloaded(corpus, tmp_path):
    """A session whose observer keeps failing, slowly: each call ends in an error verdict after
    2 s, so each event of the same tool round is audited again (an error is no answer)."""
    server = Stub(Reply(529, {"type": "error", "error": {"type": "overloaded_error"}}, delay=2))
    session = Session(corpus, tmp_path, server)
    yield session
    session.stop_worker()
    server.close()


def test_a_worker_kept_busy_by_its_events_still_exits_at_its_ceiling(overloaded):
    """Before, the ceiling took only a worker with nothing under way: events that kept an audit
    running (the same round audited again and again) kept the worker past it for as long as
    they came. Past its lifetime a worker takes no new event and exits once its audits under
    way are done; the session's next event starts the next worker, which takes them up."""
    s = overloaded
    s.env["AUDITOR_WORKER_LIFETIME"] = "3"
    s.grow(WRITE)
    s.event("PostToolUse")  # the gate passes: the Write call
    s.wait_until(lambda: s.worker_pid() is not None, why="the worker to start")
    first = s.worker_pid()
    deadline = time.monotonic() + 40  # far past 3 s and the calls under way at that time
    while time.monotonic() < deadline:
        s.event("PostToolUse")
        try:
            os.kill(first, 0)
        except ProcessLookupError:
            break
        time.sleep(0.5)
    log = (s.sdir / "worker.log").read_text()
    assert "lifetime ceiling (3 s): exiting" in log, log[-2000:]
    s.event("PostToolUse")
    s.wait_until(lambda: s.worker_pid() not in (None, first), why="the next worker to start")
    s.wait_until(lambda: len(s.stub.log) >= 2, why="the next worker's audit")
