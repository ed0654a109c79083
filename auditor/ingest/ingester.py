"""Incremental ingest of transcript files into the store.

Each file is remembered (path, size, mtime, how far it was read and fingerprints of the bytes
around that point). An unchanged file is skipped without being opened; an appendable (JSONL)
file that grew is read from where the last ingest stopped; a file rewritten in place is read
again from the start, replacing what it had contributed.

The store's write lock is never held while a file is parsed: what a parser yields is kept in
memory (bounded: `PENDING_RECORDS` records, `PENDING_BYTES` of the files read, `COMMIT_SECONDS`)
and then written in one short transaction, several small files together, each in a savepoint of
its own so that a failure undoes that file alone. A file bigger than the bound is written in
several such transactions; until its last one it is remembered as not read, so that an ingest
stopped in between reads it again. Since the store may change while a file is parsed (another
ingest, a live worker), each write first checks that the file's row is still as it was read;
if not, that file is read again. A caller may also bound how much of a file one ingest reads
(`read_limit`: a live worker, per hook event); the next ingest goes on from there.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import os
import socket
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import orjson

from ..errors import FormatError
from ..model import BOM, Cursor, Message, Notice, Problem, Reread, ThreadInfo, Usage
from ..store import events, search
from ..store.db import connection_lost, utcnow
from ..store.sql_text import DriverSql, marks, store_failed, stored_json, stored_time
from . import guidance
from .bulk_rows import RowBatch, refresh_threads
from .transcript_files import HEAD_BYTES, fingerprints, iter_files, past_bad_lines

if TYPE_CHECKING:
    from sqlalchemy import Connection, Engine

    from ..plugins import Plugins
    from ..store.sql_text import SqliteWriter

PENDING_RECORDS = 20000  # write what was parsed once this many records wait...
PENDING_BYTES = 32 << 20  # ...or this many bytes of the files were read for them...
COMMIT_SECONDS = 2.0  # ...or this long after the first of them was parsed
CLOCK_EVERY = 64  # records parsed between two looks at the clock
STALE_RETRIES = 3  # times a file whose row another ingest changed meanwhile is read again
_INFO_FIELDS = (
    "cwd",
    "git_branch",
    "title",
    "version",
    "parent_native_id",
    "parent_tool_use_id",
    "is_sidechain",
    "agent_type",
    "guidance",
    "meta",
)
BATCH = 2000
MAX_ERRORS_PER_FILE = 20


@dataclass
class FileResult:
    path: str
    status: str  # new | grown | rewritten | skipped | empty | failed
    format: str | None = None
    messages: int = 0  # the messages the store gained from this file
    known: int = 0  # messages read that the store already held (another machine's copy...)
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what its reader said that is no problem
    unread: int = 0  # bytes left for the next ingest: this one read up to its `read_limit`
    # The file was read again from its start over what it gave before (its rows replaced under
    # new ids), whatever `status` ends up saying: a re-read that also met a problem is `failed`.
    reread: bool = False


@dataclass
class _Reading:
    """A file being read: what its parser gave that is not written yet, and what its writes
    need to know."""

    path: Path
    st: os.stat_result
    fmt: Any
    status: str  # new | grown | rewritten
    unvouched: bool
    start: Cursor  # where this read began: what the store remembers until the read is written
    cursor: Cursor  # where the parser got to
    seen: tuple | None  # the file's row as this read found it (see `_row_key`)
    result: FileResult
    notes: list[str] = field(default_factory=list)  # what its reader said that is no problem
    records: list = field(default_factory=list)  # parsed, not written yet
    errors: list[tuple[str, int | None, str]] = field(default_factory=list)
    extra_errors: int = 0
    read: int = 0  # messages read; result.messages counts those the store gained
    gained: dict[int, int] = field(default_factory=dict)
    # True when something in the file was not stored (a record the store cannot take, a parser
    # that stopped): the file is then not remembered as read, and the next ingest reads it again.
    unfinished: bool = False
    parsed: bool = False  # the parser has ended
    file_id: int | None = None
    begun: bool = False  # its first part is written
    before: set[int] = field(default_factory=set)  # threads it fed before it was rewritten
    threads: set[int] = field(default_factory=set)  # threads it feeds
    stale: bool = False  # its row changed under it: read it again
    dropped: bool = False  # the store refused it: nothing more is written


@dataclass
class IngestSummary:
    files_seen: int = 0
    new: int = 0
    grown: int = 0
    rewritten: int = 0
    skipped: int = 0
    empty: int = 0
    failed: int = 0
    threads: int = 0  # threads that gained messages
    messages: int = 0  # messages added
    known: int = 0  # messages read that were stored already
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # FILE: what its reader said, no problem
    files: list[FileResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.failed == 0

    def as_dict(self) -> dict:
        return {
            "files_seen": self.files_seen,
            "new": self.new,
            "grown": self.grown,
            "rewritten": self.rewritten,
            "skipped": self.skipped,
            "empty": self.empty,
            "failed": self.failed,
            "threads": self.threads,
            "messages": self.messages,
            "known_messages": self.known,
            "errors": self.errors,
            "notes": self.notes,
        }


SOURCE_VAR = "AUDITOR_SOURCE"
INGEST_LOCK = 0x696E6765  # PostgreSQL advisory lock key of ingest's write groups ("inge")


# Objects a parser makes per record (dicts, lists, rows) are freed as soon as they are written,
# but each allocation counts toward the cyclic collector's next pass, and every few passes it
# walks all the objects there are, the imported modules' included: a tenth of a cold ingest's
# CPU. During an ingest (`ingest`: the command, a scheduled one) the collector looks far less
# often, and not at what existed before. Not in a live worker's read of one event: there the
# objects frozen each time would be its young ones, left for the rare full passes once thawed.
GC_ALLOCATIONS = 50_000  # allocations between two passes over the youngest objects (default 700)


@contextlib.contextmanager
def fewer_collections() -> Iterator[None]:
    """Within: the objects that existed before are left out of the cyclic collector's passes
    (`gc.freeze`), and the passes are rarer; both undone at the end."""
    threshold = gc.get_threshold()
    gc.collect(1)  # what is garbage already is not kept for the life of the process
    gc.freeze()
    gc.set_threshold(max(threshold[0], GC_ALLOCATIONS), *threshold[1:])
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        gc.unfreeze()


def _add_counts(into: dict[int, int], more: dict[int, int]) -> None:
    for key, count in more.items():
        into[key] = into.get(key, 0) + count


def default_source() -> str:
    """The name of this machine's files in the store: $AUDITOR_SOURCE, else the host name."""
    return os.environ.get(SOURCE_VAR) or socket.gethostname()


