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
    "search_fts_docsize": "id, sz",  # the messages indexed, and the words of each
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
        return {
            table: conn.execute(f"SELECT {columns} FROM {table} ORDER BY 1, 2").fetchall()
            for table, columns in TABLES.items()
        }


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
    assert all(plain[table] for table in ("threads", "messages", "search_fts_docsize", "events"))
    assert plain == through_engine
