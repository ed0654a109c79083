"""SQL text run alike on a plain sqlite3 connection or a SQLAlchemy one.

The reports are SQL text (the database groups and sums; Python prices and shapes the rows).
Run through SQLAlchemy, a warm report pays for importing it, several times the cost of the
report itself; run through the sqlite3 module it pays nothing. So the report code takes a
`SqlConnection`, written once for both: a SQLAlchemy connection wrapped (PostgreSQL, a store
to migrate, any caller holding an engine), or sqlite3 opened directly on a SQLite file whose
schema is already current (`open_current_sqlite`). Both take `:name` parameters and give
rows that index and unpack like tuples.

Nothing here imports SQLAlchemy or Alembic at module level.
"""

from __future__ import annotations

import os
import re
import sqlite3
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from itertools import chain
from pathlib import Path
from typing import Any, Protocol

from ..errors import DatabaseError

# The sqlite3 module looks for an adapter of every value it binds that is not an int, float,
# str or bytearray, and where none is registered it makes and drops an AttributeError on the
# way: half a microsecond a value. An ingest binds None and booleans by the hundred thousand
# (most message and tool-call rows hold several), so they have adapters that give what the
# module binds anyway: NULL (an empty mapping's `get` answers None, without a Python call) and
# the integer 0 or 1. Process-wide; no stored value changes. (bytes are bound as a bytearray
# where it counts: see `RowBatch.add_message`.)
_NOTHING: dict[None, None] = {}
sqlite3.register_adapter(type(None), _NOTHING.get)
sqlite3.register_adapter(bool, int)

# The size of a new store's pages (an existing store keeps its own: SQLite cannot change it in
# WAL mode). At commit SQLite writes each changed page to the WAL, header and page apart, and
# the checkpoint reads it back and writes it into the store: four system calls a page, whatever
# its size. A cold ingest of the 25x Claude Code replica took 7.2 s of CPU with 4 KiB pages,
# 7.0 with 8 KiB (a quarter less system time), 6.9-7.7 with 16 KiB; the 5x one 1.56, 1.46 and
# 1.53 s; the same peak memory (the page cache is set in KiB). A live worker's small reads of a
# growing session write a few pages per event: 2.4 ms an ingest with 4 KiB pages, 2.1 with 8
# KiB, 3.1 with 16 KiB (each changed page written whole). Messages' JSON (a KiB on average, some
# far longer) needs fewer overflow pages too.
PAGE_SIZE = 8192

# One row's named parameters, or a list of them (the statement is run once per row).
Params = Mapping[str, Any] | list[Mapping[str, Any]] | None
LOCK_WAIT_VAR = "AUDITOR_LOCK_WAIT"
DEFAULT_LOCK_WAIT = 30.0


def lock_wait() -> float:
    """Seconds a statement waits for another process's lock on the store before it fails
    (SQLite's busy timeout, PostgreSQL's lock_timeout): 30, or `$AUDITOR_LOCK_WAIT`. Both query
    layers (this one and the SQLAlchemy engine's) read it here, so that they wait alike."""
    value = os.environ.get(LOCK_WAIT_VAR, "").strip()
    if not value:
        return DEFAULT_LOCK_WAIT
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds <= 86_400:
        raise DatabaseError(
            f"{LOCK_WAIT_VAR}={value!r}: give the seconds a statement may wait for another "
            "process's lock on the store, a number above 0 (default 30)"
        )
    return seconds


class Rows(Protocol):
    def __iter__(self) -> Iterator[Any]: ...
    def scalar(self) -> Any: ...
    def first(self) -> Any: ...
    def all(self) -> list[Any]: ...


class SqlConnection(Protocol):
    """What report code runs its SQL on."""

    @property
    def dialect(self) -> Any: ...  # `.name`: "sqlite" or "postgresql"

    def execute(self, sql: str, params: Params = None) -> Rows: ...
    def commit(self) -> None: ...


@dataclass(frozen=True)
class Dialect:
    name: str


class CursorRows:
    """A sqlite3 cursor with the few result methods the report code uses."""

    def __init__(self, cursor: sqlite3.Cursor) -> None:
        self._cursor = cursor

    def __iter__(self) -> Iterator[Any]:
        return iter(self._cursor)

    def scalar(self) -> Any:
        row = self._cursor.fetchone()
        self._cursor.close()
        return None if row is None else row[0]

    def first(self) -> Any:
        row = self._cursor.fetchone()
        self._cursor.close()
        return row

    def all(self) -> list[Any]:
        return self._cursor.fetchall()


