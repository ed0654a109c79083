"""The normalised transcript model every format parser produces.

A parser turns one file into a stream of records: `ThreadInfo`, `Message`, `Usage` and
`Problem`. Records name their thread by its native id (a Claude Code session id, a Codex
rollout id, an Amp `T-...` id), so one file may feed several threads (inline sidechains) and
several files may feed one thread (a session saved twice). The ingest engine owns ids, storage,
de-duplication and the pairing of tool calls with their results.

Token convention (for `Usage`): `input_tokens` EXCLUDES cached tokens; `cache_read_tokens` and
`cache_write_tokens` are separate; `output_tokens` includes reasoning; `reasoning_tokens` is
the reasoning share of the output, kept for information.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import orjson

BOM = b"\xef\xbb\xbf"  # a UTF-8 byte order mark, which some editors put at the start of a file

# Roles of a message.
USER, ASSISTANT, SYSTEM, TOOL = "user", "assistant", "system", "tool"

# Source types of a message: who or what put it in the thread.
SOURCE_TYPED = "user"  # a person typed it
SOURCE_TOOL_RESULT = "tool-result"  # tool output sent back to the model
SOURCE_META = "meta"  # injected by the agent harness (isMeta, environment context, AGENTS.md...)
SOURCE_COMMAND = "command"  # slash command or local command output
SOURCE_COMPACT = "compact-summary"  # summary written when the context was compacted
SOURCE_INTERRUPT = "interrupt"  # "[Request interrupted by user]"
SOURCE_COURSE_CORRECTION = "course-correction"  # inserted by an observer (auditor or Amp)
SOURCE_AGENT = "agent"  # written by the model
SOURCE_ERROR = "error"  # client-generated error reply (Claude Code `<synthetic>`)


@dataclass(slots=True)
class Block:
    """One content block of a message."""

    kind: str  # text | thinking | tool_use | tool_result | image
    text: str | None = None
    tool_name: str | None = None
    tool_use_id: str | None = None
    tool_input: Any = None
    is_error: bool | None = None
    # For tool_use blocks: True when the call changes files; the paths when they are known.
    is_file_edit: bool = False
    edited_paths: list[str] | None = None

    def as_json(self) -> dict[str, Any]:
        """Return the block as a compact dict (empty fields left out)."""
        out: dict[str, Any] = {"kind": self.kind}
        for name in ("text", "tool_name", "tool_use_id", "tool_input", "is_error", "edited_paths"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        if self.is_file_edit:
            out["is_file_edit"] = True
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Block:
        return cls(**data)


@dataclass(slots=True)
class ThreadInfo:
    """What a file says about a thread. Later records for the same thread fill in blanks."""

    native_id: str
    agent: str  # claude-code | codex | amp | openai | ...
    cwd: str | None = None
    git_branch: str | None = None
    title: str | None = None
    model: str | None = None
    version: str | None = None
    parent_native_id: str | None = None  # the thread that spawned this one (sidechains)
    parent_tool_use_id: str | None = None  # the Task/Agent call that spawned it, when known
    is_sidechain: bool = False
    agent_type: str | None = None  # subagent type, e.g. "Explore"
    guidance: dict[str, str] | None = None  # AGENTS.md / CLAUDE.md contents, by file name
    meta: dict[str, Any] | None = None


@dataclass(slots=True)
class Message:
    """One message of a thread, with its blocks."""

    thread: str  # native id of the thread
    native_id: str  # the agent's own id (Claude Code uuid, Codex call id, Amp message id...)
    role: str
    seq: int  # position in the thread: line number (JSONL) or index (JSON documents)
    blocks: list[Block] = field(default_factory=list)
    source_type: str | None = None
    timestamp: datetime | None = None
    model: str | None = None
    parent_id: str | None = None
    usage_key: str | None = None  # the Usage record this message's API call was billed under
    stop_reason: str | None = None
    is_sidechain: bool = False
    line: int | None = None

    @property
    def text(self) -> str:
        """Return the text blocks joined by blank lines."""
        return "\n\n".join(b.text for b in self.blocks if b.kind == "text" and b.text)


@dataclass(slots=True)
class Usage:
    """Tokens billed for one model call. A later record with the same key replaces it."""

    thread: str
    key: str  # e.g. the Anthropic message id; one bill per key
    model: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    timestamp: datetime | None = None


@dataclass(slots=True)
class Problem:
    """A part of the file that could not be read. The rest of the file still is."""

    message: str
    line: int | None = None


Record = ThreadInfo | Message | Usage | Problem


class Reread(Exception):  # noqa: N818 - a request, not an error
    """Raised by the parser of an appendable format when the tail it reads changes what the
    file said before (a message rewritten in place, messages dropped): the engine then drops
    what the file gave and reads it again from the start, so an incremental read always ends
    in the store a fresh read gives. Raise it before the parser's own records are trusted:
    what it yielded in this read is undone."""


@dataclass
class Cursor:
    """Where a parser starts reading and where it got to.

    `offset` is a byte offset; `line` the number of lines before it. A parser advances both past
    every complete record it consumed, so that the next ingest of a grown file starts there.
    `state` is a JSON-serialisable dict the parser may use to carry context (current model,
    last cumulative token count...) from one incremental read to the next.
    """

    offset: int = 0
    line: int = 0
    state: dict[str, Any] = field(default_factory=dict)


class TranscriptFormat(Protocol):
    """What a transcript-format plugin registers (see `hookspecs.register_formats`)."""

    name: str  # used by `--format NAME`
    agent: str  # the agent that writes it
    # True when the file only ever grows by whole lines (JSONL), so a grown file can be read
    # from where the last ingest stopped. False for documents rewritten as a whole.
    appendable: bool

    def detect(self, path: Path, head: bytes) -> bool:
        """Return True if the file looks like this format. `head` is its first 64 KiB."""
        ...

    def parse(self, path: Path, cursor: Cursor) -> Iterator[Record]:
        """Yield the records of the file from `cursor`, advancing it (raise `Reread` when
        what was appended changes what an earlier read gave)."""
        ...


def parse_time(value: Any) -> datetime | None:
    """Parse an ISO-8601 string or epoch milliseconds into an aware UTC datetime."""
    if value is None or value == "":
        return None
    try:
        if isinstance(value, (int, float)):
            return datetime.fromtimestamp(value / 1000, tz=UTC)
        dt = datetime.fromisoformat(value)
    except (TypeError, ValueError, OverflowError, OSError):
        return None
    if dt.tzinfo is None:
        return dt.replace(tzinfo=UTC)
    return dt.astimezone(UTC)


LINE_LIMIT = 64 << 20  # bytes of one JSON line read into memory, at most


def _skip_line(fh) -> int:
    """Move `fh` past the rest of the current line (its newline included), reading 1 MB at a
    time; return how many bytes that was."""
    skipped = 0
    while chunk := fh.read(1 << 20):
        end = chunk.find(b"\n")
        if end >= 0:
            fh.seek(end + 1 - len(chunk), os.SEEK_CUR)
            return skipped + end + 1
        skipped += len(chunk)
    return skipped


def read_jsonl(path: Path, cursor: Cursor) -> Iterator[tuple[int, Any] | Problem]:
    """Yield `(line_number, object)` for each JSON line from `cursor`, or a `Problem`.

    The cursor moves past every complete line, good or malformed (a malformed line is reported
    once, not again on the next ingest). A last line without a newline that does not parse is
    reported as truncated and left unconsumed, so that it is read again once the agent has
    finished writing it. Blank lines are skipped.
    """
    with open(path, "rb") as fh:
        fh.seek(cursor.offset)
        line_no = cursor.line
        while raw := fh.readline(LINE_LIMIT + 1):
            line_no += 1
            if len(raw) > LINE_LIMIT and not raw.endswith(b"\n"):
                # Never held whole: a line this long is no agent's record (a file of NUL bytes,
                # a dump gone wrong); it is passed over in chunks and reported.
                size = len(raw) + _skip_line(fh)
                cursor.offset += size
                cursor.line = line_no
                yield Problem(f"line over {LINE_LIMIT >> 20} MB ({size:,} bytes): skipped", line_no)
                continue
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