def _info_fingerprint(info: ThreadInfo) -> bytes:
    # Serialised, not a tuple of references: parsers may update a dict they yielded before.
    return orjson.dumps([getattr(info, f) for f in _INFO_FIELDS], option=orjson.OPT_NON_STR_KEYS)


class Ingester:
    """Ingest files into one database with one set of plugins."""

    def __init__(
        self,
        engine: Engine | SqliteWriter,
        plugins: Plugins,
        format_name: str | None = None,
        source: str | None = None,
        include_forgotten: bool = False,
        read_limit: int | None = None,
    ):
        """`engine`: the store's, or a SQLite store to write without SQLAlchemy. `read_limit`:
        bytes of one file read at most by one `run` (None: all of it)."""
        self.engine = engine
        self.read_limit = read_limit
        self.source = source or default_source()
        from ..store import forget

        # Threads `auditor forget` removed stay out, sub-agents of a forgotten session too;
        # unless asked, when their files are read again from the start.
        with engine.connect() as conn:
            conn.begin()
            if include_forgotten:
                forget.remember_again(conn)
            self._forgotten = forget.tombstones(conn)
            conn.commit()
        self.plugins = plugins
        self.forced = plugins.format(format_name) if format_name else None
        # Formats with a lower `detect_priority` are tried first; generic ones set it high.
        self.formats = sorted(
            plugins.formats().values(), key=lambda f: getattr(f, "detect_priority", 0)
        )
        self._thread_ids: dict[tuple[str, str], int] = {}
        self._thread_infos: dict[tuple[str, str], bytes] = {}
        self.touched_threads: set[int] = set()
        self.grown_threads: set[int] = set()  # those that gained messages
        # Threads written to since the last commit, and the last message row before it: their
        # aggregates are refreshed in the same transaction as the rows, so a kill at any point
        # never leaves committed rows with stale counts.
        self._group_threads: set[int] = set()
        self._group_since = 0
        # Whether the group deleted rows (a rewritten file): the ids of the rows it then writes
        # may be below `_group_since` on SQLite, and its threads are recounted whole.
        self._group_deleted = False
        self._file_threads: set[int] = set()  # the threads the file being read feeds
        # The group's new messages and their searchable texts (SQLite), indexed when the group
        # commits.
        self._group_indexed: list[tuple[int, str]] = []
        self._group_named: list[tuple[int, str]] = []
        self._group_answered: list[tuple[int, str]] = []
        self._thread_stmts: dict[tuple, str] = {}
        # Writes waiting for the next transaction, in order; what they hold; the results to
        # report once it commits; files to read again because their row changed meanwhile.
        self._writes: list[Callable[[Connection], None]] = []
        self._pending_records = 0
        self._pending_bytes = 0
        self._pending_since: float | None = None
        self._written: list[FileResult] = []
        self._again: list[tuple[Path, int]] = []
        self._summary = IngestSummary()
        self._progress: Callable[[FileResult], None] | None = None

    # -- writing ------------------------------------------------------------------------
    # Writes are queued and made together in one transaction (a commit costs far more than a
    # small file), each file inside its own savepoint so that a failure undoes only that file.
    # The transaction is open only while they are written, never while a file is parsed. A
    # stop at any moment loses nothing committed; what was not committed is read again next
    # time, since its source_files row was not committed either.
    def _queue(self, write: Callable[[Connection], None], records: int = 0, size: int = 0) -> None:
        if self._pending_since is None:
            self._pending_since = time.monotonic()
        self._writes.append(write)
        self._pending_records += records
        self._pending_bytes += size

    def _full(self, records: int = 0, size: int = 0) -> bool:
        """True when what waits, with `records` and `size` more, is to be written now."""
        if not (self._writes or records):
            return False
        since = self._pending_since
        return (
            self._pending_records + records >= PENDING_RECORDS
            or self._pending_bytes + size >= PENDING_BYTES
            or (since is not None and time.monotonic() - since > COMMIT_SECONDS)
        )

    def _room(self) -> tuple[int, int]:
        """The records and bytes that would fill the queue as it is now."""
        return PENDING_RECORDS - self._pending_records, PENDING_BYTES - self._pending_bytes

    def _flush(self) -> None:
        """Make the queued writes in one transaction, then report the files they finished."""
        if not self._writes:
            return
        writes, self._writes = self._writes, []
        self._pending_records = self._pending_bytes = 0
        self._pending_since = None
        try:
            with self.engine.connect() as opened:
                # A SQLAlchemy connection, or a SQLite one that answers the same calls.
                conn = cast("Connection", opened)
                conn.begin()
                if conn.dialect.name == "sqlite":
                    # pysqlite begins no transaction before a SAVEPOINT, so each file's
                    # savepoint would commit on release, apart from its threads' aggregates:
                    # begin the group's transaction here, taking the write lock now (waiting up
                    # to the busy timeout).
                    conn.exec_driver_sql("BEGIN IMMEDIATE")
                elif conn.dialect.name == "postgresql":
                    # Ingesters on several machines write one group at a time, as SQLite's
                    # write lock has them do: no two groups upsert the same threads in
                    # different orders (a deadlock).
                    conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({INGEST_LOCK})")
                self._group_threads = set()
                self._group_indexed = []
                self._group_named = []
                self._group_answered = []
                self._group_deleted = False
                self._group_since = DriverSql(conn).scalar("SELECT max(id) FROM messages") or 0
                for write in writes:
                    write(conn)
                self._finish_group(conn)
                conn.commit()
        except BaseException:
            self._forget_threads()  # ids of threads made in the group are undone with it
            self._written = []
            raise
        written, self._written = self._written, []
        for result in written:
            self._report(result)

    def _report(self, result: FileResult) -> None:
        summary = self._summary
        summary.files_seen += 1
        summary.files.append(result)
        setattr(summary, result.status, getattr(summary, result.status) + 1)
        summary.messages += result.messages
        summary.known += result.known
        summary.errors.extend(result.errors)
        summary.notes.extend(result.notes)
        if self._progress:
            self._progress(result)

    # -- public ---------------------------------------------------------------------------
    def run(
        self,
        paths: Iterable[str | os.PathLike],
        progress: Callable[[FileResult], None] | None = None,
    ) -> IngestSummary:
        summary = self._summary = IngestSummary()
        self._progress = progress

        def walk_error(path: str, message: str) -> None:
            line = f"{path}: {message}"
            summary.failed += 1
            summary.errors.append(line)
            self._record_errors([(path, None, message)])

        try:
            patterns = [p for f in self.formats for p in getattr(f, "file_patterns", ())]
            for path in iter_files(paths, walk_error, patterns):
                self.ingest_file(path)
                self._read_again()
            self._flush()
            self._read_again()
        except BaseException:
            # Ctrl-C, a parser's bug: what was parsed and checked is still written. A server
            # that went away took the group being written with it: the error that says so is
            # the one raised.
            try:
                self._flush()
            except Exception as exc:
                # The connection the group was on is gone or unusable (PendingRollbackError):
                # nothing of it can be committed, and the first error says why.
                from sqlalchemy.exc import PendingRollbackError  # only once something failed

                if not (connection_lost(exc) or isinstance(exc, PendingRollbackError)):
                    raise
            raise
        summary.threads = len(self.grown_threads)
        return summary

    def _read_again(self) -> None:
        """Read again the files whose row another ingest changed while they were parsed."""
        while self._again:
            path, tries = self._again.pop(0)
            self.ingest_file(path, tries)
            self._flush()

    def ingest_file(self, path: Path, tries: int = 0) -> None:
        """Read `path` and queue what it gave (written by the next `_flush`)."""
        spath = str(path)
        try:
            st = path.stat()
        except OSError as exc:
            return self._fail(spath, f"cannot read file: {exc.strerror or exc}")
        row = self._source_row(spath)
        if (
            row is not None
            and row.size == st.st_size
            and row.mtime_ns == st.st_mtime_ns
            # An unchanged file read as another format than the one forced is looked at again.
            and (self.forced is None or row.format == self.forced.name)
        ):
            return self._report(FileResult(spath, "skipped", row.format))
        if st.st_size == 0:
            message = "empty file (0 bytes): nothing to ingest"
            result = FileResult(spath, "empty", errors=[f"{spath}: {message}"])

            def empty(conn: Connection) -> None:
                self._remember(spath, st, None, Cursor(), conn)
                self._insert_errors(conn, [(spath, None, message)])
                events.record_file(conn, result)
                self._written.append(result)

            return self._queue(empty)
        try:
            with open(path, "rb") as fh:
                head = fh.read(HEAD_BYTES)
        except OSError as exc:
            return self._fail(spath, f"cannot read file: {exc.strerror or exc}")
        unvouched = False  # forced on a file no detector recognises
        if self.forced is not None:
            claimants = list(self._claimants(path, head))
            if claimants and self.forced not in claimants:
                # Reading a file as a format it is not stores nothing or nonsense, and a file
                # read before would lose what it gave: refuse before touching the store.
                other = claimants[0].name
                return self._fail(
                    spath,
                    f"--format {self.forced.name} does not fit this {other} transcript; "
                    f"drop --format, or use --format {other}",
                )
            unvouched = not claimants
        fmt = self.forced or self._detect(path, head)
        if fmt is None:
            names = ", ".join(f.name for f in self.formats)
            return self._fail(
                spath, f"unknown transcript format (tried {names}); use --format NAME to force one"
            )
        if self.read_limit is not None and not fmt.appendable and st.st_size > self.read_limit:
            # A document is read whole: one over the limit is not read at all by this ingest.
            return self._fail(
                spath,
                f"{st.st_size:,} bytes, over the {self.read_limit:,} this ingest reads of a "
                "file: not read (`auditor ingest` reads it)",
            )

        status, cursor = "new", Cursor()
        if row is not None:
            status = "rewritten"
            if (
                fmt.appendable
                and row.format == fmt.name
                and st.st_size > row.offset
                and row.offset > 0
                and (row.head_hash, row.tail_hash) == fingerprints(path, row.offset)
            ):
                status = "grown"
                state = row.parser_state
                if isinstance(state, (str, bytes)):  # JSON text as SQLite hands it back
                    state = orjson.loads(state)
                cursor = Cursor(row.offset, row.lines, dict(state or {}))
        reading = _Reading(
            path,
            st,
            fmt,
            status,
            unvouched,
            start=_copy(cursor),
            cursor=cursor,
            seen=_row_key(row),
            result=FileResult(spath, status, fmt.name, reread=status == "rewritten"),
        )
        self._parse(reading)
        if reading.stale and tries < STALE_RETRIES:
            self._again.append((path, tries + 1))

    def _source_row(self, spath: str) -> _SourceRow | None:
        with self.engine.connect() as conn:
            return _source_row(DriverSql(conn), self.source, spath)

    # -- internals ------------------------------------------------------------------------
    def _claimants(self, path: Path, head: bytes) -> Iterator:
        """The formats whose detector recognises the file, most specific first."""
        head = head.removeprefix(BOM)
        # A damaged first line (malformed JSON, bytes that are not UTF-8) must not hide the
        # file: when nothing recognises it, look again from its first line that parses.
        for attempt in (head, None):
            if attempt is None:
                # Only looked for once the head as it is was recognised by none: most files'
                # first line parses.
                attempt = past_bad_lines(head)
                if attempt is None:
                    return
            for fmt in self.formats:
                try:
                    if fmt.detect(path, attempt):
                        yield fmt
                except Exception:  # noqa: BLE001 - a detector bug must not stop the walk
                    continue

    def _detect(self, path: Path, head: bytes):
        return next(self._claimants(path, head), None)

    def _fail(self, path: str, message: str, line: int | None = None) -> None:
        """Queue a file that could not be read, with its one line."""
        where = f"{path}:{line}" if line else path
        result = FileResult(path, "failed", errors=[f"{where}: {message}"])

        def failed(conn: Connection) -> None:
            self._insert_errors(conn, [(path, line, message)])
            events.record_file(conn, result)
            self._written.append(result)

        self._queue(failed)

    def _record_errors(self, rows: list[tuple[str, int | None, str]]) -> None:
        self._queue(lambda conn: self._insert_errors(conn, rows))

    def _insert_errors(self, conn: Connection, rows: list[tuple[str, int | None, str]]) -> None:
        if not rows:
            return
        db = DriverSql(conn)
        # A problem already on record (a live file re-read while still being written) is not
        # recorded again.
        known = (
            set(db.all("SELECT line, error FROM ingest_errors WHERE path = ?", (rows[0][0],)))
            if len({r[0] for r in rows}) == 1
            else set()
        )
        rows = [r for r in rows if (r[1], r[2]) not in known]
        if rows:
            now = stored_time(utcnow(), db.sqlite)
            db.many(
                "INSERT INTO ingest_errors (path, line, error, created_at) VALUES (?, ?, ?, ?)",
                [(p, ln, e, now) for p, ln, e in rows],
            )

    def _remember(
        self,
        path: str,
        st,
        fmt: str | None,
        cursor: Cursor,
        conn: Connection,
        errors: int = 0,
        unread: bool = False,
    ):
        """Record how far `path` was read. `unread`: not all of it was stored, so the next
        ingest must read it again (an mtime no file has makes it look changed)."""
        head = tail = None
        if cursor.offset:
            head, tail = fingerprints(Path(path), cursor.offset)
        size, mtime = st.st_size, -1 if unread else st.st_mtime_ns
        if cursor.offset > size and not unread:
            # The agent appended to the file while it was read (a live hook reads it as it is
            # written), and its new lines were read too. With the size taken before, the next
            # ingest would find the file no larger than what was read and read it whole again
            # as rewritten; so the file is remembered as read up to its end, with the time it
            # was last written: a file written again since, or longer than that, is read on.
            size = cursor.offset
            try:
                mtime = os.stat(path).st_mtime_ns
            except OSError:
                mtime = -1
        db = DriverSql(conn)
        values = (
            self.source,
            path,
            fmt,
            size,
            mtime,
            cursor.offset,
            cursor.line,
            head,
            tail,
            stored_json(cursor.state or None),
            stored_time(utcnow(), db.sqlite),
            errors,
        )
        return db.scalar(_REMEMBER_SQL, values)

    def _thread_sql(self, sqlite: bool, columns: tuple[str, ...], merged: tuple[str, ...]) -> str:
        """The thread upsert for these columns, made once (`?` marks, in `columns`' order)."""
        cache_key = (sqlite, columns, merged)
        sql = self._thread_stmts.get(cache_key)
        if sql is not None:
            return sql
        sets = [f"{c} = excluded.{c}" for c in merged if c != "meta"]
        if "meta" in merged:
            # Later records fill in or update keys; they do not drop what earlier ones said.
            sets.append(
                "meta = json_patch(coalesce(threads.meta, '{}'), excluded.meta)"
                if sqlite
                # json has no ||; jsonb's is a shallow merge like json_patch's for these keys.
                else "meta = CAST(COALESCE(CAST(threads.meta AS jsonb), '{}'::jsonb)"
                " || CAST(excluded.meta AS jsonb) AS json)"
            )
        # With nothing to merge, a no-op update so that RETURNING gives the existing row's id.
        sql = (
            f"INSERT INTO threads ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))}) "
            "ON CONFLICT (agent, native_id) DO UPDATE SET "
            f"{', '.join(sets) or 'agent = excluded.agent'} RETURNING id"
        )
        self._thread_stmts[cache_key] = sql
        return sql

    def _is_forgotten(self, agent: str, rec) -> bool:
        native = rec.native_id if isinstance(rec, ThreadInfo) else getattr(rec, "thread", None)
        if not isinstance(native, str):
            return False
        return (agent, native) in self._forgotten or (
            agent,
            native.split("/", 1)[0],
        ) in self._forgotten

    def _thread_id(
        self, conn: Connection, agent: str, info: ThreadInfo | None, native_id: str, file_id: int
    ) -> int:
        key = (agent, native_id)
        if key in self._thread_ids:
            self._group_threads.add(self._thread_ids[key])
            self._file_threads.add(self._thread_ids[key])
            if info is None:
                return self._thread_ids[key]
            # Parsers repeat what they know on many records; write only what changed.
            fingerprint = _info_fingerprint(info)
            if self._thread_infos.get(key) == fingerprint:
                return self._thread_ids[key]
            self._thread_infos[key] = fingerprint
        values: dict[str, Any] = {"agent": agent, "native_id": native_id, "source_file_id": file_id}
        merge = {}
        if info is not None:
            for name in (
                "cwd",
                "git_branch",
                "title",
                "version",
                "parent_native_id",
                "parent_tool_use_id",
                "agent_type",
                "guidance",
                "meta",
            ):
                value = getattr(info, name)
                if value is not None:
                    values[name] = stored_json(value) if name in _JSON_FIELDS else value
                    merge[name] = value
            if info.is_sidechain:
                merge["is_sidechain"] = True
        values["is_sidechain"] = bool(info is not None and info.is_sidechain)
        values.update(_NEW_THREAD)
        db = DriverSql(conn)
        sql = self._thread_sql(db.sqlite, tuple(values), tuple(merge))
        thread_id = db.scalar(sql, tuple(values.values()))
        self._thread_ids[key] = thread_id
        if info is not None:
            self._thread_infos[key] = _info_fingerprint(info)
        self.touched_threads.add(thread_id)
        self._group_threads.add(thread_id)
        self._file_threads.add(thread_id)
        return thread_id

    def _parse(self, r: _Reading) -> None:
        """Parse `r`'s file with no transaction open, queueing what it gives in parts: the
        lock is taken to write a part, never while the parser runs."""
        spath = str(r.path)
        fmt = r.fmt
        if self.read_limit is not None and fmt.appendable:
            r.cursor.until = r.cursor.offset + self.read_limit
        if self._pending_since is None:
            self._pending_since = time.monotonic()
        cursor = r.cursor  # moved on by the parser, in place
        records = iter(fmt.parse(r.path, cursor))
        offset = cursor.offset  # how far the parts queued so far read
        # What the queue may take before it is full, told without a call per record; the
        # clock is read every `CLOCK_EVERY` records.
        room, byte_room = self._room()
        held_records = r.records
        # A forced format on a file nobody recognises is written whole or not at all.
        in_parts = not r.unvouched
        forgotten, agent = self._forgotten, fmt.agent
        while True:
            try:
                rec = next(records)
            except StopIteration:
                break
            except Reread as exc:
                if r.status == "grown":  # the tail changed what was read before
                    # Read the whole file again from the start, replacing what it gave.
                    self._flush()  # its parts written so far: the new read's row is theirs
                    if r.stale or r.dropped:
                        return
                    again = _Reading(
                        r.path,
                        r.st,
                        fmt,
                        "rewritten",
                        r.unvouched,
                        start=Cursor(),
                        cursor=Cursor(),
                        seen=r.seen,
                        result=FileResult(spath, "rewritten", fmt.name, reread=True),
                    )
                    self._forget_threads()
                    self._parse(again)
                    r.stale = again.stale
                    return
                r.errors.append((spath, r.cursor.line or None, f"{fmt.name} parser: {exc}"))
                r.result.status, r.unfinished = "failed", True
                break
            except Exception as exc:  # noqa: BLE001 - a parser bug: keep what was read, say where it stopped
                r.errors.append(
                    (
                        spath,
                        r.cursor.line or None,
                        f"{fmt.name} parser failed: {type(exc).__name__}: {exc}",
                    )
                )
                r.result.status, r.unfinished = "failed", True
                break
            kind = type(rec)
            if kind is not Message and kind is not Usage:  # most records are one of these
                if isinstance(rec, Problem):
                    if len(r.errors) < MAX_ERRORS_PER_FILE:
                        r.errors.append((spath, rec.line, rec.message))
                    else:
                        r.extra_errors += 1
                    continue
                if isinstance(rec, Notice):
                    r.notes.append(_error_line(spath, rec.line, rec.message))
                    continue
            if forgotten and self._is_forgotten(agent, rec):
                continue
            held_records.append(rec)
            held = len(held_records)
            if (
                in_parts
                and (held >= room or cursor.offset - offset >= byte_room or not held % CLOCK_EVERY)
                and self._full(held, cursor.offset - offset)
            ):
                self._queue_part(r, False, cursor.offset - offset)
                held_records = r.records
                offset = cursor.offset
                self._flush()
                self._pending_since = time.monotonic()
                room, byte_room = self._room()
                if r.stale or r.dropped:
                    return
        self._queue_part(r, True, cursor.offset - offset)

    def _queue_part(self, r: _Reading, final: bool, size: int) -> None:
        part, r.records = r.records, []
        cursor = _copy(r.cursor)
        self._queue(lambda conn: self._write_part(conn, r, part, final, cursor), len(part), size)

    def _write_part(
        self, conn: Connection, r: _Reading, part: list, final: bool, cursor: Cursor
    ) -> None:
        """Write a part of what `r`'s file gave, the last one with how far it was read."""
        if r.stale or r.dropped:
            return
        spath, fmt, st = str(r.path), r.fmt, r.st
        savepoint = conn.begin_nested()
        try:
            if _row_key(_source_row(DriverSql(conn), self.source, spath)) != r.seen:
                # Another ingest (a live worker, another machine) wrote this file's row since
                # it was looked up: what was parsed may be stale, so the file is read again.
                savepoint.rollback()
                r.stale = True
                return
            if not r.begun:
                # Until its last part is written the file is remembered as not read, from where
                # this read began: a stop in between reads it again (what is written twice is
                # stored once).
                r.file_id = self._remember(spath, st, fmt.name, r.start, conn, unread=True)
                r.begun = True
                r.seen = (st.st_size, -1, r.start.offset, fmt.name)
                if r.status == "rewritten":
                    # Everything this file contributed is read again; drop it so nothing stale
                    # stays.
                    db, fed = DriverSql(conn), (r.file_id,)
                    self._group_deleted = True
                    found = db.all("SELECT id FROM threads WHERE source_file_id = ?", fed)
                    r.before.update(tid for (tid,) in found)
                    if db.sqlite:  # the index is told the texts it is to forget
                        self._group_indexed = search.unindex(
                            db, "source_file_id = ?", fed, self._group_indexed
                        )
                    for table in ("messages", "tool_calls", "token_usage"):
                        found = db.all(
                            f"SELECT DISTINCT thread_id FROM {table} WHERE source_file_id = ?",
                            fed,
                        )
                        r.before.update(tid for (tid,) in found)
                        db.execute(f"DELETE FROM {table} WHERE source_file_id = ?", fed)
                    # Recounted whole in this group: a later group of a file read in parts
                    # only adds what it writes to their counts, which must not still hold the
                    # rows deleted here.
                    self._group_threads |= r.before
            file_id = r.file_id
            assert file_id is not None  # set by the first part
            self._file_threads = r.threads
            agent = fmt.agent
            batch = RowBatch(conn.dialect.name)
            # Records come in runs of one thread: its id is looked up once per run.
            last: tuple[object, int] = (_NO_THREAD, 0)
            add_message, add_usage = batch.add_message, batch.add_usage
            read = 0  # messages of this part read
            rows = 0  # rows waiting in `batch` (`batch.size`), written once `BATCH` of them wait
            for rec in part:
                try:
                    if isinstance(rec, _ROWS):
                        if rec.thread != last[0]:
                            tid = self._thread_id(conn, agent, None, rec.thread, file_id)
                            last = (rec.thread, tid)
                        if isinstance(rec, Message):
                            add_message(last[1], file_id, rec)
                            read += 1
                        else:
                            add_usage(last[1], file_id, rec)
                        rows += 1
                    elif isinstance(rec, ThreadInfo):
                        self._thread_id(conn, fmt.agent, rec, rec.native_id, file_id)
                except Exception as exc:  # noqa: BLE001 - this record cannot be stored (nested too deeply...)
                    if store_failed(exc):
                        raise  # the store itself failed: undo the file
                    line = getattr(rec, "line", None) or cursor.line or None
                    r.errors.append((spath, line, f"could not store this record: {_why(exc)}"))
                    r.unfinished = True
                if rows >= BATCH:
                    _add_counts(r.gained, batch.flush(conn))
                    rows = 0
            r.read += read
            _add_counts(r.gained, batch.flush(conn))
            if not final:
                savepoint.commit()
            elif not self._finish_reading(conn, r, cursor, savepoint):
                return  # undone: nothing of it to index
            # Its messages are found by `auditor search` once the group commits.
            self._group_indexed += batch.indexed
            self._group_named += batch.named
            self._group_answered += batch.answered
        except Exception as exc:  # noqa: BLE001 - the store refused the file (disk full, locked...): undo it alone
            if connection_lost(exc):
                raise  # the whole group is undone: the command says so in one line
            if savepoint.is_active:
                savepoint.rollback()
            self._forget_threads()  # threads it created are undone with it
            r.dropped = True
            message = f"could not store this file: {type(exc).__name__}: {exc}"
            result = FileResult(
                spath, "failed", errors=[f"{spath}: {message}"], reread=r.status == "rewritten"
            )
            self._insert_errors(conn, [(spath, None, message)])
            events.record_file(conn, result)
            self._written.append(result)
        except BaseException:
            if savepoint.is_active:
                savepoint.rollback()
            raise

    def _finish_reading(self, conn: Connection, r: _Reading, cursor: Cursor, savepoint) -> bool:
        """The last part of a read is written: say how far the file was read, and what it gave.
        False when what the file gave is undone instead."""
        spath, fmt, st = str(r.path), r.fmt, r.st
        result = r.result
        errors = list(r.errors)
        result.messages = sum(r.gained.values())
        result.known = r.read - result.messages
        if r.before:
            self._drop_left_behind(conn, r.before)
        if r.extra_errors:
            errors.append((spath, None, f"... and {r.extra_errors} more problems in this file"))
        if r.unvouched and not r.read:
            # A forced format that read nothing from a file nobody recognises: keep what the
            # file gave before, and say so rather than report a file read.
            savepoint.rollback()
            self._forget_threads()
            if not errors:
                errors.append(
                    (spath, None, f"nothing in this file reads as a {fmt.name} transcript")
                )
            self._insert_errors(conn, errors)
            result = FileResult(spath, "failed", fmt.name, errors=[_error_line(*e) for e in errors])
            events.record_file(conn, result)
            self._written.append(result)
            return False
        self._insert_errors(conn, errors)
        partial = (
            cursor.until is not None and cursor.until <= cursor.offset < st.st_size
        )  # this ingest's read_limit reached: the next one goes on from here
        if r.unfinished:
            self._remember(spath, st, fmt.name, Cursor(), conn, len(errors), unread=True)
        elif partial:
            self._remember(spath, st, fmt.name, cursor, conn, len(errors), unread=True)
            result.unread = st.st_size - cursor.offset
        else:
            self._remember(spath, st, fmt.name, cursor, conn, errors=len(errors))
        savepoint.commit()
        self.grown_threads.update(r.gained)
        result.errors = [_error_line(*e) for e in errors]
        result.notes = r.notes
        if errors and result.status != "failed":
            result.status = "failed"
        events.record_file(conn, result)
        self._written.append(result)
        return True

    def _drop_left_behind(self, conn: Connection, before: set[int]) -> None:
        """After a rewrite, the threads the file no longer feeds: recount them, and delete
        those left with nothing at all (no rows from any file, never audited)."""
        self._group_threads |= before
        gone = before - self._file_threads
        if not gone:
            return
        empty = " ".join(
            f"AND NOT EXISTS (SELECT 1 FROM {table} x WHERE x.thread_id = threads.id)"
            for table in ("messages", "tool_calls", "token_usage", "checkpoints")
        )
        deleted = {
            tid
            for (tid,) in DriverSql(conn).all(
                f"DELETE FROM threads WHERE id IN ({marks(len(gone))}) {empty} RETURNING id",
                sorted(gone),
            )
        }
        if deleted:
            self._group_threads -= deleted
            self.touched_threads -= deleted
            self.grown_threads -= deleted
            self._forget_threads()  # their ids must not be used again

    def _forget_threads(self) -> None:
        self._thread_ids.clear()
        self._thread_infos.clear()

    def _finish_group(self, conn: Connection) -> None:
        """Link sidechains to their parents and refresh the aggregates of the threads written
        to since the last commit, before that commit."""
        if not self._group_threads:
            return
        db = DriverSql(conn)
        db.execute(
            "UPDATE threads SET parent_id = (SELECT p.id FROM threads p "
            "WHERE p.agent = threads.agent AND p.native_id = threads.parent_native_id) "
            "WHERE parent_id IS NULL AND parent_native_id IS NOT NULL"
        )
        ids = sorted(self._group_threads)
        # What they gained, found by `auditor search` now.
        search.index(db, self._group_indexed)
        self._group_indexed = []
        for i in range(0, len(ids), 500):
            chunk = ids[i : i + 500]
            # Rows only added since `_group_since`: the aggregates take what they add.
            refresh_threads(conn, chunk, None if self._group_deleted else self._group_since)
            # Their cost rollups are stale, and so are their subagents' (whose calls are
            # told apart from the parent's by comparing with it).
            listed = marks(len(chunk))
            db.execute(
                f"UPDATE threads SET rollup_dirty = ? WHERE id IN ({listed}) "
                f"OR parent_id IN ({listed})",
                (True, *chunk, *chunk),
            )
        # After the refresh: a thread's start (`started_at`) dates the rules it was given.
        # On SQLite the group holds the write lock: every message stored after
        # `_group_since` is one of its own: those naming a file and the calls whose results
        # it wrote are known.
        named = self._group_named if conn.dialect.name == "sqlite" else None
        guidance.collect(conn, ids, self._group_since, named, self._group_answered)