class PlainSqlite:
    """A sqlite3 connection with the pragmas the store's engine sets on its own."""

    dialect = Dialect("sqlite")

    def __init__(self, path: str) -> None:
        wait = lock_wait()
        self._conn = sqlite3.connect(path, timeout=wait)
        self._conn.execute(f"PRAGMA busy_timeout={int(wait * 1000)}")
        self._conn.execute("PRAGMA foreign_keys=ON")
        self._conn.execute("PRAGMA synchronous=NORMAL")

    def execute(self, sql: str, params: Params = None) -> CursorRows:
        if isinstance(params, list):
            return CursorRows(self._conn.executemany(sql, params))
        return CursorRows(self._conn.execute(sql, dict(params or {})))

    def commit(self) -> None:
        self._conn.commit()

    def close(self) -> None:
        self._conn.close()


class AlchemyConnection:
    """A SQLAlchemy connection taking SQL text: the same calls as `PlainSqlite`."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self.dialect = conn.dialect

    def execute(self, sql: str, params: Params = None) -> Rows:
        from sqlalchemy import text

        return self._conn.execute(
            text(sql), params if isinstance(params, list) else dict(params or {})
        )

    def commit(self) -> None:
        self._conn.commit()


def wrap(conn: Any) -> SqlConnection:
    """`conn` as a `SqlConnection`: a SQLAlchemy connection is wrapped, one already is not."""
    if isinstance(conn, PlainSqlite | AlchemyConnection):
        return conn
    return AlchemyConnection(conn)


@dataclass(frozen=True)
class SqliteStore:
    """A SQLite store opened without SQLAlchemy; `connect` as an engine's."""

    path: str
    dialect: Dialect = Dialect("sqlite")

    @contextmanager
    def connect(self) -> Iterator[PlainSqlite]:
        conn = PlainSqlite(self.path)
        try:
            yield conn
        finally:
            conn.close()


@contextmanager
def connect(store: Any) -> Iterator[SqlConnection]:
    """A connection to `store` (a SQLAlchemy engine or a `SqliteStore`), for SQL text."""
    with store.connect() as conn:
        yield wrap(conn)


class Savepoint:
    """A savepoint on a `SqliteConnection`, ended as SQLAlchemy's nested transactions are."""

    def __init__(self, raw: sqlite3.Connection, name: str) -> None:
        self._raw, self._name = raw, name
        raw.execute(f"SAVEPOINT {name}")
        self.is_active = True

    def commit(self) -> None:
        self._raw.execute(f"RELEASE SAVEPOINT {self._name}")
        self.is_active = False

    def rollback(self) -> None:
        self._raw.execute(f"ROLLBACK TO SAVEPOINT {self._name}")
        self._raw.execute(f"RELEASE SAVEPOINT {self._name}")
        self.is_active = False


class SqliteConnection:
    """A sqlite3 connection answering the calls ingest makes of a SQLAlchemy one (`begin`,
    `begin_nested`, `commit`, `exec_driver_sql`), with the pragmas the store's engine sets: a
    cold ingest of a SQLite store then never imports SQLAlchemy. Its transactions are the
    sqlite3 module's own, as under SQLAlchemy: begun before a write, or by `BEGIN IMMEDIATE`."""

    dialect = Dialect("sqlite")

    def __init__(self, path: str) -> None:
        wait = lock_wait()
        self.driver_connection = sqlite3.connect(path, timeout=wait)
        for pragma in (
            f"busy_timeout={int(wait * 1000)}",  # first: the next ones may wait
            f"page_size={PAGE_SIZE}",  # before anything is written: a new file only
            "journal_mode=WAL",
            "foreign_keys=ON",
            "synchronous=NORMAL",
            "cache_size=-65536",  # 64 MiB: index inserts stay in memory on big stores
            "temp_store=MEMORY",  # savepoints' undo pages: see `TEMP_STORE` in db.py
        ):
            self.driver_connection.execute(f"PRAGMA {pragma}")
        self._savepoints = 0

    def begin(self) -> None:
        """Nothing to do: the transaction begins with its first write (or BEGIN IMMEDIATE)."""

    def begin_nested(self) -> Savepoint:
        self._savepoints += 1
        return Savepoint(self.driver_connection, f"sp_{self._savepoints}")

    def exec_driver_sql(self, sql: str, params: Any = ()) -> sqlite3.Cursor:
        return self.driver_connection.execute(sql, params)

    def commit(self) -> None:
        self.driver_connection.commit()

    def rollback(self) -> None:
        self.driver_connection.rollback()

    def close(self) -> None:
        self.driver_connection.close()  # what was not committed is rolled back


