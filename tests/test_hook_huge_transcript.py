"""One session's transcript_path naming a huge file (one record, then gigabytes of NUL bytes: a
sparse file, a dump gone wrong) must not lock the other sessions out of the store. Its worker
reads a bounded part of the file per hook event and never holds the store's write lock while
it parses; the other sessions' workers, auditing their stops meanwhile, are not locked out (they
wait for the store up to its busy timeout, 30 s: before, the huge session's worker held it for
as long as it read, and each of them failed with `database is locked`). Against the real hook
command and workers, with a stand-in observer.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path

import pytest
from helpers.live import CC_SESSION, run_cli
from helpers.wire import Reply, Stub, anthropic_response

from auditor.live.fast_path import session_dir, state_root
from auditor.live.lookup import READ_PER_EVENT
from auditor.store.db import open_db

pytestmark = pytest.mark.corpus
KEY = {"ANTHROPIC_API_KEY": "sk-ant-TEST-dummy"}
SESSION = "1af7fc5e-8455-4414-9ccd-011d40f70b2a"
HUGE_ID = "0000huge-8455-4414-9ccd-011d40f70b2a"
HUGE = 256 << 30  # bytes of the sparse file: far more than any read of it may take
OTHERS = 4
CORRECTION = "The Write call was denied, so CLAUDE.md does not exist; say so."


@pytest.fixture
def stub():
    server = Stub(Reply(200, anthropic_response({"needsCorrection": True, "message": CORRECTION})))
    yield server
    server.close()


def transcript(corpus: Path, session: str) -> Path:
    """The corpus session as Claude Code leaves it at its stop, under another session id, where
    Claude Code keeps its transcripts."""
    path = Path.home() / ".claude" / "projects" / "-path-to-Demo" / f"{session}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text((corpus / CC_SESSION).read_text().replace(SESSION, session))
    return path


def huge_transcript(corpus: Path) -> Path:
    path = Path.home() / ".claude" / "projects" / "-path-to-Demo" / f"{HUGE_ID}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    first = (corpus / CC_SESSION).read_text().splitlines()[0].replace(SESSION, HUGE_ID)
    with open(path, "wb") as fh:
        fh.write(first.encode() + b"\n")
        fh.truncate(HUGE)  # NUL bytes to the end, no newline, no disk used
    return path


def stop(session: str, path: Path) -> str:
    return json.dumps(
        {
            "session_id": session,
            "transcript_path": str(path),
            "cwd": "/path/to/Demo",
            "hook_event_name": "Stop",
            "stop_hook_active": False,
        }
    )


def verdicts_of(store_url: str, session: str) -> int:
    """The verdicts recorded for the session's thread."""
    engine = open_db(store_url)
    try:
        with engine.connect() as conn:
            return conn.exec_driver_sql(
                "SELECT count(*) FROM verdicts v JOIN checkpoints c ON c.id = v.checkpoint_id "
                "JOIN threads t ON t.id = c.thread_id WHERE t.native_id = ?",
                (session,),
            ).scalar_one()
    finally:
        engine.dispose()


def bytes_read(pid: int) -> int:
    with open(f"/proc/{pid}/io") as fh:
        return int(next(line for line in fh if line.startswith("rchar:")).split()[1])


def peak_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        return int(next(line for line in fh if line.startswith("VmHWM:")).split()[1]) / 1024


def test_a_huge_transcript_locks_no_other_session_out(corpus, stub, store_url):
    open_db(store_url)  # migrated before the hooks run
    observer = ["--observer", "claude", "--base-url", stub.url, "--max-retries", "0"]
    # The huge session stops: its worker starts reading the transcript.
    done = run_cli(
        "hook",
        "claude-code",
        *observer,
        "--idle",
        "60",
        stdin=stop(HUGE_ID, huge_transcript(corpus)),
        env=KEY,
    )
    assert done.returncode == 0, done.stderr
    sdir = Path(session_dir(state_root(), "claude-code", HUGE_ID))
    deadline = time.monotonic() + 60
    pid = None
    while pid is None or bytes_read(pid) < 64 << 20:  # it is reading the NUL bytes
        assert time.monotonic() < deadline, "the huge session's worker never read its transcript"
        time.sleep(0.05)
        try:
            pid = int((sdir / "worker.lock").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            pid = None
    others = [f"{i:08x}-8455-4414-9ccd-011d40f70b2a" for i in range(OTHERS)]
    try:
        # Meanwhile the other sessions stop, each audited by a worker of its own.
        for session in others:
            done = run_cli(
                "hook",
                "claude-code",
                *observer,
                stdin=stop(session, transcript(corpus, session)),
                env=KEY,
            )
            assert done.returncode == 0, done.stderr
        audited, locked_out = set(), set()
        deadline = time.monotonic() + 240
        while len(audited | locked_out) < OTHERS:
            assert time.monotonic() < deadline, (audited, locked_out)
            time.sleep(0.5)
            for session in others:
                log = Path(session_dir(state_root(), "claude-code", session)) / "worker.log"
                said = log.read_text() if log.exists() else ""
                if "database is locked" in said:
                    locked_out.add(session)
                elif verdicts_of(store_url, session):
                    audited.add(session)
        assert (len(locked_out), len(audited)) == (0, OTHERS)
        log = sdir / "worker.log"
        deadline = time.monotonic() + 60
        while "read 256 MB of it at this event" not in log.read_text():
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        # What the worker held stayed bounded: one line's limit read, not the file.
        assert bytes_read(pid) < 2 * READ_PER_EVENT
        assert peak_mb(pid) < 600
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
