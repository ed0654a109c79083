"""The store: migrations, pragmas, locations."""

from __future__ import annotations

import sqlite3
import subprocess
import sys

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from auditor.errors import DatabaseError
from auditor.store import db
from auditor.store.schema import Base


def test_blank_database_is_migrated_to_head(tmp_path):
    engine = db.open_db(tmp_path / "new.db")
    assert db.current_revision(engine) == db.head_revision()
    tables = {
        r[0]
        for r in sqlite3.connect(tmp_path / "new.db").execute(
            "select name from sqlite_master where type='table'"
        )
    }
    assert {
        "threads",
        "messages",
        "tool_calls",
        "token_usage",
        "source_files",
        "ingest_errors",
    } <= tables


def test_there_is_exactly_one_head():
    script = ScriptDirectory.from_config(db.alembic_config("sqlite://"))
    assert len(script.get_heads()) == 1


def _declared(obj, name, kind, reflected, compare_to) -> bool:
    """Leave out the full-text index of `auditor search`: the migration makes it in each
    store's own form (an FTS5 table and its shadow tables, a tsvector GIN index), which the
    models cannot declare, and the table of texts PostgreSQL's index needs, which a SQLite
    store has not (see auditor.store.search)."""
    if kind == "table" and name == "search_texts" and not reflected and compare_to is None:
        return False  # declared, and not in this store: a SQLite store
    return not (name or "").startswith(("search_fts", "ix_search_texts_body_tsv"))


COMPARE = {"compare_type": True, "include_object": _declared}


def test_models_match_migrations(tmp_path):
    engine = db.open_db(tmp_path / "m.db")
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn, opts=COMPARE), Base.metadata)
    assert diff == []


def test_models_match_migrations_on_postgresql(pg_server):
    url = pg_server.new_database(blank=True)
    engine = db.open_db(url)
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn, opts=COMPARE), Base.metadata)
    engine.dispose()
    assert diff == []


def test_pragmas_are_set(tmp_path):
    engine = db.open_db(tmp_path / "p.db")
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30000


def test_the_lock_wait_is_set_by_the_environment_on_both_stores_and_both_query_layers(
    tmp_path, pg_server, monkeypatch
):
    monkeypatch.setenv("AUDITOR_LOCK_WAIT", "2.5")
    engine = db.open_db(tmp_path / "w.db")
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 2500
    store = db.open_current_sqlite(str(engine.url))
    assert store is not None
    with store.connect() as plain:
        assert plain.execute("PRAGMA busy_timeout").scalar() == 2500
    engine = db.open_db(pg_server.new_database())
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SHOW lock_timeout").scalar() == "2500ms"
    engine.dispose()


@pytest.mark.parametrize("value", ["soon", "0", "-3"])
def test_a_lock_wait_that_is_not_a_positive_number_is_named_in_one_line(
    tmp_path, monkeypatch, value
):
    monkeypatch.setenv("AUDITOR_LOCK_WAIT", value)
    with pytest.raises(DatabaseError, match=f"AUDITOR_LOCK_WAIT='{value}': give the seconds"):
        db.open_db(tmp_path / "w.db")


def test_database_newer_than_the_code_is_refused(tmp_path):
    path = tmp_path / "future.db"
    db.open_db(path)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE alembic_version SET version_num = 'ffff_from_the_future'")
    with pytest.raises(DatabaseError, match="newer auditor"):
        db.open_db(path)


def test_location_precedence(tmp_path, monkeypatch):
    monkeypatch.setenv("AUDITOR_DB", str(tmp_path / "env.db"))
    assert db.resolve_url(None).endswith("/env.db")
    assert db.resolve_url(str(tmp_path / "opt.db")).endswith("/opt.db")
    assert db.resolve_url("postgresql+psycopg://u:p@h/x") == "postgresql+psycopg://u:p@h/x"
    monkeypatch.delenv("AUDITOR_DB")
    assert db.resolve_url(None).endswith("auditor/auditor.db")


