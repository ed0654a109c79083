"""Write `sqlite_head.sql`, the schema a new SQLite store is made with in one step (see
`auditor.store.new_store`), from a store the migrations take to head. Run it after adding a
migration:

    python -m auditor_migrations.write_sqlite_head
"""

from __future__ import annotations

import sqlite3
import sys
import tempfile
from pathlib import Path

from auditor.store import new_store
from auditor.store.db import create, run_migrations


def write_snapshot() -> Path:
    """Migrate a new SQLite file to head with Alembic and write its schema as the snapshot."""
    with tempfile.TemporaryDirectory() as tmp:
        run_migrations(create(f"sqlite:///{tmp}/migrated.db"))
        with sqlite3.connect(f"{tmp}/migrated.db") as conn:
            revision = conn.execute("SELECT version_num FROM alembic_version").fetchone()[0]
            rows = new_store.schema_rows(conn)
        conn.close()
    lines = [
        f"-- The schema the migrations give a new SQLite store, up to revision {revision}.",
        "-- Written by `python -m auditor_migrations.write_sqlite_head`: do not edit.",
        f"-- revision: {revision}",
        "",
    ]
    lines += [sql.rstrip(";") + ";\n" for *_, sql in rows]
    path = new_store.snapshot_path()
    path.write_text("\n".join(lines), encoding="utf-8")
    new_store.forget_snapshot()
    return path


if __name__ == "__main__":
    sys.stdout.write(f"wrote {write_snapshot()}\n")