class SqliteWriter:
    """A SQLite store written without SQLAlchemy (see `SqliteConnection`); `connect` as an
    engine's. One connection, opened at the first `connect` and kept, as a pool keeps one: an
    ingest connects once per file it looks up. What a caller left uncommitted is rolled back
    when it is handed back."""

    dialect = Dialect("sqlite")

    def __init__(self, path: str) -> None:
        self.path = path
        self._conn: SqliteConnection | None = None

    @contextmanager
    def connect(self) -> Iterator[SqliteConnection]:
        if self._conn is None:
            self._conn = SqliteConnection(self.path)
        try:
            yield self._conn
        finally:
            if self._conn.driver_connection.in_transaction:
                self._conn.rollback()

    def dispose(self) -> None:
        """Close the connection kept (as an engine's `dispose`)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def store_failed(exc: BaseException) -> bool:
    """True when `exc` is the store's own failure (sqlite3's or the driver's under SQLAlchemy),
    not a value it could not take."""
    if isinstance(exc, sqlite3.Error):
        return True
    import sys

    alchemy = sys.modules.get("sqlalchemy.exc")
    return alchemy is not None and isinstance(exc, alchemy.DBAPIError)


class DriverSql:
    """SQL text with `?` marks run on the driver under a SQLAlchemy connection, inside the
    transaction that connection holds: ingest's write path, where SQLAlchemy's work for each
    statement (its compiled-statement cache, type processing, events) cost a tenth of a cold
    ingest, once per file and per record.

    SQLite: the sqlite3 connection itself, its errors raised as SQLAlchemy's `DBAPIError` like
    any other statement's under a SQLAlchemy connection (`store_failed` tells either from a
    record that did not fit), as they are on a `SqliteConnection`. PostgreSQL: the same text with `%s` marks through `exec_driver_sql`.
    Values go in as the store keeps them (`stored_time`, `stored_json`); rows come back as
    tuples.
    """

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.sqlite = conn.dialect.name == "sqlite"
        self._plain = isinstance(conn, SqliteConnection)
        self._raw: Any = None
        if self._plain:
            self._raw = conn.driver_connection
        elif self.sqlite:
            self._raw = conn.connection.driver_connection

    def _run(self, sql: str, params: Any, many: bool) -> Any:
        if not self.sqlite:
            marks = _percent_marks(sql)
            return self.conn.exec_driver_sql(marks, list(params) if many else tuple(params))
        if self._plain:
            return (self._raw.executemany if many else self._raw.execute)(sql, params)
        try:
            return (self._raw.executemany if many else self._raw.execute)(sql, params)
        except sqlite3.Error as exc:
            from sqlalchemy.exc import DBAPIError

            raise DBAPIError.instance(sql, None, exc, sqlite3.Error) from exc

    def execute(self, sql: str, params: Any = ()) -> None:
        """Run a statement that gives no rows."""
        self._run(sql, params, False)

    def all(self, sql: str, params: Any = ()) -> list[tuple]:
        """The rows of one statement (a RETURNING included), read to the end."""
        return [tuple(r) for r in self._run(sql, params, False).fetchall()]

    def scalar(self, sql: str, params: Any = ()) -> Any:
        rows = self.all(sql, params)
        return rows[0][0] if rows else None

    def first(self, sql: str, params: Any = ()) -> tuple | None:
        rows = self.all(sql, params)
        return rows[0] if rows else None

    def many(self, sql: str, rows: list) -> int:
        """Run `sql` once per row; return the rows it changed (0 for those DO NOTHING kept)."""
        return self._run(sql, rows, True).rowcount

    def insert_many(self, sql: str, rows: list) -> int:
        """`many` for an INSERT of one row (`... VALUES (...)`, an ON CONFLICT clause after it
        or not): the same rows written, the same count returned. On SQLite several rows go in
        one statement (`VALUES (...), (...), ...`), each taken in turn as a statement of its
        own would take it, its conflict included: every statement costs SQLite set-up and a
        savepoint of its own (foreign keys are checked at its end), more than a row's write."""
        if not self.sqlite or len(rows) < 2:
            return self.many(sql, rows)
        # Statements of a power of two rows each, so that few texts are prepared and cached.
        size = ROWS_PER_STATEMENT
        width = len(rows[0])
        limit = self._raw.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
        while size > 1 and size * width > limit:
            size //= 2
        changed = done = 0
        left = len(rows)
        while left:
            while size > left:
                size //= 2
            params = list(chain.from_iterable(rows[done : done + size]))
            changed += self._run(_rows_sql(sql, size), params, False).rowcount
            done += size
            left -= size
        return changed


