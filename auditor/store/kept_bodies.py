"""A thread's messages held with their long bodies left in the store, read back when used.

The live worker keeps a session's thread from one hook event to the next (issue 26). Most of
what it would hold is the long bodies of its blocks: tool outputs, large tool inputs (a file
written whole), thinking. Most are never looked at again; the formatter renders an old call
again only when the focus of a checkpoint changes what its cut keeps. So `load_messages` here
gives the thread's messages with each body longer than `BODY_KEPT` characters left in the
store: the block is an `AwayBlock`, which reads its message's row back when its `text` or
`tool_input` is asked for (the rows read last are kept decoded, a few MB of them:
`StoredBodies`). Everything else about a block (its kind, tool name, ids, flags, the paths it
edited) stays in memory, and what a reader gets is the same value either way.

The messages of a long session's old turns are compacted (`StoredBodies.compact`): once two
turns have begun since, their short bodies too are left in the store, so that what is held of
them is what later checkpoints read of every message (ids, roles, kinds, tool names and call
ids, flags, paths); the formatter keeps what it found of them (sizes) and reads a body back
only when it renders that message again. The messages that open a turn (what a person typed, a
course correction) keep theirs: signals and the prompt read them at every checkpoint.

Nothing is lost when the store changed since the messages were loaded: a body is read from its
message's row, found by its id, else by the thread and the message's native id (a rewritten
transcript is stored again under new row ids), and only when the row's blocks are the bytes
loaded (a checksum of them); otherwise `BodyChanged` says so, and the worker loads the thread
again and audits what the store holds now.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import json
import sqlite3
import sys
import zlib
from typing import TYPE_CHECKING, Any

import orjson

from ..errors import AuditorError
from ..model import SOURCE_COURSE_CORRECTION, Block
from .threads import StoredMessage, message_rows

if TYPE_CHECKING:
    from sqlalchemy import Engine

# A block's body longer than this many characters stays in the store. Short ones are kept: a
# read back costs a statement, and most blocks (the agent's calls, short outputs) are short.
# On the 16-copy replica of `benchmarks/live_memory.py`, 512 rather than 1,024 held 0.4 MB
# less over the last eight tenths and read 1,007 rows back rather than 712 (6 ms more of SQL
# in all); 256, 0.1 MB less again for 1,179.
BODY_KEPT = 512
# How much of the rows read back (their blocks' JSON) is kept decoded, the rows just loaded
# first: a hook event's new messages are rendered at once. When the fit sized every earlier
# call again at each level once the focus moved, 2 MB of them saved reads (87,793 rows read
# back over the 2,208 renders of the 16-copy replica with 1 MB, 35,774 with 2 MB); since it
# sizes them only as far as a decision needs, 512 KB reads 706 rows back in all, and holds
# 2.9 MB less.
ROWS_KEPT_BYTES = 512 << 10

READ_CACHE_KIB = 1024  # SQLite's page cache for the bodies read back

_TEXT: Any = vars(Block)["text"]  # the slots of `Block`, under the properties of `AwayBlock`
_INPUT: Any = vars(Block)["tool_input"]
_FIELDS = tuple(f.name for f in dataclasses.fields(Block))


class BodyChanged(AuditorError):
    """A body to read back is no longer in the store as it was when its thread was loaded."""


class StoredBodies:
    """Reads the rows of messages back for their bodies, keeping the last ones read decoded."""

    def __init__(self, engine: Engine, kept_bytes: int = ROWS_KEPT_BYTES) -> None:
        self.engine = engine
        self.kept_bytes = kept_bytes
        self._rows: collections.OrderedDict[int, tuple[int, list]] = collections.OrderedDict()
        self._held = 0
        self.reads = 0  # rows read back, for tests and measurements
        self.compacted = 0  # messages compacted, for tests and measurements
        self._file: sqlite3.Connection | None = None
        self._turns: dict[int, _Turns] = {}  # by thread: how far its messages are compacted

    def clear(self) -> None:
        self._rows.clear()
        self._held = 0
        self._turns.clear()

    def close(self) -> None:
        self.clear()
        if self._file is not None:
            self._file.close()
            self._file = None

    def keep(self, row_id: int, size: int, blocks: list) -> None:
        """Keep a row's decoded blocks as the latest read."""
        old = self._rows.pop(row_id, None)
        if old is not None:
            self._held -= old[0]
        self._rows[row_id] = (size, blocks)
        self._held += size
        while self._held > self.kept_bytes and len(self._rows) > 1:
            _, (gone, _) = self._rows.popitem(last=False)
            self._held -= gone

    def blocks(self, row: _Row) -> list:
        """The decoded blocks of `row` as they were loaded (see the module docstring)."""
        row_id = row.message.id
        found = self._rows.get(row_id)
        if found is not None:
            self._rows.move_to_end(row_id)
            return found[1]
        raw = self._read(row)
        if raw is None or _checksum(raw[0]) != row.crc:
            name = row.message.native_id
            raise BodyChanged(
                f"message {name} of thread {row.thread_id} changed in the store since it was "
                "loaded (its transcript was rewritten or forgotten): load the thread again"
            )
        self.reads += 1
        blocks = _decode(raw[0])
        self.keep(row_id, len(raw[0]), blocks)
        return blocks

    def _read(self, row: _Row) -> tuple | None:
        """The row's blocks as stored (found by id, else by thread and native id), or None."""
        by_id = "SELECT {} FROM messages WHERE id = ?"
        # A rewritten transcript's messages are stored again under new ids.
        by_name = "SELECT {} FROM messages WHERE thread_id = ? AND native_id = ?"
        message = row.message
        by_name_args = (row.thread_id, message.native_id)
        if self.engine.dialect.name != "sqlite":
            from .sql_text import DriverSql

            with self.engine.connect() as conn:
                db = DriverSql(conn)
                raw = db.first(by_id.format("blocks::text"), (message.id,))
                if raw is None or _checksum(raw[0]) != row.crc:
                    raw = db.first(by_name.format("blocks::text"), by_name_args)
            return raw
        file = self._sqlite()
        raw = file.execute(by_id.format("CAST(blocks AS BLOB)"), (message.id,)).fetchone()
        if raw is None or _checksum(raw[0]) != row.crc:
            raw = file.execute(by_name.format("CAST(blocks AS BLOB)"), by_name_args).fetchone()
        return raw

    def _sqlite(self) -> sqlite3.Connection:
        """SQLite: a connection of its own, opened once, with a small page cache: the engine's
        connections keep up to 64 MiB of pages each (for ingest), and old bodies read back
        one by one need none of that."""
        if self._file is None:
            from .sql_text import lock_wait

            self._file = sqlite3.connect(
                self.engine.url.database or "", timeout=lock_wait(), check_same_thread=False
            )
            self._file.execute(f"PRAGMA cache_size=-{READ_CACHE_KIB}")
        return self._file

    def compact(self, thread_id: int, messages: list[StoredMessage]) -> None:
        """Leave in the store the bodies of `messages` (the thread as the worker holds it,
        grown since the last call) that are older than its last two turns (see the module
        docstring). Each message is looked at once: a turn's messages when the turn after the
        next one begins."""
        turns = self._turns.get(thread_id)
        if turns is None or not messages or turns.first is not messages[0]:
            if not messages:
                return
            turns = self._turns[thread_id] = _Turns(messages[0])
        from ..audit.checkpoints import is_typed_user

        for i in range(turns.seen, len(messages)):
            if is_typed_user(messages[i]) or messages[i].source_type == SOURCE_COURSE_CORRECTION:
                turns.starts = (turns.starts[1], i)
        turns.seen = len(messages)
        upto = turns.starts[0]
        if upto <= turns.done:
            return
        old = [m for m in messages[turns.done : upto] if _compactable(m)]
        turns.done = upto
        if not old:
            return
        # The checksums of rows whose bodies were all held: read once, each row's blocks
        # checked against what was loaded (a body is left in the store only as loaded).
        need = [m for m in old if _row_of(m) is None]
        stored = self._blocks_of(thread_id, need) if need else {}
        for m in old:
            row = _row_of(m)
            if row is None:
                raw = stored.get(m.id)
                if raw is None or _decode(raw) != [b.as_json() for b in m.blocks]:
                    continue  # changed in the store since: left as loaded
                row = _Row(self, thread_id, _checksum(raw))
                row.message = m
            for b in m.blocks:
                text = _TEXT.__get__(b)
                if type(text) is str and text:
                    _leave(b, _TEXT, row)
                if _INPUT.__get__(b) is not None and type(_INPUT.__get__(b)) is not _Row:
                    _leave(b, _INPUT, row)
            self.compacted += 1

    def _blocks_of(self, thread_id: int, messages: list[StoredMessage]) -> dict[int, Any]:
        """The stored blocks of `messages` (of thread `thread_id`) by row id, as bytes or text."""
        found: dict[int, Any] = {}
        ids = [m.id for m in messages]
        for start in range(0, len(ids), _IDS_AT_ONCE):
            part = ids[start : start + _IDS_AT_ONCE]
            sql = "SELECT id, {} FROM messages WHERE thread_id = ? AND id IN ({})"
            marks = ", ".join("?" * len(part))
            if self.engine.dialect.name != "sqlite":
                from .sql_text import DriverSql

                with self.engine.connect() as conn:
                    rows = DriverSql(conn).all(
                        sql.format("blocks::text", marks), (thread_id, *part)
                    )
            else:
                query = sql.format("CAST(blocks AS BLOB)", marks)
                rows = self._sqlite().execute(query, (thread_id, *part)).fetchall()
            found.update((r[0], r[1]) for r in rows if r[1] is not None)
        return found


