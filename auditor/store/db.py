"""The one door to the database: find it, open it, set pragmas, migrate it to head."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import sys
import time
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from ..errors import DatabaseError, StoreLost
from .sql_text import (
    PAGE_SIZE,
    SqliteStore,
    SqliteWriter,
    lock_wait,
    migrations_folder,
    open_current_sqlite,
    quick_head,
)

if TYPE_CHECKING:
    from sqlalchemy import Connection, Engine, Table

# SQLAlchemy is imported by the functions that use it, not here: `resolve_url` serves the
# reports that read a SQLite store through sqlite3 alone (see auditor.store.sql_text).

ENV_VAR = "AUDITOR_DB"


def utcnow() -> datetime:
    """Return the current time in UTC, as the store's timestamps are written."""
    return datetime.now(UTC)


def upsert(conn: Connection, table: Table):
    """Return an INSERT into `table` in the connection's dialect, which takes
    `on_conflict_do_update` / `on_conflict_do_nothing` (SQLite and PostgreSQL)."""
    from sqlalchemy.dialects import postgresql, sqlite

    return (postgresql if conn.dialect.name == "postgresql" else sqlite).insert(table)


def default_path() -> Path:
    """Return the per-user default database file."""
    import platformdirs

    return Path(platformdirs.user_data_dir("auditor", appauthor=False)) / "auditor.db"


def resolve_url(db: str | os.PathLike | None = None) -> str:
    """Turn `--db`, else `$AUDITOR_DB`, else the default path, into a SQLAlchemy URL.

    A value containing `://` is taken as a URL (e.g. `postgresql+psycopg://...`); anything
    else is a file path for SQLite.
    """
    value = db if db not in (None, "") else os.environ.get(ENV_VAR) or None
    if value is None:
        value = default_path()
    value = str(value)
    if "://" in value:
        scheme, rest = value.split("://", 1)
        if scheme == "postgres":  # as Heroku and many hosts write it
            return f"postgresql://{rest}"
        if scheme.split("+")[0] not in ("sqlite", "postgresql"):
            raise DatabaseError(
                f"auditor keeps its store in SQLite or PostgreSQL, not {scheme.split('+')[0]}: "
                "give a file path or postgresql+psycopg://USER:PASSWORD@HOST:5432/DBNAME"
            )
        return value
    return "sqlite:///" + str(Path(value).expanduser().resolve())


def location(url: str) -> str:
    """Say where the database at `url` is: a file path for a SQLite file, else the URL with
    any password hidden (so `sqlite3 "$(auditor db path)"` opens the store)."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        return parsed.database
    return parsed.render_as_string(hide_password=True)


def _script_location() -> str:
    return str(migrations_folder())


def alembic_config(url: str):
    """Return the Alembic Config of the store at `url`: auditor's migrations, no alembic.ini."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", _script_location())
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


LOCK_MARGIN_MS = 500  # PostgreSQL: lock waits end this long before a `wait_until`


def _wait_ms(wait_until: float | None) -> int:
    """The busy timeout in ms: `lock_wait()`, or the time left until `wait_until`."""
    most = int(lock_wait() * 1000)
    if wait_until is None:
        return most
    return max(0, min(most, int((wait_until - time.monotonic()) * 1000)))


# Ingest writes each file inside a savepoint, and SQLite keeps the pages a savepoint changes
# (to undo it) in a statement journal, a temporary file once it passes 64 KiB: a cold ingest of
# the 5x Claude Code replica wrote 160 MB to it in 41,000 writes, more than the store's own
# WAL. In memory (one file's pages at a time, freed at its release) that cost a tenth of the
# ingest's CPU less (2.24 -> 1.96 s), the same peak memory. What is committed is as safe: the
# journal only ever undoes a savepoint of a transaction still open.
TEMP_STORE = "MEMORY"


def _on_sqlite_connect(dbapi_conn, _record, wait_until: float | None = None) -> None:
    cur = dbapi_conn.cursor()
    cur.execute(f"PRAGMA busy_timeout={_wait_ms(wait_until)}")  # first: the next ones may wait
    cur.execute(f"PRAGMA page_size={PAGE_SIZE}")  # before anything is written: a new file only
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA cache_size=-65536")  # 64 MiB: index inserts stay in memory on big stores
    cur.execute(f"PRAGMA temp_store={TEMP_STORE}")
    cur.close()


def _create_private(path: Path) -> None:
    """Create a new store file readable by its owner only (0600, its new folders 0700): it
    holds transcripts and the observer's answers (docs/schema.md). SQLite gives its -wal and
    -shm files the same mode; an existing one open to others is closed (`_make_private`)."""
    missing = [p for p in reversed(path.parents) if not p.exists()]
    for folder in missing:
        with contextlib.suppress(FileExistsError):
            folder.mkdir(mode=0o700)
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    _make_private(path)