def test_reopening_a_current_database_is_a_no_op(tmp_path):
    path = tmp_path / "again.db"
    db.open_db(path)
    engine = db.open_db(path)
    assert db.current_revision(engine) == db.head_revision()


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_first_use_by_several_processes_at_once_just_works(tmp_path, kind, request):
    """Five commands start together on a database that does not exist yet (SQLite) or is
    empty (PostgreSQL): all of them succeed (one migrates, the others wait for it) and the
    store ends at head."""
    from helpers.live import auditor_argv

    from auditor.store.threads import EMPTY_STORE_HINT

    for attempt in range(3):
        if kind == "sqlite":
            path = str(tmp_path / f"new{attempt}.db")
        else:
            path = request.getfixturevalue("pg_server").new_database(blank=True)
        procs = [
            subprocess.Popen(
                auditor_argv() + ["--db", path, "threads", "--json"],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(5)
        ]
        results = [(p.wait(timeout=120), p.stdout.read(), p.stderr.read()) for p in procs]
        for p in procs:
            p.stdout.close()
            p.stderr.close()
        # no error; each says the new store is empty and how to fill it
        assert [(code, err) for code, _, err in results] == [(0, EMPTY_STORE_HINT + "\n")] * 5
        assert db.current_revision(db.open_db(path, migrate=False)) == db.head_revision()


def test_keying_files_by_source_keeps_what_points_at_them(tmp_path):
    """0014 rebuilds source_files on SQLite: the messages and threads read from a file still
    name it afterwards (dropping the old table must not set their source_file_id to NULL)."""
    import socket

    from alembic import command

    path = tmp_path / "old.db"
    command.upgrade(db.alembic_config("sqlite:///" + str(path)), "0013")
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute(
            "INSERT INTO source_files (id, path, size, mtime_ns, offset, lines,"
            " error_count) VALUES (7, '/home/me/a.jsonl', 1, 1, 1, 1, 0)"
        )
        conn.execute(
            "INSERT INTO threads (id, agent, native_id, is_sidechain, source_file_id,"
            " message_count, tool_call_count, file_edit_count) VALUES (1, 'x', 't', 0, 7, 1, 0, 0)"
        )
        conn.execute(
            "INSERT INTO messages (thread_id, source_file_id, native_id, seq, role,"
            " is_sidechain, tool_use_count, file_edit_count) VALUES (1, 7, 'm', 1, 'user', 0, 0, 0)"
        )
    engine = db.open_db(path)
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT source, path FROM source_files").all() == [
            (socket.gethostname(), "/home/me/a.jsonl")
        ]
        assert conn.exec_driver_sql("SELECT source_file_id FROM messages").all() == [(7,)]
        assert conn.exec_driver_sql("SELECT source_file_id FROM threads").all() == [(7,)]
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1


