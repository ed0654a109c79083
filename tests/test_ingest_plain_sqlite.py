"""`auditor ingest` into a SQLite store writes through the sqlite3 module alone: importing
SQLAlchemy cost a cold ingest more than reading a small corpus. The same rows as the engine's
road (the live worker's, PostgreSQL's), which the other ingest tests cover on both stores.
"""

from __future__ import annotations

import ast
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

from auditor.ingest.ingester import Ingester
from auditor.plugins import get_plugin_manager
from auditor.store.db import open_db

SAMPLES = Path(__file__).resolve().parent.parent / "data" / "samples"
# What each table holds, less the times of the ingest itself.
TABLES = {
    "threads": "agent, native_id, title, cwd, message_count, tool_call_count, models, meta",
    "messages": "thread_id, native_id, seq, role, timestamp, model, blocks",
    "tool_calls": "thread_id, call_id, name, result_message_id, is_error, edited_paths",
    "token_usage": "thread_id, key, model, timestamp, input_tokens, output_tokens",
    "source_files": 'path, format, size, mtime_ns, "offset", lines, parser_state',
    "events": "type, subject, data",
}


def ingest_command(db: Path) -> tuple[dict, list[str]]:
    """Run `auditor ingest --json` of the samples into `db`; return its summary and the
    SQLAlchemy modules the process had loaded when it ended."""
    probe = (
        "import atexit, sys\n"
        "atexit.register(lambda: print(sorted(m for m in sys.modules "
        "if m.split('.')[0] == 'sqlalchemy'), file=sys.stderr))\n"
        "sys.argv = ['auditor', 'ingest', '--json', sys.argv[1]]\n"
        "from auditor.entry import main\n"
        "main()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, str(SAMPLES)],
        capture_output=True,
        text=True,
        env={**os.environ, "AUDITOR_DB": str(db), "AUDITOR_SOURCE": "laptop"},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), ast.literal_eval(done.stderr.strip().splitlines()[-1])


def rows(db: Path) -> dict[str, list[tuple]]:
    with sqlite3.connect(db) as conn:
        found = {
            table: conn.execute(f"SELECT {columns} FROM {table} ORDER BY 1, 2").fetchall()
            for table, columns in TABLES.items()
        }
        # The full-text index, word by word: each word's messages and places in them.
        conn.execute("CREATE VIRTUAL TABLE temp.words USING fts5vocab(main, search_fts, instance)")
        found["search index"] = conn.execute("SELECT * FROM temp.words").fetchall()
    return found


def test_a_cold_ingest_into_a_new_sqlite_store_never_imports_sqlalchemy(tmp_path):
    summary, loaded = ingest_command(tmp_path / "new.db")
    assert summary["failed"] == 0 and summary["messages"] > 0
    assert loaded == []


def test_a_store_at_the_current_schema_is_written_without_sqlalchemy_too(tmp_path):
    db = tmp_path / "made.db"
    open_db(db).dispose()  # made and migrated by the engine, as any other command would
    summary, loaded = ingest_command(db)
    assert summary["messages"] > 0 and loaded == []
    again, _ = ingest_command(db)
    assert again["skipped"] == summary["files_seen"] - summary["empty"] and again["messages"] == 0


def test_the_rows_are_those_the_engine_writes(tmp_path):
    ingest_command(tmp_path / "plain.db")
    engine = open_db(tmp_path / "engine.db")
    Ingester(engine, get_plugin_manager(), source="laptop").run([SAMPLES])
    engine.dispose()
    plain, through_engine = rows(tmp_path / "plain.db"), rows(tmp_path / "engine.db")
    assert all(plain[table] for table in ("threads", "messages", "search index", "events"))
    assert plain == through_engine


def test_times_are_stored_as_the_engine_writes_them(tmp_path):
    """Ingest through sqlite3 formats each time itself (`stored_time`); the text is the one
    SQLAlchemy's DateTime writes, so both roads store and sort times alike."""
    from datetime import UTC, datetime, timedelta, timezone

    from sqlalchemy import Column, DateTime, Integer, MetaData, Table, create_engine, insert

    from auditor.store.sql_text import stored_time

    times = [
        datetime(2025, 9, 1, 12, 34, 56, 789000, tzinfo=UTC),  # as parsers give them
        datetime(2025, 9, 1, 12, 34, 56, tzinfo=UTC),  # no fraction of a second
        datetime(987, 6, 7, 8, 9, 10, 11, tzinfo=UTC),  # a year of three digits
        datetime(2025, 5, 6, 23, 8, 9, 5, tzinfo=timezone(timedelta(hours=5, minutes=30))),
        datetime(2024, 12, 31, 23, 59, 59, 999999),  # no zone: taken as UTC
    ]
    engine = create_engine(f"sqlite:///{tmp_path / 'times.db'}")
    table = Table("t", MetaData(), Column("id", Integer, primary_key=True), Column("at", DateTime))
    table.metadata.create_all(engine)
    with engine.begin() as conn:
        for at in times:
            utc = at.astimezone(UTC).replace(tzinfo=None) if at.tzinfo else at
            conn.execute(insert(table).values(at=utc))
    with sqlite3.connect(tmp_path / "times.db") as raw:
        written = [at for (at,) in raw.execute("SELECT at FROM t ORDER BY id")]
    assert [stored_time(at, True) for at in times] == written
    assert written[1] == "2025-09-01 12:34:56.000000"


def test_a_new_store_has_the_larger_pages_on_either_road(tmp_path):
    from auditor.store.sql_text import PAGE_SIZE

    ingest_command(tmp_path / "plain.db")
    open_db(tmp_path / "engine.db").dispose()
    for name in ("plain.db", "engine.db"):
        with sqlite3.connect(tmp_path / name) as conn:
            assert conn.execute("PRAGMA page_size").fetchone()[0] == PAGE_SIZE == 8192


def test_a_store_made_with_smaller_pages_keeps_them_and_stores_the_same(tmp_path):
    """Stores made before the pages grew keep 4 KiB pages (SQLite cannot change them in WAL
    mode): ingest writes into them as into a new store."""
    from auditor.store.new_store import create_if_new

    old = tmp_path / "old.db"
    with sqlite3.connect(old) as conn:
        conn.execute("PRAGMA page_size=4096")
        conn.execute("PRAGMA journal_mode=WAL")
        assert create_if_new(conn)
    summary, _ = ingest_command(old)
    ingest_command(tmp_path / "new.db")
    with sqlite3.connect(old) as conn:
        assert conn.execute("PRAGMA page_size").fetchone()[0] == 4096
    assert summary["messages"] > 0
    assert rows(old) == rows(tmp_path / "new.db")