_IDS_AT_ONCE = 500  # row ids in one statement (SQLite allows 32,766 bound values)


class _Turns:
    """How far a thread's messages are compacted (see `StoredBodies.compact`)."""

    __slots__ = ("done", "first", "seen", "starts")

    def __init__(self, first: StoredMessage) -> None:
        self.first = first  # the thread as loaded: loaded again, it is looked at anew
        self.seen = 0  # the messages looked at for the start of a turn
        self.starts = (0, 0)  # where the last two turns began
        self.done = 0  # the messages before this one are compacted


# A message whose bodies hold less than this many bytes keeps them: compacted, it holds the
# place of its row in the store instead (`_Row` and its checksum, ~100 bytes). Over the replay
# of `benchmarks/live_memory.py`, 128 rather than 256 held ~0.1 MB less and read 2,872 rows
# back rather than 2,522; 512, 0.2 MB more.
COMPACT_BYTES = 128


def _compactable(m: StoredMessage) -> bool:
    """True when `m` opens no turn and holds bodies worth leaving in the store."""
    from ..audit.checkpoints import is_typed_user

    if is_typed_user(m) or m.source_type == SOURCE_COURSE_CORRECTION:
        return False
    held = 0
    for b in m.blocks:
        text, value = _TEXT.__get__(b), _INPUT.__get__(b)
        if type(text) is str:
            held += sys.getsizeof(text)
        if value is not None and type(value) is not _Row:
            held += _held_bytes(value)
    return held >= COMPACT_BYTES