def test_messages_stored_before_the_text_was_kept_once_are_found(tmp_path):
    """0022 drops SQLite's second copy of each message's text: what a store held is indexed
    from the messages' blocks, those ingest had indexed and those it had not alike."""
    from alembic import command

    from auditor.store.search import search

    path = tmp_path / "old.db"
    command.upgrade(db.alembic_config("sqlite:///" + str(path)), "0021")
    said = [
        '[{"kind": "text", "text": "the ledger balances"}]',
        '[{"kind": "tool_use", "tool_name": "Bash", "tool_input": {"command": "ledger"}}, '
        '{"kind": "tool_result", "text": "ledger: 3 rows"}]',
    ]
    with sqlite3.connect(path) as conn:
        conn.execute(
            "INSERT INTO threads (id, agent, native_id, is_sidechain, message_count,"
            " tool_call_count, file_edit_count) VALUES (1, 'claude-code', 't', 0, 2, 0, 0)"
        )
        for n, blocks in enumerate(said, 1):
            conn.execute(
                "INSERT INTO messages (id, thread_id, native_id, seq, role, is_sidechain,"
                " tool_use_count, file_edit_count, blocks) VALUES (?, 1, ?, ?, 'user', 0, 0, 0, ?)",
                (n, f"m{n}", n, blocks),
            )
        # Only the first was indexed by the ingest of that time.
        conn.execute("INSERT INTO search_texts VALUES (1, 'the ledger balances')")
        conn.execute("INSERT INTO search_fts (rowid, body) VALUES (1, 'the ledger balances')")
    engine = db.open_db(path)
    assert [h["message_native_id"] for h in search(engine, "ledger")] == ["m2", "m1"]
    assert [h["body"] for h in search(engine, "rows")] == ["ledger: 3 rows"]
    assert search(engine, "Bash") == []  # a tool's input is not searched
    with engine.connect() as conn:
        tables = {r[0] for r in conn.exec_driver_sql("SELECT name FROM sqlite_master")}
    assert "search_texts" not in tables
    engine.dispose()


def test_an_index_made_again_without_word_counts_finds_what_it_found(tmp_path):
    """0024 makes SQLite's full-text index again without each message's word count: every
    message is given to it again from its blocks, found by the same words, the hashsize kept."""
    from alembic import command

    from auditor.store.search import search

    path = tmp_path / "old.db"
    command.upgrade(db.alembic_config("sqlite:///" + str(path)), "0023")
    said = [
        '[{"kind": "text", "text": "the ledger balances"}]',
        '[{"kind": "tool_result", "text": "ledger: 3 rows"}]',
    ]
    with sqlite3.connect(path) as conn:
        conn.execute(
            "INSERT INTO threads (id, agent, native_id, is_sidechain, message_count,"
            " tool_call_count, file_edit_count) VALUES (1, 'claude-code', 't', 0, 2, 0, 0)"
        )
        for n, blocks in enumerate(said, 1):
            conn.execute(
                "INSERT INTO messages (id, thread_id, native_id, seq, role, is_sidechain,"
                " tool_use_count, file_edit_count, blocks) VALUES (?, 1, ?, ?, 'user', 0, 0, 0, ?)",
                (n, f"m{n}", n, blocks),
            )
        conn.execute("INSERT INTO search_fts (search_fts, rank) VALUES ('hashsize', 4194304)")
        conn.executemany(
            "INSERT INTO search_fts (rowid, body) VALUES (?, ?)",
            [(1, "the ledger balances"), (2, "ledger: 3 rows")],
        )
    conn.close()
    engine = db.open_db(path)
    assert [h["message_native_id"] for h in search(engine, "ledger")] == ["m2", "m1"]
    assert [h["body"] for h in search(engine, "3 rows")] == ["ledger: 3 rows"]
    with engine.connect() as conn:
        tables = {r[0] for r in conn.exec_driver_sql("SELECT name FROM sqlite_master")}
        memory = conn.exec_driver_sql(
            "SELECT v FROM search_fts_config WHERE k = 'hashsize'"
        ).scalar()
    assert "search_fts_docsize" not in tables and memory == 4194304
    engine.dispose()


def test_gate_decisions_recorded_before_codes_get_the_reason_without_its_particulars(tmp_path):
    """0017: reports count decisions by their code; older rows take it from their reason."""
    from alembic import command

    path = tmp_path / "old.db"
    command.upgrade(db.alembic_config("sqlite:///" + str(path)), "0016")
    with sqlite3.connect(path) as conn:
        conn.execute(
            "INSERT INTO threads (id, agent, native_id, is_sidechain, message_count,"
            " tool_call_count, file_edit_count) VALUES (1, 'x', 't', 0, 1, 0, 0)"
        )
        for n, reason in enumerate(["too-few-tool-calls (3 < 5)", "no-file-edit", "passed"]):
            conn.execute(
                "INSERT INTO checkpoints (thread_id, message_native_id, kind, tool_calls,"
                " file_edits, gate_audit, gate_reason, gated_at)"
                f" VALUES (1, 'm{n}', 'end-turn', 3, 0, 0, '{reason}', '2026-11-27 03:00:00')"
            )
    engine = db.open_db(path)
    with engine.connect() as conn:
        codes = conn.exec_driver_sql("SELECT gate_code FROM checkpoints ORDER BY id").scalars()
        assert list(codes) == ["too-few-tool-calls", "no-file-edit", "passed"]


