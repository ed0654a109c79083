"""Helpers for the live re-injection tests: run the real `auditor` CLI as a subprocess on real
transcripts copied from the corpus, with the observer a local stub in the provider's wire format."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import select

# A real Claude Code session that ends a turn claiming a CLAUDE.md it was not allowed to write.
CC_SESSION = "claude-code/d-kimuson-claude-code-viewer/sample-project/1af7fc5e-8455-4414-9ccd-011d40f70b2a.jsonl"
# A real Codex rollout; its turn ends at line 221 after 30 tool calls and an edit.
CODEX_ROLLOUT = (
    "codex/aneesh199608-dslint/sessions/2025/12/09/"
    "rollout-2025-12-09T14-27-29-019b0254-78dd-7ea3-9224-5ae646e225ea.jsonl"
)
CODEX_TURN_END = 222  # lines: the final agent message and its token count
CORRECTION = (
    "You did not write CLAUDE.md: the Write call was denied. Ask for permission, then write it."
)


def auditor_argv() -> list[str]:
    """The installed `auditor` script beside this Python, else the same entry point via -c."""
    script = Path(sys.executable).parent / "auditor"
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-c", "from auditor.cli.main import main; main()"]


def run_cli(
    *args: str, stdin: str = "", env: dict | None = None, timeout: float = 60
) -> subprocess.CompletedProcess:
    full = {**os.environ, **(env or {})}
    return subprocess.run(
        auditor_argv() + list(args),
        input=stdin,
        capture_output=True,
        text=True,
        env=full,
        timeout=timeout,
        check=False,
    )


def copy_lines(src: Path, dest: Path, lines: int | None = None) -> Path:
    """Copy the first `lines` lines of `src` (all when None) to `dest`, writable."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    if lines is None:
        shutil.copyfile(src, dest)
    else:
        with open(src, "rb") as fh:
            head = b"".join(line for _, line in zip(range(lines), fh))
        dest.write_bytes(head)
    os.chmod(dest, 0o644)
    return dest


def append_lines(path: Path, src: Path, start: int, stop: int) -> None:
    """Append lines [start, stop) (0-based) of `src` to `path`."""
    with open(src, "rb") as fh:
        chunk = [line for i, line in enumerate(fh) if start <= i < stop]
    with open(path, "ab") as out:
        out.writelines(chunk)


def last_record(path: Path) -> dict:
    return json.loads(path.read_bytes().splitlines()[-1])


def rows(engine, table, *where):
    with engine.connect() as conn:
        return conn.execute(select(table.__table__).where(*where).order_by(table.id)).all()


def stored(table, *where):
    """The rows of `table` in the store the commands use (AUDITOR_DB: SQLite or PostgreSQL)."""
    from auditor.store.db import open_db

    engine = open_db(os.environ["AUDITOR_DB"])
    try:
        return rows(engine, table, *where)
    finally:
        engine.dispose()


@contextmanager
def store_locked(store: str):
    """Inside the block nobody else can write to `store` (a long ingest, say): SQLite's
    exclusive lock, or on PostgreSQL an EXCLUSIVE lock on every table."""
    if store.startswith("postgresql"):
        import psycopg

        with psycopg.connect(store.replace("+psycopg", "")) as conn:
            tables = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
            names = ", ".join(f'"{name}"' for (name,) in tables)
            conn.execute(f"LOCK TABLE {names} IN EXCLUSIVE MODE")  # reads go on, as in WAL
            yield
            conn.rollback()
        return
    conn = sqlite3.connect(store, isolation_level=None, timeout=0)
    try:
        conn.execute("BEGIN EXCLUSIVE")
        yield
        conn.execute("ROLLBACK")
    finally:
        conn.close()


def hold_lock(store: str, seconds: float) -> threading.Thread:
    """`store_locked` for `seconds` in a thread of its own; return once the lock is held."""
    ready = threading.Event()

    def hold():
        with store_locked(store):
            ready.set()
            time.sleep(seconds)

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    ready.wait(10)
    return holder