# Rows an `insert_many` statement takes at most on SQLite.
ROWS_PER_STATEMENT = 64


@lru_cache(maxsize=64)
def _rows_sql(sql: str, count: int) -> str:
    """`sql`, an INSERT of one row, made to insert `count` rows: its `VALUES (...)` repeated."""
    start = sql.index(" VALUES (") + len(" VALUES ")
    end, depth = start, 0
    while True:  # to the parenthesis that closes the row (a CAST(...) may be inside)
        depth += (sql[end] == "(") - (sql[end] == ")")
        end += 1
        if not depth:
            break
    values = sql[start:end]
    return f"{sql[:start]}{', '.join([values] * count)}{sql[end:]}"


def marks(count: int) -> str:
    """`count` parameter marks, for `IN (...)`."""
    return ", ".join("?" * count)


@lru_cache(maxsize=64)
def _percent_marks(sql: str) -> str:
    # psycopg's marks; a literal % is written %% there.
    return sql.replace("%", "%%").replace("?", "%s")


def stored_time(value: datetime | None, sqlite: bool) -> datetime | str | None:
    """A time as the store keeps it: on SQLite the text SQLAlchemy's DateTime type writes and
    reads back (UTC, no zone), on PostgreSQL the time itself."""
    if value is None or not sqlite:
        return value
    if value.tzinfo is not None and value.tzinfo is not UTC:
        value = value.astimezone(UTC)
    # `isoformat(" ", "microseconds")` without the zone, formatted here at two thirds of its
    # cost: once for every message and bill an ingest stores.
    return _TIME_TEXT % (
        value.year,
        value.month,
        value.day,
        value.hour,
        value.minute,
        value.second,
        value.microsecond,
    )


_TIME_TEXT = "%04d-%02d-%02d %02d:%02d:%02d.%06d"


def read_time(value: Any) -> datetime | None:
    """A time read back as the engine gives it: SQLite's text as a datetime without a zone."""
    return datetime.fromisoformat(value) if isinstance(value, str) else value


def read_json(value: Any) -> Any:
    """A JSON column's value read back: SQLite's text decoded (PostgreSQL's driver decodes)."""
    if isinstance(value, str | bytes):
        import orjson

        return orjson.loads(value)
    return value


def stored_json(value: Any) -> str:
    """A value of a JSON column as the store's engine writes it (None is JSON's null)."""
    import orjson

    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()


_REVISION = re.compile(r"^(down_revision|revision)\s*=\s*['\"]([^'\"]+)['\"]", re.MULTILINE)


def migrations_folder() -> Path:
    import auditor_migrations

    return Path(auditor_migrations.__file__).parent


@lru_cache(maxsize=1)
def quick_head() -> str | None:
    """The head revision read from the migration files without Alembic, or None if unsure."""
    revisions, parents = set(), set()
    for path in (migrations_folder() / "versions").glob("*.py"):
        found = dict(_REVISION.findall(path.read_text(encoding="utf-8")))
        if "revision" in found:
            revisions.add(found["revision"])
            if "down_revision" in found:
                parents.add(found["down_revision"])
    heads = revisions - parents
    return heads.pop() if len(heads) == 1 else None


def open_current_sqlite(url: str) -> SqliteStore | None:
    """The SQLite file at `url` as a `SqliteStore` when its schema is already current; None for
    anything else (PostgreSQL, a new file, a store to migrate), which `open_db` opens."""
    if not url.startswith("sqlite:///"):
        return None
    path = url.removeprefix("sqlite:///")
    head = quick_head()
    if head is None or not Path(path).is_file():
        return None
    try:
        conn = sqlite3.connect(path, timeout=lock_wait())
        try:
            versions = [r[0] for r in conn.execute("SELECT version_num FROM alembic_version")]
        finally:
            conn.close()
    except sqlite3.Error:  # not a store, or not one of ours yet: open_db says what is wrong
        return None
    return SqliteStore(path) if versions == [head] else None
