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

Nothing is lost when the store changed since the messages were loaded: a body is read from its
message's row, found by its id, else by the thread and the message's native id (a rewritten
transcript is stored again under new row ids), and only when the row's blocks are the bytes
loaded (a checksum of them); otherwise `BodyChanged` says so, and the worker loads the thread
again and audits what the store holds now.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import sqlite3
import sys
import zlib
from typing import TYPE_CHECKING, Any

import orjson

from ..errors import AuditorError
from ..model import Block
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

_AWAY: Any = object()  # in a body's slot: the body is in the store
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
        self._file: sqlite3.Connection | None = None

    def clear(self) -> None:
        self._rows.clear()
        self._held = 0

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
        found = self._rows.get(row.id)
        if found is not None:
            self._rows.move_to_end(row.id)
            return found[1]
        raw = self._read(row)
        if raw is None or _checksum(raw[0]) != row.crc:
            raise BodyChanged(
                f"message {row.native_id} of thread {row.thread_id} changed in the store since "
                "it was loaded (its transcript was rewritten or forgotten): load the thread again"
            )
        self.reads += 1
        blocks = _decode(raw[0])
        self.keep(row.id, len(raw[0]), blocks)
        return blocks

    def _read(self, row: _Row) -> tuple | None:
        """The row's blocks as stored (found by id, else by thread and native id), or None."""
        by_id = "SELECT {} FROM messages WHERE id = ?"
        # A rewritten transcript's messages are stored again under new ids.
        by_name = "SELECT {} FROM messages WHERE thread_id = ? AND native_id = ?"
        if self.engine.dialect.name != "sqlite":
            from .sql_text import DriverSql

            with self.engine.connect() as conn:
                db = DriverSql(conn)
                raw = db.first(by_id.format("blocks::text"), (row.id,))
                if raw is None or _checksum(raw[0]) != row.crc:
                    raw = db.first(by_name.format("blocks::text"), (row.thread_id, row.native_id))
            return raw
        # SQLite: a connection of its own, opened once, with a small page cache: the engine's
        # connections keep up to 64 MiB of pages each (for ingest), and old bodies read back
        # one by one need none of that.
        if self._file is None:
            from .sql_text import lock_wait

            self._file = sqlite3.connect(
                self.engine.url.database or "", timeout=lock_wait(), check_same_thread=False
            )
            self._file.execute(f"PRAGMA cache_size=-{READ_CACHE_KIB}")
        file = self._file
        raw = file.execute(by_id.format("CAST(blocks AS BLOB)"), (row.id,)).fetchone()
        if raw is None or _checksum(raw[0]) != row.crc:
            raw = file.execute(
                by_name.format("CAST(blocks AS BLOB)"), (row.thread_id, row.native_id)
            ).fetchone()
        return raw


class _Row:
    """Where an away body is: its message's row, and the checksum of the row's blocks."""

    __slots__ = ("bodies", "crc", "id", "native_id", "thread_id")

    def __init__(self, bodies: StoredBodies, row_id: int, thread_id: int, native_id: str, crc: int):
        self.bodies, self.id, self.thread_id = bodies, row_id, thread_id
        self.native_id, self.crc = native_id, crc


class AwayBlock(Block):
    """A `Block` whose long body is read back from the store when asked for."""

    __slots__ = ("_index", "_row")
    _row: _Row
    _index: int

    def _body(self, name: str) -> Any:
        return self._row.bodies.blocks(self._row)[self._index].get(name)

    @property
    def text(self) -> str | None:
        value = _TEXT.__get__(self)
        return self._body("text") if value is _AWAY else value

    @text.setter
    def text(self, value: str | None) -> None:
        _TEXT.__set__(self, value)

    @property
    def tool_input(self) -> Any:
        value = _INPUT.__get__(self)
        return self._body("tool_input") if value is _AWAY else value

    @tool_input.setter
    def tool_input(self, value: Any) -> None:
        _INPUT.__set__(self, value)

    def __eq__(self, other: object) -> bool:
        """Equal to a block, away or not, of the same values (its body read back)."""
        if not isinstance(other, Block):
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in _FIELDS)

    __hash__ = None  # type: ignore[assignment]  # as `Block`'s: mutable, compared by value


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
        blocks = []
        row = None
        for index, b in enumerate(decoded):
            for name in _SHARED_FIELDS:
                value = b.get(name)
                if type(value) is str:
                    b[name] = _share(value)
            away = _away(b)
            if away is None:
                blocks.append(Block.from_json(b))
                continue
            if row is None:
                row = _Row(bodies, r.id, thread_id, r.native_id, _checksum(data))
            block = AwayBlock(**b)
            block._row, block._index = row, index
            if away == "text":
                _TEXT.__set__(block, _AWAY)
            else:
                _INPUT.__set__(block, _AWAY)
            blocks.append(block)
        if row is not None:
            bodies.keep(r.id, len(data), decoded)
        out.append(
            StoredMessage(
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
        )
    return out


# The fields whose values many messages or blocks of a thread repeat (roles, kinds, models, tool
# names; the lines of one answer share its usage key; a call and its result share its id): each
# value is held once (`sys.intern`), not once per message as each row read makes it. On the
# 16-copy replica of `benchmarks/live_memory.py`, ~230 bytes a message.
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