def _why(exc: BaseException) -> str:
    """The reason a record could not be stored, in one line."""
    orig = getattr(exc, "orig", None)  # SQLAlchemy's wrapping of the driver's error
    if isinstance(orig, BaseException):
        exc = orig
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:300]


_SOURCE_SQL = (
    'SELECT size, mtime_ns, "offset", format, lines, head_hash, tail_hash, parser_state '
    "FROM source_files WHERE source = ? AND path = ?"
)
_REMEMBER_SQL = (
    'INSERT INTO source_files (source, path, format, size, mtime_ns, "offset", lines, '
    "head_hash, tail_hash, parser_state, ingested_at, error_count) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (source, path) DO UPDATE SET "
    'format = excluded.format, size = excluded.size, mtime_ns = excluded.mtime_ns, "offset" = '
    'excluded."offset", lines = excluded.lines, head_hash = excluded.head_hash, tail_hash = '
    "excluded.tail_hash, parser_state = excluded.parser_state, ingested_at = "
    "excluded.ingested_at, error_count = excluded.error_count RETURNING id"
)
_JSON_FIELDS = ("guidance", "meta")
_NO_THREAD = object()  # no record's thread
_ROWS = (Message, Usage)  # the records written as rows of a thread
# What a new thread row starts with (the model's defaults).
_NEW_THREAD = {"message_count": 0, "tool_call_count": 0, "file_edit_count": 0, "rollup_dirty": True}


