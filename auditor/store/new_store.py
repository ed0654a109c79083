"""A new SQLite store made in one step: the schema the migrations end at, written out once.

Running every migration on a new, empty store costs more CPU than reading a small corpus into
it (Alembic and its imports, then each step, several of them rebuilding a table). The end of
that road is always the same, so it is kept as SQL text (`migrations/sqlite_head.sql`, the
`sqlite_master` of a store the migrations made) and a new SQLite file gets it in one
transaction, stamped with the head revision. A store that already has tables goes through
Alembic as before, and so does PostgreSQL (a server's database is made once; its tests start
from a template). `tests/test_db.py` holds the two roads equal, and fails with the command
that writes the file again when a migration is added:

    python -m auditor_migrations.write_sqlite_head

Nothing here imports SQLAlchemy or Alembic.
"""

from __future__ import annotations

import re
import sqlite3
from functools import lru_cache
from pathlib import Path
from typing import Any

from .sql_text import migrations_folder, quick_head

SNAPSHOT = "sqlite_head.sql"
_REVISION = re.compile(r"^-- revision: (\S+)$", re.MULTILINE)
# The order the statements are replayed in: a view or trigger after every table it names.
_KINDS = ("table", "index", "view", "trigger")


def snapshot_path() -> Path:
    """Where the snapshot is (beside the migrations, as package data)."""
    return migrations_folder() / SNAPSHOT


@lru_cache(maxsize=1)
def _snapshot() -> tuple[str | None, tuple[str, ...]]:
    """(the revision the snapshot is at, its statements), or (None, ()) when there is none."""
    try:
        script = snapshot_path().read_text(encoding="utf-8")
    except OSError:
        return None, ()
    found = _REVISION.search(script)
    statements, pending = [], ""
    for line in script.splitlines(keepends=True):
        if not pending and line.startswith("--"):
            continue
        pending += line
        if sqlite3.complete_statement(pending):
            statements.append(pending.strip())
            pending = ""
    return (found.group(1) if found else None), tuple(statements)


def forget_snapshot() -> None:
    """Read the snapshot again at its next use (it was just written)."""
    _snapshot.cache_clear()


def usable() -> bool:
    """True when the snapshot is at the head of the migrations (else new stores migrate)."""
    revision, statements = _snapshot()
    return bool(statements) and revision is not None and revision == quick_head()


def create_if_new(dbapi_conn: Any) -> bool:
    """Give the SQLite database on `dbapi_conn` (a sqlite3 connection) the head schema if it has no tables yet, in one
    transaction holding the write lock (several commands starting on a new file at once: the
    first makes it, the others find it made). Return True when this call made it."""
    revision, statements = _snapshot()
    if not usable() or revision is None:
        return False
    old_level = dbapi_conn.isolation_level
    dbapi_conn.isolation_level = None  # the transaction is begun and ended here
    try:
        dbapi_conn.execute("BEGIN IMMEDIATE")
        try:
            if dbapi_conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
                dbapi_conn.execute("ROLLBACK")
                return False
            for statement in statements:
                dbapi_conn.execute(statement)
            dbapi_conn.execute("INSERT INTO alembic_version (version_num) VALUES (?)", (revision,))
            dbapi_conn.execute("COMMIT")
        except BaseException:
            if dbapi_conn.in_transaction:
                dbapi_conn.execute("ROLLBACK")
            raise
    finally:
        dbapi_conn.isolation_level = old_level
    return True


def schema_rows(conn: sqlite3.Connection) -> list[tuple[str, str, str, str]]:
    """The store's own schema objects as (type, name, table, sql), in the order they can be
    made again: what the snapshot holds. Left out: SQLite's internal tables and automatic
    indexes, and the shadow tables a virtual table makes for itself."""
    rows = conn.execute(
        "SELECT type, name, tbl_name, sql FROM sqlite_master "
        "WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%' "
        "ORDER BY rowid"
    ).fetchall()
    virtual = [name for kind, name, _, sql in rows if sql.upper().startswith("CREATE VIRTUAL")]
    rows = [r for r in rows if not any(r[1].startswith(v + "_") for v in virtual)]
    return sorted(rows, key=lambda r: _KINDS.index(r[0]))