def _make_private(path: Path) -> None:
    """A store an older auditor left readable by others (0644, in a default folder 0755) is
    made its owner's alone, said once in one line. The folder only when it is auditor's own
    default one (a folder the user chose is theirs to set); a file of another user, a shared
    one, is left as it is."""
    from ..owner_only import tighten

    folder = [path.parent] if path.parent == default_path().parent else []
    files = [path, *(path.with_name(path.name + end) for end in ("-wal", "-shm"))]
    before = {str(p): _mode(p) for p in [*folder, *files]}
    changed = tighten([*folder, *files])
    if changed:
        said = ", ".join(f"{Path(p).name} {before[p]}" for p in changed)
        sys.stderr.write(
            f"auditor: the store {path} was readable by others ({said}); it holds transcripts "
            "unredacted, so it is now yours alone (0600, its folder 0700; docs/schema.md)\n"
        )


def _mode(path: Path) -> str:
    try:
        return oct(path.stat().st_mode & 0o777)[2:].zfill(4)
    except OSError:
        return "?"


def create(url: str, wait_until: float | None = None) -> Engine:
    """Create an engine for `url` with auditor's connection settings, without migrating.

    With `wait_until` (a `time.monotonic()` instant), no statement waits for another writer's
    lock past that instant: the busy timeout is set from the time left before each one.
    """
    from sqlalchemy import create_engine, event
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            _create_private(Path(parsed.database))
        timeout = _wait_ms(wait_until) / 1000
        engine = create_engine(url, connect_args={"timeout": timeout}, json_serializer=_dumps)
        event.listen(engine, "connect", partial(_on_sqlite_connect, wait_until=wait_until))
        if wait_until is not None:

            def _bound_wait(conn, cursor, *_args) -> None:
                cursor.connection.execute(f"PRAGMA busy_timeout={_wait_ms(wait_until)}")

            event.listen(engine, "before_cursor_execute", _bound_wait)
        return engine
    # PostgreSQL: times compared and cut into days in UTC, as SQLite stores them; room for
    # a run's leases, each held by a connection of its own (auditor.store.leases.hold).
    engine = create_engine(
        url,
        json_serializer=_dumps,
        max_overflow=100,
        # A restarted server ends every pooled connection: each is tested before use, so a
        # run that goes on after the restart starts from live ones.
        pool_pre_ping=True,
        # No statement waits for another's lock for ever, as none does on SQLite (its busy
        # timeout): a writer that never lets go (a stopped ingest holding the ingest lock) must
        # not keep a live worker, or a run, waiting with no end. A hook's deadline bounds it
        # closer still (below).
        connect_args={"options": f"-c timezone=UTC -c lock_timeout={int(lock_wait() * 1000)}"},
    )
    if wait_until is not None:

        def _bound_lock_wait(conn, cursor, *_args) -> None:
            # Ended by the server LOCK_MARGIN before `wait_until`, the statement fails cleanly
            # instead of being cut short by the caller's own deadline (hook.Watchdog), which
            # leaves the connection unusable; lock_timeout 0 would mean no limit: 1 ms at least.
            ms = max(1, _wait_ms(wait_until) - LOCK_MARGIN_MS)
            cursor.connection.execute(f"SET lock_timeout = {ms}")

        event.listen(engine, "before_cursor_execute", _bound_lock_wait)
    return engine


STORE_WAIT = 60.0  # seconds a run waits for a PostgreSQL server that went away to come back


def connection_lost(exc: BaseException) -> bool:
    """True when `exc` says the PostgreSQL server ended the connection or cannot take one now
    (restarted, shut down, starting up, unreachable): SQLSTATE classes 08 and 57, or a
    connection the driver found closed. A lock timeout or a bad statement is not."""
    from sqlalchemy.exc import DBAPIError, PendingRollbackError

    if isinstance(exc, PendingRollbackError):  # a transaction whose connection was cut
        return "connection" in str(exc).lower() or "closed" in str(exc).lower()
    if not isinstance(exc, DBAPIError):
        return False
    if exc.connection_invalidated:
        return True
    orig = exc.orig
    if not type(orig).__module__.startswith("psycopg"):
        return False
    import psycopg

    if not isinstance(orig, psycopg.OperationalError):
        return False
    state = getattr(orig, "sqlstate", None)
    return state is None or state[:2] in ("08", "57")