@dataclass(frozen=True)
class _SourceRow:
    """A file's row in `source_files`: how far it was read."""

    size: int
    mtime_ns: int
    offset: int
    format: str | None
    lines: int
    head_hash: str | None
    tail_hash: str | None
    parser_state: Any


def _source_row(db: DriverSql, source: str, spath: str) -> _SourceRow | None:
    row = db.first(_SOURCE_SQL, (source, spath))
    return None if row is None else _SourceRow(*row)


def _row_key(row: _SourceRow | None) -> tuple | None:
    """What tells a file's row changed: another ingest read it meanwhile."""
    return None if row is None else (row.size, row.mtime_ns, row.offset, row.format)


def _copy(cursor: Cursor) -> Cursor:
    """A cursor as it is now (parsers change their state in place as they read)."""
    return Cursor(cursor.offset, cursor.line, copy.deepcopy(cursor.state), cursor.until)


def _error_line(path: str, line: int | None, error: str) -> str:
    return f"{path}:{line}: {error}" if line else f"{path}: {error}"


def ingest(
    engine: Engine | SqliteWriter,
    plugins: Plugins,
    paths: Iterable[str | os.PathLike],
    format_name: str | None = None,
    progress: Callable[[FileResult], None] | None = None,
    source: str | None = None,
    include_forgotten: bool = False,
) -> IngestSummary:
    """Ingest `paths` (files or directories) and return what happened.

    `source` names the machine the files are on (default: `default_source()`). Threads
    `auditor forget` removed are left out, unless `include_forgotten`."""
    if format_name is not None and format_name not in plugins.formats():
        plugins.format(format_name)  # raises UnknownName with the list
    ingester = Ingester(engine, plugins, format_name, source, include_forgotten)
    with fewer_collections():
        return ingester.run(paths, progress)


__all__ = ["FileResult", "FormatError", "IngestSummary", "Ingester", "ingest"]
