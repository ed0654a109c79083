"""Aider chat histories (`.aider.chat.history.md`): each session of the file a thread.

Aider appends everything it shows to one Markdown file in the repository's root, in three
kinds of line, and this reader tells them apart the way aider writes them:

* `# aider chat started at 2025-10-20 21:49:17` opens a session (a thread of its own);
* `#### text  ` is what the person typed, one line each, each ending in two spaces; a block
  that opens with `/` is one of aider's commands (`/add`, `/run`, `/ask`...), anything else is
  a typed turn;
* `> text  ` is aider's own output (its banner, prompts and their answers, `Applied edit to`,
  `Commit ...`, `Tokens: ...`), whose last line ends in two spaces;
* anything else, after a blank line, is the model's reply.

The model never calls a tool: it writes edit blocks (SEARCH/REPLACE, whole files, unified
diffs) and shell commands into its reply, and aider acts on them after the reply, saying so in
its output. Those actions are the tool calls: an edit block for a file aider then edited (or
tried to: a failed match, a declined new file) is an edit call in the reply's message, a shell
command aider asked to run is a `shell` call; aider's output about them is their results, in a
tool message after the reply. The reply's text after its last edit block closes the turn (the
message the end-of-turn checkpoint sits on), even when it is empty, for aider hands the turn
back to the person after each reply. The person's own `/run` and `/test` are commands, not the
agent's calls: kept as command messages with their output.

`Tokens: 3.7k sent, 1.5k received.` is the reply's token bill (rounded as aider prints it);
`Main model: X with diff edit format` names the model. Aider records no other times than the
session's start, and runs any provider's model, so the format declares no vendor.

The file only grows, a session at a time: a read leaves the cursor at the start of the last
session and reads it again next time, since aider may still be writing it.

Beside it aider keeps `.aider.input.history`, its prompt's recall: each thing typed at the
prompt (requests, commands, the answers to its y/n questions) as a `# TIME` line and the text
in `+` lines. Every one of those lines is in the chat history too, so a read of that file
stores nothing and says, as a notice rather than a problem, which file holds its turns. Its
times (the chat history has only the sessions' starts) are the one thing it adds, and are
not read yet.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import orjson

from auditor.api import (
    ASSISTANT,
    SOURCE_AGENT,
    SOURCE_COMMAND,
    SOURCE_META,
    SOURCE_TOOL_RESULT,
    SOURCE_TYPED,
    SYSTEM,
    TOOL,
    USER,
    Block,
    Cursor,
    Message,
    Notice,
    Problem,
    Record,
    Reread,
    ThreadInfo,
    Usage,
    hookimpl,
    read_lines,
)

AGENT = "aider"
FILE_NAME = ".aider.chat.history.md"
INPUT_FILE_NAME = ".aider.input.history"
# An input history's entry: the time aider took it (Python's str of a datetime), then a `+` line.
_INPUT_ENTRY = re.compile(rb"^# \d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?\r?\n\+", re.M)
_SESSION = re.compile(r"^# aider chat started at (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\s*$")
_HEAD = re.compile(rb"^\s*# aider chat started at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\s*$", re.M)
_MODEL = re.compile(r"^(?:Main model|Model): (\S+) with (\S+) edit format")
_VERSION = re.compile(r"^Aider v(\S+)")
_COUNT = r"([\d.]+)(k|M)?"
_TOKENS = re.compile(
    rf"^Tokens: {_COUNT} sent(?:, {_COUNT} cache write)?(?:, {_COUNT} cache hit)?, "
    rf"{_COUNT} received"
)
_APPLIED = re.compile(r"^Applied edit to (.+?)\s*$")
_COMMIT = re.compile(r"^(?:Commit [0-9a-f]{7,} |Committing )")
_CREATE = re.compile(r"^Create new file\? .*?:\s*(\w*)\s*$")
_RUN = re.compile(r"^Run shell commands?\? .*?:\s*(\w*)\s*$")
_RUN_OUTPUT = re.compile(r"^(?:Running |Added \d+ lines? of output|Add command output)")
_FAILED = re.compile(r"failed to match|did not conform|SearchReplaceNoExactMatch|Malformed")
_FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
_DIFF_PATH = re.compile(r"^\+\+\+ (?:b/)?(\S.*?)\s*$")


def _position(msg: Message) -> int:
    """A message's place: its line, and after a reply aider's results and then its close."""
    step = {"out": 1, "end": 2}.get(msg.native_id.rpartition(":")[2], 0)
    return 4 * (msg.line or 0) + step


def _digest(msg: Message) -> str:
    blocks = [b.as_json() for b in msg.blocks]
    data = orjson.dumps([msg.role, msg.source_type, msg.usage_key, blocks])
    return hashlib.blake2b(data, digest_size=12).hexdigest()


def _count(number: str | None, unit: str | None) -> int:
    if not number:
        return 0
    return round(float(number) * {"k": 1_000, "M": 1_000_000}.get(unit or "", 1))


def _clean_path(text: str) -> str:
    return text.strip().strip("`*:").strip().removeprefix("./")


@dataclass(slots=True)
class _Part:
    """A run of lines of one kind: `user`, `note` (aider's output) or `reply`."""

    kind: str
    line: int
    lines: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "\n".join(self.lines).strip("\n")


@dataclass(slots=True)
class _Session:
    line: int
    offset: int
    started: str
    parts: list[_Part] = field(default_factory=list)


def _split(lines: list[tuple[int, int, str]]) -> Iterator[_Session]:
    """Cut the lines into sessions, and each session into parts."""
    session: _Session | None = None
    i = 0
    while i < len(lines):
        line_no, offset, text = lines[i]
        if m := _SESSION.match(text):
            if session is not None:
                yield session
            session = _Session(line_no, offset, m.group(1))
            i += 1
            continue
        if session is None or not text.strip():
            i += 1
            continue
        if text.startswith("####") and text.endswith("  "):
            part = _Part("user", line_no)
            while i < len(lines) and lines[i][2].startswith("####") and lines[i][2].endswith("  "):
                part.lines.append(lines[i][2][5:].rstrip())
                i += 1
            session.parts.append(part)
            continue
        end = _note_end(lines, i)
        if end is not None:
            part = _Part("note", line_no, [lines[j][2].rstrip() for j in range(i, end)])
            part.lines[0] = part.lines[0][1:].removeprefix(" ")
            session.parts.append(part)
            i = end
            continue
        part = _Part("reply", line_no)
        while i < len(lines):
            text = lines[i][2]
            if _SESSION.match(text) or (text.startswith("####") and text.endswith("  ")):
                break
            if (text.startswith("> ") or text.rstrip() == ">") and _note_end(lines, i):
                break
            part.lines.append(text)
            i += 1
        session.parts.append(part)
    if session is not None:
        yield session


def _note_end(lines: list[tuple[int, int, str]], i: int) -> int | None:
    """Where the note opening at line `i` ends, or None when it is no note of aider's.

    A note runs to the next blank line or marker line (its other lines, a command on several
    lines, have no `>`); aider ends its last line with two spaces, which a quotation in a
    reply does not do.
    """
    text = lines[i][2]
    if not (text.startswith("> ") or text.rstrip() == ">"):
        return None
    j = i + 1
    while j < len(lines):
        text = lines[j][2]
        if not text.strip() or text.startswith(("> ", "####")) or text.rstrip() == ">":
            break
        if _SESSION.match(text):
            break
        j += 1
    last = lines[j - 1][2]
    return j if last.endswith("  ") or last.rstrip() == ">" else None


def _closes(line: str, marker: str) -> bool:
    """True for the line that closes a fence opened with `marker` (no info string after it)."""
    bare = line.strip()
    return bare.startswith(marker) and not bare.strip(marker[0])


@dataclass(slots=True)
class _Edit:
    """One edit block of a reply: the file, what the call's input shows, where it stands."""

    path: str
    tool_input: dict
    start: int
    end: int


def _edit_blocks(lines: list[str]) -> list[_Edit]:
    """The edit blocks of a reply: SEARCH/REPLACE, a fenced whole file after its path, a
    unified diff. Which of them aider acted on is decided by its output, not here."""
    out: list[_Edit] = []
    i = 0
    while i < len(lines):
        text = lines[i]
        fence = _FENCE.match(text)
        if text.strip().startswith("<<<<<<< SEARCH"):
            path = _path_before(lines, i)
            search: list[str] = []
            replace: list[str] = []
            j, part = i + 1, "search"
            while j < len(lines) and not lines[j].strip().startswith(">>>>>>> REPLACE"):
                if lines[j].strip() == "=======" and part == "search":
                    part = "replace"
                else:
                    (search if part == "search" else replace).append(lines[j])
                j += 1
            if path:
                block = {"path": path, "search": "\n".join(search), "replace": "\n".join(replace)}
                start, end = i, min(j, len(lines) - 1)
                for _ in range(2):  # the fence opening and the path line before, in either order
                    if start and (
                        _FENCE.match(lines[start - 1]) or _clean_path(lines[start - 1]) == path
                    ):
                        start -= 1
                if end + 1 < len(lines) and _FENCE.match(lines[end + 1]):
                    end += 1
                out.append(_Edit(path, block, start, end))
                i = end + 1
            else:
                i = j + 1
            continue
        if fence:
            j = i + 1
            while j < len(lines) and not _closes(lines[j], fence.group(1)):
                j += 1
            body = lines[i + 1 : j]
            if any(b.strip().startswith("<<<<<<< SEARCH") for b in body):
                i += 1  # a fenced SEARCH/REPLACE block: read on inside it
                continue
            paths = [m.group(1) for b in body if (m := _DIFF_PATH.match(b))]
            if text.strip().endswith("diff") and paths:
                diff = {"path": paths[0], "diff": "\n".join(body)}
                out.append(_Edit(_clean_path(paths[0]), diff, i, min(j, len(lines) - 1)))
            elif (path := _path_before(lines, i, right_before=True)) is not None:
                whole = {"path": path, "content": "\n".join(body)}
                out.append(_Edit(path, whole, i - 1, min(j, len(lines) - 1)))
            i = j + 1
            continue
        i += 1
    return out


def _path_before(lines: list[str], i: int, right_before: bool = False) -> str | None:
    """The file name written on its own line before line `i` (past a fence opening)."""
    j = i - 1
    if not right_before and j >= 0 and _FENCE.match(lines[j]):
        j -= 1
    if not right_before and j >= 0 and not lines[j].strip():
        return None
    if j < 0 or not lines[j].strip() or _FENCE.match(lines[j]):
        return None
    candidate = _clean_path(lines[j])
    if " " in candidate or len(candidate) > 300 or candidate.endswith((".", ":")):
        return None
    return candidate or None


class _Exchange:
    """A reply and aider's output after it, turned into messages."""

    def __init__(self, reader: AiderFormat, thread: str, reply: _Part, notes: list[_Part]):
        self.reader, self.thread, self.reply, self.notes = reader, thread, reply, notes

    def records(self, model: str | None) -> Iterator[Record]:
        thread, reply = self.thread, self.reply
        native = f"L{reply.line}"
        usage: Usage | None = None
        applied: dict[str, list[str]] = {}  # path -> aider's lines about it
        created: dict[str, str] = {}  # path -> the answer to "Create new file?"
        failures: list[str] = []
        shells: list[tuple[str, str, list[str]]] = []  # command, answer, what followed
        commits: list[str] = []
        rest: list[_Part] = []
        for k, note in enumerate(self.notes):
            text = note.text
            if m := _TOKENS.match(text):
                # "sent" is LiteLLM's prompt_tokens, the cached parts included: taken out here.
                write, hit = _count(m.group(3), m.group(4)), _count(m.group(5), m.group(6))
                usage = Usage(
                    thread,
                    f"{thread}:L{note.line}",
                    model=model,
                    input_tokens=max(0, _count(m.group(1), m.group(2)) - write - hit),
                    cache_write_tokens=write,
                    cache_read_tokens=hit,
                    output_tokens=_count(m.group(7), m.group(8)),
                )
            elif m := _APPLIED.match(text):
                applied.setdefault(_clean_path(m.group(1)), []).append(text)
            elif _COMMIT.match(text):
                commits.append(text)
            elif (m := _CREATE.match(text)) and k:
                created[_clean_path(self.notes[k - 1].text)] = m.group(1).lower()
            elif (m := _RUN.match(text)) and k:
                shells.append((self.notes[k - 1].text, m.group(1).lower(), []))
            elif _RUN_OUTPUT.match(text) and shells:
                shells[-1][2].append(text)
            elif _FAILED.search(text):
                failures.append(text)
            else:
                rest.append(note)
        # The subjects of the prompts are aider's output too, already said by their calls.
        asked = {
            note.text for note in self.notes if _CREATE.match(note.text) or _RUN.match(note.text)
        }
        subjects = {c for c in created} | {s[0] for s in shells}
        rest = [n for n in rest if n.text not in asked and _clean_path(n.text) not in subjects]

        edits = [e for e in _edit_blocks(reply.lines) if e.path in applied or e.path in created]
        if failures:
            named = {e.path for e in edits}
            edits += [
                e
                for e in _edit_blocks(reply.lines)
                if e.path not in named and "search" in e.tool_input
            ]
        edits.sort(key=lambda e: e.start)
        if usage is not None:
            yield usage
        uses: list[Block] = []
        results: list[Block] = []
        for n, edit in enumerate(edits):
            call = f"{native}:edit{n}"
            uses.append(
                Block(
                    "tool_use",
                    tool_name="edit",
                    tool_use_id=call,
                    tool_input=edit.tool_input,
                    is_file_edit=True,
                    edited_paths=[edit.path],
                )
            )
            if edit.path in applied:
                said, failed = applied[edit.path] + (commits if n == len(edits) - 1 else []), False
            elif created.get(edit.path, "y").startswith("n"):
                said, failed = [f"Create new file? {created[edit.path]} (declined)"], True
            else:
                said, failed = failures or ["aider applied no edit to this file"], True
            results.append(
                Block("tool_result", text="\n".join(said), tool_use_id=call, is_error=failed)
            )
        seen = {e.path for e in edits}
        for n, path in enumerate(p for p in applied if p not in seen):
            call = f"{native}:applied{n}"  # applied from a block this reader did not make out
            uses.append(
                Block(
                    "tool_use",
                    tool_name="edit",
                    tool_use_id=call,
                    tool_input={"path": path},
                    is_file_edit=True,
                    edited_paths=[path],
                )
            )
            results.append(
                Block("tool_result", text="\n".join(applied[path] + commits), tool_use_id=call)
            )
        for n, (command, answer, output) in enumerate(shells):
            call = f"{native}:shell{n}"
            uses.append(
                Block(
                    "tool_use", tool_name="shell", tool_use_id=call, tool_input={"command": command}
                )
            )
            declined = not answer.startswith(("y", "a"))
            told = "\n".join(output) or ("declined by the person" if declined else "run")
            results.append(Block("tool_result", text=told, tool_use_id=call, is_error=declined))

        usage_key = usage.key if usage is not None else None
        if not uses:
            blocks = [Block("text", text=reply.text)] if reply.text else []
            yield self._message(
                native, ASSISTANT, reply.line, blocks, SOURCE_AGENT, model, usage_key
            )
        else:
            cut = edits[-1].end + 1 if edits else len(reply.lines)
            before = self._prose(reply.lines[:cut], edits)
            after = "\n".join(reply.lines[cut:]).strip("\n")
            blocks = [Block("text", text=before)] if before else []
            yield self._message(
                native, ASSISTANT, reply.line, blocks + uses, SOURCE_AGENT, model, usage_key
            )
            yield self._message(f"{native}:out", TOOL, reply.line, results, SOURCE_TOOL_RESULT)
            closing = [Block("text", text=after)] if after else []
            yield self._message(
                f"{native}:end", ASSISTANT, reply.line, closing, SOURCE_AGENT, model
            )
        if rest:
            yield self.reader.note_message(thread, rest)

    def _message(self, native, role, line, blocks, source, model=None, usage_key=None) -> Message:
        msg = Message(
            self.thread, native, role, line, blocks, source_type=source, model=model, line=line
        )
        msg.usage_key = usage_key
        return msg

    @staticmethod
    def _prose(lines: list[str], edits: list[_Edit]) -> str:
        """The reply's text less its edit blocks (their content is in the calls' inputs)."""
        drop: set[int] = set()
        for e in edits:
            drop.update(range(e.start, e.end + 1))
        text = "\n".join(line for k, line in enumerate(lines) if k not in drop)
        return re.sub(r"\n{3,}", "\n\n", text).strip("\n")


class AiderFormat:
    """An aider chat history (`.aider.chat.history.md`)."""

    name = "aider"
    agent = AGENT
    appendable = True  # aider only appends; the last session is read again each time
    detect_priority = 10
    # A directory walk looks at files of this name (besides the JSON suffixes).
    file_patterns = (FILE_NAME, "*.aider.chat.history.md")

    def detect(self, path: Path, head: bytes) -> bool:
        # Aider opens every session with this line; the file may start with a blank line.
        first = head.lstrip()[:200]
        return (
            bool(_HEAD.match(first))
            or (path.name.endswith(FILE_NAME) and bool(_HEAD.search(head[:4096])))
            or _is_input_history(path, head)
        )

    def parse(self, path: Path, cursor: Cursor) -> Iterator[Record]:
        with open(path, "rb") as fh:
            head = fh.read(4096)
        if _is_input_history(path, head):
            yield Notice(_input_history_notice(path))
            return
        lines: list[tuple[int, int, str]] = []
        for item in read_lines(path, cursor):
            if isinstance(item, Problem):
                yield item
            else:
                lines.append(item)
        sessions = list(_split(lines))
        if not sessions:
            if cursor.offset == 0:
                yield Problem(
                    "no '# aider chat started at' line: not an aider chat history "
                    "(.aider.chat.history.md)"
                )
            return
        project = path.resolve().parent
        # What the last session gave the read before, message by message: stored messages are
        # never rewritten, so when aider's later lines change one of them (a reply whose edits
        # were applied since), the file is read again from the start.
        before = cursor.state.get("last")
        for index, session in enumerate(sessions):
            records = list(self._session(path, project, session))
            given = {r.native_id: _digest(r) for r in records if isinstance(r, Message)}
            if index == 0 and before and any(given.get(k) != v for k, v in before.items()):
                raise Reread(f"the session at line {session.line} reads differently now")
            if index == len(sessions) - 1:
                cursor.offset, cursor.line = session.offset, session.line - 1
                cursor.state["last"] = given
            yield from records

    def _session(self, path: Path, project: Path, session: _Session) -> Iterator[Record]:
        thread = f"{project.name}@{session.started.replace(' ', 'T')}"
        started = datetime.fromisoformat(session.started).replace(tzinfo=UTC)
        model = version = edit_format = None
        for part in session.parts:
            if part.kind == "note":
                for line in part.lines:
                    if (m := _MODEL.match(line)) and model is None:
                        model, edit_format = m.group(1), m.group(2)
                    elif (m := _VERSION.match(line)) and version is None:
                        version = m.group(1)
        if not any(p.kind != "note" for p in session.parts):
            return  # a session that ended before anyone wrote: nothing to audit
        yield ThreadInfo(
            thread,
            AGENT,
            cwd=str(project),
            model=model,
            version=version,
            meta={"started": session.started, "edit_format": edit_format, "file": path.name},
        )
        parts = session.parts
        first = True
        i = 0
        while i < len(parts):
            part = parts[i]
            j = i + 1
            while j < len(parts) and parts[j].kind == "note":
                j += 1
            notes = parts[i + 1 : j]
            if part.kind == "note":
                notes = parts[i:j]
            if part.kind != "reply":  # a banner after /model or /code names the model again
                for line in (ln for n in notes for ln in n.lines):
                    if m := _MODEL.match(line):
                        model = m.group(1)
            if part.kind == "note":
                records: list[Record] = [self.note_message(thread, notes)]
            elif part.kind == "user":
                records = list(self._user(thread, part, notes))
            else:
                records = list(_Exchange(self, thread, part, notes).records(model))
            for rec in records:
                if isinstance(rec, Message):
                    rec.seq = _position(rec)
                    if first:
                        rec.timestamp, first = started, False
                yield rec
            i = j

    def _user(self, thread: str, part: _Part, notes: list[_Part]) -> Iterator[Record]:
        text = "\n".join(line for line in part.lines if line != "<blank>").strip("\n")
        native = f"L{part.line}"
        if text.startswith(("/", "!")):
            # One of aider's commands (/run, /test, /add...): the person ran it, not the agent;
            # aider's answer to it is its output, kept with it.
            said = "\n".join(n.text for n in notes)
            body = f"{text}\n\n{said}" if said else text
            yield Message(
                thread,
                native,
                USER,
                part.line,
                [Block("text", text=body)],
                source_type=SOURCE_COMMAND,
                line=part.line,
            )
            return
        yield Message(
            thread,
            native,
            USER,
            part.line,
            [Block("text", text=text)] if text else [],
            source_type=SOURCE_TYPED,
            line=part.line,
        )
        if notes:
            yield self.note_message(thread, notes)

    @staticmethod
    def note_message(thread: str, notes: list[_Part]) -> Message:
        """Aider's own output (banner, warnings, answers to its prompts): harness text."""
        text = "\n".join(n.text for n in notes)
        line = notes[0].line
        return Message(
            thread,
            f"L{line}",
            SYSTEM,
            line,
            [Block("text", text=text)],
            source_type=SOURCE_META,
            line=line,
        )


def _is_input_history(path: Path, head: bytes) -> bool:
    """An input history: it opens with an entry, or is named so and has one early on."""
    return bool(_INPUT_ENTRY.match(head.lstrip()[:200])) or (
        path.name.endswith(INPUT_FILE_NAME) and bool(_INPUT_ENTRY.search(head[:4096]))
    )


def _input_history_notice(path: Path) -> str:
    said = "aider's input history (the typed lines alone): nothing stored; "
    name = path.name
    chat = (
        name[: -len(INPUT_FILE_NAME)] + FILE_NAME if name.endswith(INPUT_FILE_NAME) else FILE_NAME
    )
    if (path.parent / chat).is_file():
        return said + f"{chat} beside it holds these turns, ingest that"
    return said + f"aider writes these turns to {chat}, not found beside it"


@hookimpl
def register_formats(register) -> None:
    register(AiderFormat())