def test_a_store_that_cannot_be_opened_is_named_in_one_line_without_its_password():
    pytest.importorskip("psycopg")
    url = "postgresql+psycopg://auditor:s3cret-pw@127.0.0.1:1/team"  # nothing listens on port 1
    with pytest.raises(DatabaseError) as caught:
        db.open_db(url)
    message = str(caught.value)
    assert message.startswith("Cannot open the database postgresql+psycopg://auditor:***@")
    assert "\n" not in message and "[SQL" not in message and "s3cret" not in message
    assert "Connection refused" in message or "connection failed" in message


def test_store_urls_as_hosts_write_them_or_that_auditor_cannot_use():
    assert db.resolve_url("postgres://a:b@h/d") == "postgresql://a:b@h/d"
    assert db.resolve_url("postgresql+psycopg://a:b@h/d") == "postgresql+psycopg://a:b@h/d"
    with pytest.raises(DatabaseError, match="SQLite or PostgreSQL, not mysql: give a file path"):
        db.resolve_url("mysql://a:b@h/d")


def test_a_driver_auditor_does_not_install_is_named_with_the_one_it_does(monkeypatch):
    import builtins

    real = builtins.__import__

    def no_psycopg2(name, *args, **kwargs):
        if name == "psycopg2" or name.startswith("psycopg2."):
            raise ModuleNotFoundError(f"No module named {name!r}", name="psycopg2")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_psycopg2)
    with pytest.raises(DatabaseError, match=r"use postgresql\+psycopg://"):
        db.open_db("postgresql+psycopg2://a:b@127.0.0.1:1/d")


def _schema(path) -> list[tuple]:
    """A SQLite store's schema objects, each table's lines in sorted order: the migrations'
    table rebuilds (batch steps) write a table's constraints in no fixed order."""
    from auditor.store.new_store import schema_rows

    with sqlite3.connect(path) as conn:
        rows = schema_rows(conn)
        fts_config = conn.execute("SELECT * FROM search_fts_config").fetchall()
        version = conn.execute("SELECT version_num FROM alembic_version").fetchall()
    conn.close()
    lines = [
        (kind, name, table, sorted(line.strip().rstrip(",") for line in sql.splitlines()))
        for kind, name, table, sql in rows
    ]
    return [*lines, ("fts config", fts_config), ("version", version)]


def test_a_new_sqlite_store_is_made_in_one_step_as_the_migrations_make_it(tmp_path):
    """A new store gets the schema the migrations end at in one step, without Alembic (which
    costs more than reading a small corpus); every migration run one by one gives the same."""
    one_step = tmp_path / "one-step.db"
    code = (
        "import sys; from auditor.store.db import open_db; open_db(sys.argv[1]).dispose(); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'alembic'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(one_step)], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"
    migrated = tmp_path / "migrated.db"
    db.run_migrations(db.create(f"sqlite:///{migrated}"))
    assert _schema(one_step) == _schema(migrated)
    assert _schema(one_step)[-1] == ("version", [(db.head_revision(),)])


def test_the_one_step_schema_is_at_the_head_of_the_migrations():
    from auditor.store import new_store

    assert new_store.usable(), (
        f"{new_store.snapshot_path().name} is not at the head revision {db.head_revision()}: "
        "after adding a migration, run `python -m auditor_migrations.write_sqlite_head` to write it again"
    )
