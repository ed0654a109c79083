"""A damaged spool file (cut short by a crash or a full disk, emptied by hand) is set aside in
DIR/damaged with a line in the worker's log, and the session's audits go on: the next end of
turn is audited and its correction staged. Through the real hook command and worker.
"""

from __future__ import annotations

import json

import pytest
from helpers.wire import Reply, anthropic_response
from test_hook_live import END, FINAL, cc, stub  # noqa: F401 (fixtures)

DAMAGES = {
    # a hand-over record without its fields: every new worker crashed on it (KeyError)
    "sent-empty": ("sent/000000000007.Stop.json", "{}"),
    # a staged correction cut short: it held every later one back (one-per-gap)
    "outbox-truncated": ("outbox/000000000007.json", '{"verdict_id": 7, "thread": "1af7'),
    # the worker's place in the events past their end (the events were cut)
    "state-past-the-end": ("worker.state", json.dumps({"offset": 10**9, "corrected": []})),
    # a last event line cut short: the next event was glued to it and lost
    "events-truncated": ("events.jsonl", '{"hook_event_name": "Stop", "thread": "1af7'),
}


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_damaged_spool_file_is_set_aside_and_the_audits_go_on(cc, damage):  # noqa: F811
    name, text = DAMAGES[damage]
    (cc.sdir / name).parent.mkdir(parents=True, exist_ok=True)
    (cc.sdir / name).write_text(text)
    cc.stub.default = Reply(200, anthropic_response({"needsCorrection": True, "message": END}))
    cc.grow(FINAL)
    assert cc.event("Stop") == ""
    damaged = cc.sdir / name

    def staged() -> bool:
        return any(p != damaged for p in (cc.sdir / "outbox").glob("*.json"))

    cc.wait_until(staged, why=f"the end-of-turn correction despite {damage}")
    if damage in ("sent-empty", "outbox-truncated"):
        assert not damaged.exists()
        assert (cc.sdir / "damaged").is_dir()
        assert f"{name}: set aside in damaged/" in (cc.sdir / "worker.log").read_text()
