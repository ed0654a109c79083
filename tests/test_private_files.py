"""What auditor keeps on disk is its user's alone: the store (transcripts, the observer's
answers) is created 0600 in folders it makes 0700, and the live hooks' spool likewise, every
file and folder of it; the spool keeps of the agent's last message only the end its worker
needs. Checked against the real `auditor` command, hook and worker.
"""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

from helpers.wire import Reply, anthropic_response
from test_hook_live import END, FINAL, cc, stub  # noqa: F401 (fixtures)

from auditor.live.fast_path import LAST_MESSAGE_KEPT, state_root


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_store_and_its_new_folders_are_the_owners_alone(tmp_path, corpus):
    store = tmp_path / "new" / "place" / "auditor.db"
    done = subprocess.run(
        [sys.executable, "-m", "auditor", "--db", str(store), "ingest", "-q", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert mode(store) == 0o600
    assert mode(store.parent) == mode(store.parent.parent) == 0o700
    for companion in tmp_path.glob("new/place/auditor.db-*"):  # -wal, -shm while open
        assert mode(companion) == 0o600


def test_the_spool_is_the_owners_alone_and_keeps_the_end_of_the_last_message(cc):  # noqa: F811
    cc.stub.default = Reply(200, anthropic_response({"needsCorrection": True, "message": END}))
    cc.grow(FINAL)
    said = "MARKER-AT-THE-START " + "x" * 50_000 + " the end of the agent's message"
    assert cc.event("Stop", last_assistant_message=said) == ""
    cc.event("Stop")
    cc.wait_until(cc.staged, why="the end-of-turn correction")
    root = Path(state_root())
    made = [root, *root.rglob("*")]
    assert (cc.sdir / "outbox").is_dir() and (cc.sdir / "worker.env").exists()
    wrong = [
        (str(p.relative_to(root.parent)), oct(mode(p)))
        for p in made
        if mode(p) != (0o700 if p.is_dir() else 0o600)
    ]
    assert not wrong
    events = (cc.sdir / "events.jsonl").read_text()
    assert "MARKER-AT-THE-START" not in events
    kept = [json.loads(line).get("last_assistant_message") for line in events.splitlines()]
    assert said[-LAST_MESSAGE_KEPT:] in kept
