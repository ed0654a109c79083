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

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

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
        # Field by field rather than a loop over their names: called for every block ingested.
        out: dict[str, Any] = {"kind": self.kind}
        if self.text is not None:
            out["text"] = self.text
        if self.tool_name is not None:
            out["tool_name"] = self.tool_name
        if self.tool_use_id is not None:
            out["tool_use_id"] = self.tool_use_id
        if self.tool_input is not None:
            out["tool_input"] = self.tool_input
        if self.is_error is not None:
            out["is_error"] = self.is_error
        if self.edited_paths is not None:
            out["edited_paths"] = self.edited_paths
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


@dataclass(slots=True)
class Notice:
    """What a reader has to say about a file that is no problem with it: a file of the format
    that holds nothing to store (what it holds is read from another file). Shown to the person
    with the file's name, not recorded as an ingest error; the file counts as read."""

    message: str
    line: int | None = None


Record = ThreadInfo | Message | Usage | Problem | Notice


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
    # Set by the ingest engine to bound one read (a live worker reads so much of a file per
    # hook event): `read_jsonl` stops at the first line boundary at or past this offset, as if
    # the file ended there, and a line over the limit being passed over stops here too (the
    # next read goes on passing it over). Not kept between reads.
    until: int | None = None


@dataclass(frozen=True)
class LiveHooks:
    """How auditor's live hooks (`auditor hook AGENT`) serve an agent, declared by the format
    its transcripts are written in as `live_hooks`: the agent is then one `auditor hook` and
    `auditor hook install` know, and its hook events are read from transcripts in that format.

    `injector` names the injector that answers the agent's Stop hook (`--sync`). `events` maps
    the agent's own names of its hook events to the names auditor's spool records, which are
    Claude Code's (`PostToolUse`, `UserPromptSubmit`, `Stop`, `SessionEnd`...); an agent that
    uses those names maps nothing.

    What `auditor hook install AGENT` writes into the agent's settings, and where:
    `hook_events`, the agent's names of the events that run the non-blocking hook (those the
    spool records as `Stop` or `SubagentStop` are the stops, the only ones `--sync` installs);
    `settings`, by scope (`project`, `local`, `user`), the settings file holding its hooks: a
    path inside the project for the first two, one under `~` for the user's, where a leading
    `${VAR:-DEFAULT}` is the folder $VAR names, else DEFAULT; `timeout_unit`, 1000 where the
    agent counts a handler's timeout in milliseconds; `rewake`, True for an agent that reads
    a handler's exit status 2 as "go on with stderr" and can run the end of a turn's handler
    in the background to wake it that way (Claude Code's `asyncRewake`): its end of a turn
    gets a `--rewake` handler beside the non-blocking one, and every command is guarded so
    that only auditor's own "deliver" becomes 2. Any other agent cannot be woken once a turn
    has ended: the handler of its end of a turn waits for the audit (`--wait`). `tested` is
    the agent's command and the version auditor's hooks are proven on (`auditor hook status`
    compares the one on PATH).
    """

    injector: str
    events: dict[str, str] = field(default_factory=dict)
    hook_events: tuple[str, ...] = ()
    settings: dict[str, str] = field(default_factory=dict)
    timeout_unit: int = 1
    rewake: bool = False
    tested: tuple[str, str] | None = None


class TranscriptFormat(Protocol):
    """What a transcript-format plugin registers (see `hookspecs.register_formats`)."""

    name: str  # used by `--format NAME`
    agent: str  # the agent that writes it
    # True when the file only ever grows by whole lines (JSONL), so a grown file can be read
    # from where the last ingest stopped. False for documents rewritten as a whole.
    appendable: bool
    # Optional, read with getattr: `detect_priority` (lower is tried first; generic formats set
    # it high) and `file_patterns`, path patterns (`Path.match`) a directory walk looks at
    # besides the JSON suffixes, for formats whose files are known by name
    # (`.aider.chat.history.md`); `live_hooks`, a `LiveHooks` for the format an agent writes as
    # it works, when auditor's live hooks serve it.

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
    if dt.tzinfo is UTC:  # as most transcripts write them ("...Z"): nothing to convert
        return dt
    if dt.tzinfo is None:
        return dt.replace(tzinfo=UTC)
    return dt.astimezone(UTC)