def lock_timed_out(exc: BaseException) -> bool:
    """True when `exc` says a statement gave up waiting for another writer's lock: SQLite's
    "database is locked" after its busy timeout, PostgreSQL's lock timeout (SQLSTATE 55P03)."""
    from sqlalchemy.exc import DBAPIError

    orig = exc.orig if isinstance(exc, DBAPIError) else exc
    if getattr(orig, "sqlstate", None) == "55P03":
        return True
    return type(orig).__name__ == "OperationalError" and "database is locked" in str(orig)


def one_line(exc: BaseException) -> str:
    """`exc` in one line: the driver's own words for a store error, without SQLAlchemy's
    statement and link."""
    from sqlalchemy.exc import DBAPIError

    if isinstance(exc, DBAPIError) and exc.orig is not None:
        exc = exc.orig
    said = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {said[0] if said else ''}".rstrip(": ")


def retry_lost(fn, *args, wait: float = STORE_WAIT, **kwargs):
    """Call `fn(*args, **kwargs)`; while it fails because the store's server went away
    (`connection_lost`), call it again after a growing pause, for up to `wait` seconds.

    `fn` must be safe to run again: one transaction that either committed or did not.
    """
    delay, end = 0.25, time.monotonic() + wait
    while True:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            if not connection_lost(exc) or time.monotonic() + delay > end:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 5.0)


def file_identity(engine: Engine) -> tuple[int, int] | None:
    """A SQLite store's file as (device, inode), to tell later whether it is still the same
    file; None for PostgreSQL or an in-memory store."""
    database = engine.url.database
    if engine.dialect.name != "sqlite" or database in (None, "", ":memory:"):
        return None
    try:
        found = os.stat(database)
    except OSError:
        return None
    return (found.st_dev, found.st_ino)


def file_gone(engine: Engine, identity: tuple[int, int] | None) -> bool:
    """True when the SQLite file that had `identity` was deleted or replaced since: writes go
    on into the deleted file's open handle and are lost with it, without an error."""
    if identity is None:
        return False
    return file_identity(engine) != identity


def store_trouble(exc: BaseException, db: str | os.PathLike | None = None) -> str | None:
    """The one line for a command stopped by its store: a full disk, a write the disk refused,
    a PostgreSQL server that went away; None for anything else."""
    import errno
    import sqlite3

    if connection_lost(exc):
        return str(lost_store(exc))
    orig = getattr(exc, "orig", None) or exc
    words = " ".join(str(orig).split())
    where = location(resolve_url(db))
    full = (isinstance(orig, sqlite3.OperationalError) and "full" in words) or (
        isinstance(orig, OSError) and orig.errno in (errno.ENOSPC, errno.EDQUOT)
    )
    if type(orig).__name__ == "DiskFull":  # PostgreSQL: the server's disk
        full = True
    if full:
        return (
            f"The disk holding the store {where} is full ({words}): the step being written was "
            "rolled back and everything stored before is intact; free some space, then run the "
            "same command again"
        )
    if isinstance(orig, sqlite3.OperationalError) and "disk i/o error" in words.lower():
        return (
            f"The store {where} could not be written ({words}: a full disk, a file size limit "
            "or a failing disk): the step being written was rolled back; check the disk, then "
            "run the same command again"
        )
    return None


def lost_store(exc: BaseException) -> StoreLost:
    """The one-line error for a command cut off by `connection_lost` `exc`."""
    orig = getattr(exc, "orig", None) or exc
    first = (str(orig).strip().splitlines() or [""])[0]
    return StoreLost(
        f"The store's server ended the connection ({type(orig).__name__}: {first}): every "
        "answer received is stored; once the server is up, run the same command again to resume"
    )


def _dumps(value) -> str:
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()


def current_revision(engine: Engine) -> str | None:
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def head_revision() -> str | None:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()


def _is_current(engine: Engine) -> bool:
    """The fast path of `upgrade`: True when the database is at head, decided without Alembic."""
    from sqlalchemy import text

    head = quick_head()
    if head is None:
        return False
    try:
        with engine.connect() as conn:
            return conn.execute(
                text("SELECT version_num FROM alembic_version")
            ).scalars().all() == [head]
    except Exception:  # noqa: BLE001 - no table yet, or not readable: let Alembic decide
        return False


def upgrade(engine: Engine) -> None:
    """Migrate the database to head (a no-op when it already is)."""
    if _is_current(engine):
        return
    if engine.dialect.name == "sqlite":
        from .new_store import create_if_new

        with engine.connect() as conn:
            if create_if_new(conn.connection.driver_connection):
                return
    from alembic.script import ScriptDirectory

    url = engine.url.render_as_string(hide_password=False)
    cfg = alembic_config(url)
    script = ScriptDirectory.from_config(cfg)
    current = current_revision(engine)
    if current == script.get_current_head():
        return
    if current is not None:
        try:
            script.get_revision(current)
        except Exception:  # noqa: BLE001 - Alembic's unknown-revision errors share no narrower public base
            raise DatabaseError(
                f"The database {engine.url.render_as_string(hide_password=True)} is at schema "
                f"revision {current}, which this version of auditor does not know: it was "
                "written by a newer auditor. Upgrade auditor (pip install -U auditor) or point "
                "--db at another database."
            ) from None
    run_migrations(engine)