def _held_bytes(value: Any) -> int:
    size = sys.getsizeof(value)
    if isinstance(value, dict):
        return size + sum(_held_bytes(v) for v in value.values())
    if isinstance(value, list):
        return size + sum(_held_bytes(v) for v in value)
    return size


def _row_of(m: StoredMessage) -> _Row | None:
    """The row a body of `m` left in the store reads from, if one does."""
    for b in m.blocks:
        for value in (_TEXT.__get__(b), _INPUT.__get__(b)):
            if type(value) is _Row:
                return value
    return None


def _leave(block: Block, slot: Any, row: _Row) -> None:
    """Leave the body in `slot` of `block` in the store, to be read back from `row`. The class
    first: a reader in another thread meanwhile gets the body, held or read back."""
    if type(block) is not AwayBlock:
        block.__class__ = AwayBlock
    slot.__set__(block, row)


class _Row:
    """Where a message's bodies are in the store: its row (found by the message's id, else by
    its thread and native id), and the checksum of the row's blocks as loaded. Held in the
    slot of each body left there (see `AwayBlock`)."""

    __slots__ = ("bodies", "crc", "message", "thread_id")
    message: StoredMessage

    def __init__(self, bodies: StoredBodies, thread_id: int, crc: int):
        self.bodies, self.thread_id, self.crc = bodies, thread_id, crc

    def body(self, block: Block, name: str) -> Any:
        """The body `name` of `block`, one of the message's blocks, as stored."""
        index = next(i for i, b in enumerate(self.message.blocks) if b is block)
        return self.bodies.blocks(self)[index].get(name)


