"""Reading a transcript file's records: the loops every format plugin would otherwise repeat.

- `read_jsonl`: the JSON lines of a file from a cursor, with their line numbers; the cursor
  moves past each complete line, so the next ingest of a grown file starts where this one
  stopped. A damaged line is one `Problem` naming it; a half-written last line waits.
- `read_document`: a whole JSON document, or one `Problem` naming the line where it breaks.
- `read_lines`: the text lines of a file (Markdown exports) from a cursor, with their line
  numbers and byte offsets, for parsers that move the cursor themselves.
- `each_record`: a parser's own reading of each JSON record (a line's object, an element of a
  document's list) with the same damage rules for all: a record that is no JSON object, or that
  the parser fails on, costs that record only, reported in one line; the rest is read.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson

from .model import BOM, Cursor, Problem, Record

LINE_LIMIT = 64 << 20  # bytes of one line read into memory, at most
# Transcript lines run to tens of KB (tool outputs): with the default 8 KB buffer, readline
# gathered most of them from several reads, half the cost of reading a file line by line.
READ_BUFFER = 1 << 16

_JSON_TYPES = {
    dict: "object",
    list: "array",
    str: "string",
    int: "number",
    float: "number",
    bool: "boolean",
    type(None): "null",
}


def _skip_line(fh, most: int | None = None) -> tuple[int, bool]:
    """Move `fh` past the rest of the current line (its newline included), reading 1 MB at a
    time, or past `most` bytes of it at most; return how many bytes that was, and whether the
    line's end (or the file's) was reached."""
    skipped = 0
    while most is None or skipped < most:
        size = 1 << 20 if most is None else min(1 << 20, most - skipped)
        chunk = fh.read(size)
        if not chunk:
            return skipped, True
        end = chunk.find(b"\n")
        if end >= 0:
            fh.seek(end + 1 - len(chunk), os.SEEK_CUR)
            return skipped + end + 1, True
        skipped += len(chunk)
    return skipped, False


def _mid_line(fh, offset: int) -> bool:
    """True when `offset` is inside a line: a bounded read stopped while passing over a line
    too long to keep (every other read ends on a line's end)."""
    if offset <= 0:
        return False
    fh.seek(offset - 1)
    return fh.read(1) not in (b"\n", b"")


def _too_long(size: int) -> str:
    return f"line over {LINE_LIMIT >> 20} MB ({size:,} bytes): skipped"


_NOT_READ = object()


def read_jsonl(path: Path, cursor: Cursor) -> Iterator[tuple[int, Any] | Problem]:
    """Yield `(line_number, object)` for each JSON line from `cursor`, or a `Problem`.

    The cursor moves past every complete line, good or malformed (a malformed line is reported
    once, not again on the next ingest). A last line without a newline that does not parse is
    reported as truncated and left unconsumed, so that it is read again once the agent has
    finished writing it. Blank lines are skipped. With `cursor.until`, reading stops there.
    """
    with open(path, "rb", buffering=READ_BUFFER) as fh:
        until = cursor.until

        def room() -> int | None:
            return None if until is None else max(until - cursor.offset, 0)

        if _mid_line(fh, cursor.offset):
            # The rest of a line too long to keep, which an earlier bounded read began to pass
            # over (and reported): go on passing it over.
            fh.seek(cursor.offset)
            size, ended = _skip_line(fh, room())
            cursor.offset += size
            if not ended:
                return
            cursor.line += 1
        fh.seek(cursor.offset)
        line_no = cursor.line
        readline, loads = fh.readline, orjson.loads
        while until is None or cursor.offset < until:
            raw = readline(LINE_LIMIT + 1)
            if not raw:
                break
            line_no += 1
            if len(raw) > LINE_LIMIT and not raw.endswith(b"\n"):
                # Never held whole: a line this long is no agent's record (a file of NUL bytes,
                # a dump gone wrong); it is passed over in chunks and reported.
                left = room()
                more, ended = _skip_line(fh, None if left is None else max(left - len(raw), 0))
                size = len(raw) + more
                cursor.offset += size
                if not ended:  # the bounded read stops inside it; the next goes on
                    yield Problem(
                        f"line over {LINE_LIMIT >> 20} MB: {size:,} bytes passed over, "
                        "the rest at the next read",
                        line_no,
                    )
                    return
                cursor.line = line_no
                yield Problem(_too_long(size), line_no)
                continue
            try:
                # The line as read: JSON allows the whitespace around it, and stripping would
                # copy every line. A first line may begin with a byte order mark.
                obj = loads(raw if line_no != 1 else raw.strip().removeprefix(BOM))
            except orjson.JSONDecodeError:
                obj = _NOT_READ
            if obj is _NOT_READ:
                complete = raw.endswith(b"\n")
                body = raw.strip()
                if line_no == 1:
                    body = body.removeprefix(BOM)
                if not body:
                    if complete:
                        cursor.offset += len(raw)
                        cursor.line = line_no
                    continue
            try:
                if obj is _NOT_READ:  # read again as it was, for the error it gives
                    obj = orjson.loads(body)
            except orjson.JSONDecodeError as exc:
                if not complete:
                    yield Problem(
                        f"truncated last line ({len(raw)} bytes, no newline): {exc}", line_no
                    )
                    return
                cursor.offset += len(raw)
                cursor.line = line_no
                yield Problem(f"malformed JSON: {exc}", line_no)
                continue
            cursor.offset += len(raw)
            cursor.line = line_no
            yield line_no, obj


def read_document(path: Path) -> tuple[Any, Problem | None]:
    """Parse a whole-file JSON document; on failure return a Problem naming the error and line."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        return None, Problem(f"cannot read file: {exc.strerror or exc}")
    try:
        return orjson.loads(data.removeprefix(BOM)), None
    except orjson.JSONDecodeError as exc:
        line = getattr(exc, "lineno", None)
        pos = getattr(exc, "pos", None)
        if not line and isinstance(pos, int):
            line = data[:pos].count(b"\n") + 1
        return None, Problem(f"malformed JSON document: {exc}", line or None)


def read_lines(path: Path, cursor: Cursor) -> Iterator[tuple[int, int, str] | Problem]:
    """Yield `(line_number, offset, text)` for each line from `cursor`, or a `Problem`.

    `text` is the line without its line end, read as UTF-8; `offset` is where the line starts,
    so that a parser may leave the cursor at the start of a part it wants to read again (the
    cursor itself is not moved). Bytes that are not UTF-8 are replaced, and the first line that
    has any is reported once; a line over the size limit is skipped and reported.
    """
    bad_bytes_said = False
    with open(path, "rb", buffering=READ_BUFFER) as fh:
        fh.seek(cursor.offset)
        offset, line_no = cursor.offset, cursor.line
        while raw := fh.readline(LINE_LIMIT + 1):
            line_no += 1
            start = offset
            if len(raw) > LINE_LIMIT and not raw.endswith(b"\n"):
                size = len(raw) + _skip_line(fh)[0]
                offset += size
                yield Problem(_too_long(size), line_no)
                continue
            offset += len(raw)
            if line_no == 1:
                raw = raw.removeprefix(BOM)
            try:
                text = raw.decode()
            except UnicodeDecodeError as exc:
                text = raw.decode(errors="replace")
                if not bad_bytes_said:
                    bad_bytes_said = True
                    yield Problem(
                        f"bytes that are not UTF-8 text ({exc.reason} at column {exc.start + 1}); "
                        "read with them replaced",
                        line_no,
                    )
            yield line_no, start, text.rstrip("\r\n")


def each_record(
    items: Iterable[tuple[int, Any] | Problem],
    read: Callable[[int, dict], Iterable[Record]],
    kind: str,
    *,
    numbered: bool = False,
) -> Iterator[Record]:
    """Yield the records `read(position, obj)` makes of each JSON object of `items`.

    `items` is what `read_jsonl` yields (positions are line numbers, and a Problem carries the
    line), or `enumerate(a_list)` of a document with `numbered=True` (positions are indexes,
    named in the Problem's text as `KIND INDEX`). Problems in `items` pass through. A record that
    is no JSON object, or on which `read` raises, is one Problem naming it (`kind` says what a
    record is: "Codex rollout record"); the records `read` yielded before failing are kept.
    """
    for item in items:
        if isinstance(item, Problem):
            yield item
            continue
        at, obj = item
        if not isinstance(obj, dict):
            name, line = _named(kind, at, numbered)
            found = _JSON_TYPES.get(type(obj), type(obj).__name__)
            yield Problem(f"{name} is not a JSON object (found a JSON {found}); skipped", line)
            continue
        try:
            yield from read(at, obj)
        except Exception as exc:  # noqa: BLE001 - one odd record must not stop the file; it is reported
            name, line = _named(kind, at, numbered)
            t = obj.get("type")
            what = f"{name} of type {t!r}" if isinstance(t, str) else name
            yield Problem(f"cannot read {what}: {type(exc).__name__}: {exc}", line)


def _named(kind: str, at: int, numbered: bool) -> tuple[str, int | None]:
    """How a Problem names a record, and the line it gives (made only for a record that has
    one)."""
    return (f"{kind} {at}", None) if numbered else (kind, at)
