"""A live worker's lifetime has a ceiling: a session whose hooks keep firing (so the worker is
never idle) still sees it exit once the ceiling passes, saying why; the next event starts a
new one. Through the real hook command and worker.
"""

from __future__ import annotations

import os
import time

from test_hook_live import NO_EDIT, cc, stub  # noqa: F401 (fixtures)


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