def run_migrations(engine: Engine) -> None:
    """Run Alembic's migrations up to head (a new SQLite store is made by `upgrade` in one
    step instead, see `auditor.store.new_store`)."""
    from alembic import command

    cfg = alembic_config(engine.url.render_as_string(hide_password=False))
    with engine.begin() as conn:
        _lock_for_migration(conn)
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")  # under the lock Alembic reads the version again
    engine.dispose()  # the migration's connection had foreign keys off: open fresh ones


MIGRATION_LOCK = 0x61756469  # PostgreSQL advisory lock key of migrations ("audi")


def _lock_for_migration(conn) -> None:
    """Hold the database's write lock for the whole migration, so that commands started at the
    same time on a new database wait for the first one to migrate instead of racing it."""
    if conn.dialect.name == "sqlite":
        # Foreign keys off while tables are rebuilt (batch migrations): dropping the old copy of
        # a table would otherwise run its children's ON DELETE actions. Only outside a
        # transaction does this take effect; `upgrade` drops the connection afterwards.
        conn.exec_driver_sql("PRAGMA foreign_keys=OFF")
        # pysqlite opens no transaction before DDL: begin one that takes the write lock now
        # (waiting up to the busy timeout), so the migration's DDL is one atomic step.
        conn.exec_driver_sql("BEGIN IMMEDIATE")
    elif conn.dialect.name == "postgresql":
        # A lock of the whole database for this transaction, taken by every auditor migrating.
        conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK})")


def open_db(
    db: str | os.PathLike | None = None, *, migrate: bool = True, wait_until: float | None = None
) -> Engine:
    """Open the database named by `db`/`$AUDITOR_DB`/the default, migrated to head.

    `wait_until`: a `time.monotonic()` instant past which no wait for a lock goes on (see
    `create`); the Stop hook passes its deadline.
    """
    url = resolve_url(db)
    try:
        engine = create(url, wait_until)
        if migrate:
            upgrade(engine)
    except DatabaseError:
        raise
    except ModuleNotFoundError as exc:
        if exc.name not in ("psycopg", "psycopg2"):
            raise
        if exc.name == "psycopg2":
            raise DatabaseError(
                "postgresql+psycopg2:// needs psycopg2, which auditor does not install: use "
                "postgresql+psycopg://... (psycopg 3: pip install 'auditor[postgres]')"
            ) from exc
        raise DatabaseError(
            "A PostgreSQL store needs the psycopg driver: pip install 'auditor[postgres]'"
        ) from exc
    except Exception as exc:
        # The driver's own words on one line, without SQLAlchemy's statement and link.
        from sqlalchemy.engine import make_url

        orig = getattr(exc, "orig", None)
        reason = " ".join(str(orig if isinstance(orig, Exception) else exc).split())
        raise DatabaseError(
            f"Cannot open the database {make_url(url).render_as_string(hide_password=True)}: "
            f"{reason}"
        ) from exc
    return engine


def open_for_writing(db: str | os.PathLike | None = None) -> Engine | SqliteWriter:
    """The store for an ingest: a SQLite file at the current schema (made now when new) is
    written through sqlite3 alone (`auditor.store.sql_text.SqliteWriter`), saving a cold ingest
    SQLAlchemy's imports; anything else (PostgreSQL, a store to migrate) is `open_db`'s engine."""
    from .new_store import create_if_new, usable

    url = resolve_url(db)
    if not url.startswith("sqlite:///") or not usable():
        return open_db(db)
    path = Path(url.removeprefix("sqlite:///"))
    writer = SqliteWriter(str(path))
    try:
        _create_private(path)
        with writer.connect() as conn:
            create_if_new(conn.driver_connection)
    except (OSError, sqlite3.Error):
        writer.dispose()
        return open_db(db)  # which says in one line what is wrong with it
    if open_current_sqlite(url) is None:
        writer.dispose()
        return open_db(db)
    return writer


def open_for_reading(db: str | os.PathLike | None = None) -> Engine | SqliteStore:
    """The store for a report: read through sqlite3 alone when it is a SQLite file already at
    the current schema (see `auditor.store.sql_text`), else `open_db`'s engine, which migrates.
    Either way a store left open to others is made its owner's alone, as `create` does."""
    store = open_current_sqlite(resolve_url(db))
    if store is None:
        return open_db(db)
    _make_private(Path(store.path))
    return store