class AwayBlock(Block):
    """A `Block` whose text or tool input, or both, is in the store, read back when asked for:
    the slot holds the `_Row` to read it from. A slot of its own it has none, so that a block
    loaded whole can become one (`_leave`)."""

    __slots__ = ()

    @property
    def text(self) -> str | None:
        value = _TEXT.__get__(self)
        return value.body(self, "text") if type(value) is _Row else value

    @text.setter
    def text(self, value: str | None) -> None:
        _TEXT.__set__(self, value)

    @property
    def tool_input(self) -> Any:
        value = _INPUT.__get__(self)
        return value.body(self, "tool_input") if type(value) is _Row else value

    @tool_input.setter
    def tool_input(self, value: Any) -> None:
        _INPUT.__set__(self, value)

    def __eq__(self, other: object) -> bool:
        """Equal to a block, away or not, of the same values (its body read back)."""
        if not isinstance(other, Block):
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in _FIELDS)

    __hash__ = None  # type: ignore[assignment]  # as `Block`'s: mutable, compared by value

    def __copy__(self) -> Block:
        """A `Block` holding the bodies, read back: the row knows its blocks, not copies."""
        return Block(**{name: getattr(self, name) for name in _FIELDS})

    def __deepcopy__(self, memo: dict) -> Block:
        return Block(**{name: copy.deepcopy(getattr(self, name), memo) for name in _FIELDS})


def load_messages(
    engine: Engine, thread_id: int, bodies: StoredBodies, after_id: int | None = None
) -> list[StoredMessage]:
    """`auditor.store.threads.load_messages`, with the long bodies left in the store and read
    back through `bodies`. The rows loaded are kept decoded in `bodies` as the latest read (a
    hook event's new messages are rendered at once)."""
    from sqlalchemy import LargeBinary, Text, cast

    from . import schema as s

    raw = cast(s.Message.blocks, LargeBinary if engine.dialect.name == "sqlite" else Text)
    rows = message_rows(engine, thread_id, after_id, blocks=raw)
    out = []
    for r in rows:
        data: Any = r[7]
        decoded = _decode(data) if data is not None else []
        # A list of the message's blocks as long as they are (one grown by appending takes
        # room for four).
        blocks: list[Any] = [None] * len(decoded)
        row = None
        for index, b in enumerate(decoded):
            for name in _SHARED_FIELDS:
                value = b.get(name)
                if type(value) is str:
                    b[name] = _share(value)
            paths = b.get("edited_paths")
            if type(paths) is list:  # a file edited again and again: its path held once
                for k, path in enumerate(paths):
                    if type(path) is str:
                        paths[k] = _share(path)
            block = Block.from_json(b)
            away = _away(b)
            if away is not None:
                if row is None:
                    row = _Row(bodies, thread_id, _checksum(data))
                _leave(block, _TEXT if away == "text" else _INPUT, row)
            blocks[index] = block
        message = StoredMessage(
            r.id,
            r.native_id,
            _share(r.role),
            _share_or_none(r.source_type),
            r.timestamp,
            _share_or_none(r.model),
            r.seq,
            blocks,
            _share_or_none(r.usage_key),
        )
        if row is not None:
            row.message = message
            bodies.keep(r.id, len(data), decoded)
        out.append(message)
    return out


# The fields whose values many messages or blocks of a thread repeat (roles, kinds, models, tool
# names; the lines of one answer share its usage key; a call and its result share its id): each
# value is held once (`sys.intern`), not once per message as each row read makes it (so are the
# paths a call edited). On the 16-copy replica of `benchmarks/live_memory.py`, ~230 bytes a
# message.
_SHARED_FIELDS = ("kind", "tool_name", "tool_use_id")
_share = sys.intern


def _share_or_none(value: str | None) -> str | None:
    return None if value is None else _share(value)


def _away(b: dict) -> str | None:
    """Which body of block `b` stays in the store: "text", "tool_input", or None."""
    text = b.get("text")
    if isinstance(text, str) and len(text) > BODY_KEPT and b.get("kind") != "text":
        return "text"
    value = b.get("tool_input")
    if value is not None and _size(value, BODY_KEPT) > BODY_KEPT:
        return "tool_input"
    return None


def _size(value: Any, stop: int) -> int:
    """The characters of the strings in `value`, counted until past `stop`."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        total = 0
        for v in value:
            total += _size(v, stop - total)
            if total > stop:
                break
        return total
    return 0


def _decode(data: bytes | str) -> list:
    try:
        return orjson.loads(data) or []
    except orjson.JSONDecodeError:  # what only the standard parser reads (an integer past 64 bits)
        return json.loads(data) or []


def _checksum(data: bytes | str | None) -> int:
    if data is None:
        return -1
    return zlib.crc32(data.encode() if isinstance(data, str) else data)
