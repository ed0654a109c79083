"""`DriverSql.insert_many` writes an ingest's rows several to a statement on SQLite: the rows
it leaves, their ids and the count it returns are those of one statement per row (`many`),
conflicts within a batch included."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import pytest

from auditor.store.sql_text import ROWS_PER_STATEMENT, DriverSql, SqliteConnection

TABLE = (
    "CREATE TABLE calls (id INTEGER PRIMARY KEY, thread INTEGER NOT NULL, call TEXT NOT NULL, "
    "name TEXT, body TEXT, UNIQUE (thread, call))"
)
# The shapes ingest writes: new rows kept as first written, calls whose later copy wins, and a
# value made text by SQLite from the bytes bound.
KEEP_FIRST = (
    "INSERT INTO calls (thread, call, name, body) VALUES (?, ?, ?, CAST(? AS TEXT)) "
    "ON CONFLICT (thread, call) DO NOTHING"
)
LAST_WINS = (
    "INSERT INTO calls (thread, call, name, body) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (thread, call) DO UPDATE SET name = excluded.name, body = excluded.body"
)


def _store(path: Path) -> SqliteConnection:
    conn = SqliteConnection(str(path))
    conn.driver_connection.execute(TABLE)
    return conn


def _rows(count: int, seed: int, as_bytes: bool) -> list[tuple]:
    """`count` rows over few keys, so that many repeat a key already written or in the batch."""
    rnd = random.Random(seed)
    rows = []
    for _ in range(count):
        body = "".join(rnd.choice("abc é😀\n") for _ in range(rnd.randrange(0, 40)))
        name = rnd.choice([None, "Read", "Bash", "Edit"])
        value: object = bytearray(body.encode()) if as_bytes else body
        rows.append((rnd.randrange(3), f"c{rnd.randrange(40)}", name, value))
    return rows


def _written(conn: SqliteConnection) -> list[tuple]:
    return conn.driver_connection.execute("SELECT * FROM calls ORDER BY id").fetchall()


@pytest.mark.parametrize("sql", [KEEP_FIRST, LAST_WINS], ids=["do-nothing", "do-update"])
@pytest.mark.parametrize("count", [0, 1, 2, 3, ROWS_PER_STATEMENT, ROWS_PER_STATEMENT + 1, 200])
def test_insert_many_leaves_what_one_statement_a_row_leaves(tmp_path, sql, count):
    one_by_one, together = _store(tmp_path / "a.db"), _store(tmp_path / "b.db")
    for batch in range(3):  # later batches meet the rows of earlier ones
        rows = _rows(count, seed=count * 10 + batch, as_bytes=sql is KEEP_FIRST)
        assert DriverSql(together).insert_many(sql, rows) == DriverSql(one_by_one).many(sql, rows)
        last = "SELECT last_insert_rowid()"
        assert DriverSql(together).scalar(last) == DriverSql(one_by_one).scalar(last)
    assert _written(together) == _written(one_by_one)
    if count > 2:
        assert len(_written(together)) > 3  # the batches did write something


def test_insert_many_binds_no_more_values_than_sqlite_allows(tmp_path):
    one_by_one, together = _store(tmp_path / "a.db"), _store(tmp_path / "b.db")
    # 4 values a row and at most 10 a statement: 2 rows a statement.
    together.driver_connection.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 10)
    rows = _rows(25, seed=7, as_bytes=False)
    assert DriverSql(together).insert_many(LAST_WINS, rows) == DriverSql(one_by_one).many(
        LAST_WINS, rows
    )
    assert _written(together) == _written(one_by_one)
