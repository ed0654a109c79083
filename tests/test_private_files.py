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


def threads(store: Path) -> str:
    """Run `auditor threads` on `store`; return what it said on stderr."""
    done = subprocess.run(
        [sys.executable, "-m", "auditor", "--db", str(store), "threads"],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stderr


def test_a_store_an_older_auditor_left_open_is_made_the_owners_alone_once():
    from auditor.store.db import default_path

    store = default_path()
    threads(store)
    # As an older auditor left it: the store 0644 in its default folder 0755.
    for path in (store, *store.parent.glob("auditor.db-*")):
        path.chmod(0o644)
    store.parent.chmod(0o755)
    said = threads(store)
    assert (mode(store), mode(store.parent)) == (0o600, 0o700)
    [note] = [line for line in said.splitlines() if "readable by others" in line]
    assert note.startswith(f"auditor: the store {store} was readable by others (auditor 0755, ")
    assert "auditor.db 0644" in note and "now yours alone" in note
    assert "readable by others" not in threads(store)  # said once


def test_a_store_in_a_folder_of_the_users_choice_keeps_that_folders_mode(tmp_path):
    shared = tmp_path / "team"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)
    store = shared / "auditor.db"
    store.touch(mode=0o644)
    store.chmod(0o644)
    said = threads(store)
    assert (mode(store), mode(shared)) == (0o600, 0o755)
    assert "readable by others (auditor.db 0644)" in said


def test_a_spool_an_older_auditor_left_open_is_made_the_owners_alone(cc):  # noqa: F811
    # Another session's spool as an older auditor left it: folders 0755, files 0644.
    root = Path(state_root())
    old = root / "claude-code" / "an-older-session"
    (old / "outbox").mkdir(parents=True)
    (old / "events.jsonl").write_text('{"hook_event_name": "Stop"}\n')
    (old / "outbox" / "1.json").write_text('{"message": "what the agent wrote"}')
    for path in [root.parent.parent, root.parent, *root.rglob("*"), root]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    cc.grow(FINAL)
    cc.event("UserPromptSubmit", prompt="go on")  # starts the session's worker
    cc.wait_until(
        lambda: "made yours alone" in (cc.sdir / "worker.log").read_text(),
        why="the worker's note",
    )
    made = [root.parent.parent, root.parent, root, *root.rglob("*")]
    wrong = [
        (str(p.relative_to(root.parent.parent)), oct(mode(p))) for p in made if mode(p) & 0o077
    ]
    assert not wrong
    [note] = [
        line for line in (cc.sdir / "worker.log").read_text().splitlines() if "readable" in line
    ]
    assert note.endswith("of its files and folders made yours alone (0600 / 0700)")


def test_a_spool_in_a_folder_of_the_users_choice_leaves_the_rest_of_that_folder_alone(
    tmp_path, monkeypatch
):
    from auditor.live.fast_path import STATE_ENV
    from auditor.live.worker import make_spool_private

    # $AUDITOR_STATE_DIR pointed at a shared folder, as /tmp is: sticky and open to everyone,
    # holding other people's work beside the spool.
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    theirs = shared / "someone-elses" / "notes.txt"
    theirs.parent.mkdir()
    theirs.write_text("not auditor's")
    theirs.chmod(0o644)
    theirs.parent.chmod(0o755)
    monkeypatch.setenv(STATE_ENV, str(shared))
    session = Path(state_root()) / "claude-code" / "a-session"
    (session / "outbox").mkdir(parents=True)
    (session / "events.jsonl").write_text("{}\n")
    for path in [Path(state_root()), *Path(state_root()).rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)

    assert make_spool_private(str(session)) == 5
    assert (mode(shared), mode(theirs.parent), mode(theirs)) == (0o1777, 0o755, 0o644)
    spool = [Path(state_root()), *Path(state_root()).rglob("*")]
    assert [oct(mode(p)) for p in spool if mode(p) & 0o077] == []


def test_a_session_folder_outside_the_spools_layout_is_tightened_alone(tmp_path):
    from auditor.live.worker import make_spool_private

    session = tmp_path / "spool"
    (session / "outbox").mkdir(parents=True)
    for path in [tmp_path, session, session / "outbox"]:
        path.chmod(0o755)
    assert make_spool_private(str(session)) == 2
    assert (mode(tmp_path), mode(session), mode(session / "outbox")) == (0o755, 0o700, 0o700)
