"""Gemini CLI chat logs (format ``gemini-jsonl``): what the CLI writes today.

``~/.gemini/tmp/<project folder>/chats/session-<date>T<HH-MM>-<8hex>.jsonl`` (a subagent's in
``chats/<parent session id>/<session id>.jsonl``), where the folder is the project's short
name, mapped to the project's path in ``~/.gemini/projects.json``. The file only grows, one
JSON record a line:

* a header ``{sessionId, projectHash, startTime, lastUpdated, kind}``;
* message records ``{id, timestamp, type: user|gemini|info|error|warning, content, ...}`` (the
  same message shape as the older ``.json`` layout, see ``gemini_chat``). A message updated
  later is written again whole under the same id (a reply gets its tokens, then its tool calls
  with their results): the last copy wins and keeps the place of the first;
* ``{"$set": {...}}`` metadata updates; ``$set.messages`` replaces the whole list;
* ``{"$rewindTo": ID}``: that message and every one after it are dropped (an id that is not
  there drops everything, as the CLI's own reader does).

The reader folds the log as the CLI does and turns each message of the result into records:
a reply into an assistant message (its thinking and text) followed, per tool call, by an
assistant message holding the call and a tool message holding its result, so that a reply
gaining its tool calls only adds records after the ones read before. A tool result carrying
auditor's correction in ``<hook_context>`` (an ``AfterTool`` hook's ``additionalContext``)
also gives a course-correction message after it. The user messages that only echo tool
results back to the model (``functionResponse`` parts) give nothing: the results are read from
the calls.

Incremental reads: ``cursor.state`` keeps the fold as record keys (id, content digest, line),
not contents. A read of the grown file folds the new lines onto it; when the records read
before are still the first ones, in order and unchanged, only the new ones are yielded,
else (a rewind, a rewritten message) the parser raises ``Reread`` and the engine reads the
whole file again. Either way the store ends as a fresh read of the file leaves it.

Tokens: one bill per reply (``msg:<id>``), from the reply's last copy, kept even when a
rewind drops the reply (the call was billed all the same).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from auditor.api import (
    ASSISTANT,
    CORRECTION_MARKER,
    SOURCE_AGENT,
    SOURCE_COURSE_CORRECTION,
    SOURCE_ERROR,
    SOURCE_META,
    SOURCE_TOOL_RESULT,
    SOURCE_TYPED,
    SYSTEM,
    TOOL,
    USER,
    Block,
    Cursor,
    LiveHooks,
    Message,
    Problem,
    Record,
    Reread,
    ThreadInfo,
    Usage,
    each_record,
    parse_time,
    read_jsonl,
)

from .gemini_records import (
    AGENT,
    DONE_STATUSES,
    call_result,
    content_blocks,
    thinking_blocks,
    to_int,
    tool_edits,
)

# What the CLI puts in front of the first prompt of a session: not typed by anyone.
_CLI_CONTEXT = ("<session_context>",)
_HOOK_CONTEXT = re.compile(r"\s*<hook_context>(.*?)</hook_context>\s*$", re.S)
_MESSAGE_TYPES = {"user", "gemini", "info", "error", "warning"}
_META_KEYS = ("projectHash", "startTime", "kind", "directories")


def _head_records(head: bytes, limit: int = 8) -> list[Any]:
    out = []
    for raw in head.split(b"\n")[:limit]:
        body = raw.strip()
        if not body:
            continue
        try:
            out.append(orjson.loads(body))
        except orjson.JSONDecodeError:
            continue  # a damaged or cut line: judge by the others
    return out


def _is_header(obj: Any) -> bool:
    return (
        isinstance(obj, dict)
        and isinstance(obj.get("sessionId"), str)
        and isinstance(obj.get("projectHash"), str)
        and "type" not in obj
    )


def _is_log_record(obj: Any) -> bool:
    """A line only the chat log has: its header, a `$set` or a `$rewindTo`."""
    if not isinstance(obj, dict):
        return False
    if _is_header(obj):
        return True
    keys = obj.keys()
    return (keys == {"$set"} and isinstance(obj["$set"], dict)) or (
        keys == {"$rewindTo"} and isinstance(obj["$rewindTo"], str)
    )


def _is_message(obj: Any) -> bool:
    return (
        isinstance(obj, dict)
        and isinstance(obj.get("id"), str)
        and obj.get("type") in _MESSAGE_TYPES
        and "timestamp" in obj
    )


def project_root(path: Path) -> str | None:
    """The project a chat log belongs to: its folder's entry in `~/.gemini/projects.json`
    (short name -> path), else the folder's `.project_root` file."""
    chats = path.parent if path.parent.name == "chats" else path.parent.parent
    if chats.name != "chats":
        return None
    folder = chats.parent
    registry = folder.parent.parent / "projects.json"  # ~/.gemini/tmp/<folder> -> ~/.gemini
    try:
        projects = orjson.loads(registry.read_bytes()).get("projects")
        for root, name in (projects or {}).items():
            if name == folder.name and isinstance(root, str):
                return root
    except (OSError, orjson.JSONDecodeError, AttributeError):
        pass
    try:
        return (folder / ".project_root").read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def _digest(m: Message) -> str:
    data = [
        m.role,
        [b.as_json() for b in m.blocks],
        m.source_type,
        m.timestamp.isoformat() if m.timestamp else None,
        m.model,
        m.usage_key,
        m.stop_reason,
    ]
    return hashlib.blake2b(orjson.dumps(data), digest_size=8).hexdigest()


def _user_source(text: str) -> str:
    stripped = text.lstrip()
    if stripped.startswith(CORRECTION_MARKER):
        return SOURCE_COURSE_CORRECTION  # an AfterAgent hook's reason, sent as the next prompt
    if stripped.startswith(_CLI_CONTEXT):
        return SOURCE_META
    return SOURCE_TYPED


class _Fold:
    """The chat as the CLI would load it, kept as record keys per message id, in order."""

    def __init__(self, state: dict):
        self.messages: dict[str, list[list]] = {
            mid: [list(k) for k in keys] for mid, keys in state.get("fold", [])
        }
        self.built: dict[tuple[str, str], Message] = {}  # records read in this pass

    def keys(self) -> list[tuple[str, str]]:
        """The records of the fold in order, each native id once: a tool result the CLI keeps
        twice (in its call, and in the user turn that sent it back) is the first one."""
        seen: set[str] = set()
        out = []
        for keys in self.messages.values():
            for k in keys:
                if k[0] not in seen:
                    seen.add(k[0])
                    out.append((k[0], k[1]))
        return out

    def put(self, mid: str, records: list[Message], line: int) -> None:
        old = {k[0]: k for k in self.messages.get(mid, [])}
        keys = []
        for m in records:
            d = _digest(m)
            prev = old.get(m.native_id)
            # A record unchanged since an earlier copy keeps that copy's line.
            m.line = prev[2] if prev is not None and prev[1] == d else line
            keys.append([m.native_id, d, m.line])
            self.built[(m.native_id, d)] = m
        self.messages[mid] = keys  # a known id keeps its place, as in the CLI's Map

    def rewind(self, mid: str) -> None:
        ids = list(self.messages)
        cut = ids.index(mid) if mid in self.messages else 0
        for gone in ids[cut:]:
            del self.messages[gone]

    def state(self) -> list:
        return [[mid, keys] for mid, keys in self.messages.items()]


class GeminiLogFormat:
    """A Gemini CLI chat log (`session-*.jsonl`, append-only)."""

    name = "gemini-jsonl"
    agent = AGENT
    vendor = "google"  # whose model the agent runs: an observer of another is chosen
    appendable = True
    # Gemini CLI's names for the events auditor's hooks handle (`auditor hook gemini-cli`).
    live_hooks = LiveHooks(
        "gemini-cli",
        {"AfterTool": "PostToolUse", "BeforeAgent": "UserPromptSubmit", "AfterAgent": "Stop"},
        hook_events=("AfterTool", "BeforeAgent", "AfterAgent", "SessionEnd"),
        settings={"project": ".gemini/settings.json", "user": "~/.gemini/settings.json"},
        timeout_unit=1000,  # Gemini CLI counts a handler's timeout in milliseconds
        # `gemini --version` takes 4 s (Node, then itself again)
        tested=("gemini", "0.61.0"),  # tests/test_real_gemini_cli.py
    )

    def detect(self, path: Path, head: bytes) -> bool:
        if path.suffix != ".jsonl":
            return False
        records = _head_records(head)
        return any(_is_log_record(r) for r in records) and all(
            _is_log_record(r) or _is_message(r) for r in records
        )

    def parse(self, path: Path, cursor: Cursor) -> Iterator[Record]:
        st = cursor.state
        fold = _Fold(st)
        before = fold.keys()
        thread = st.get("thread") or path.stem

        def read(line: int, obj: dict) -> Iterator[Record]:
            nonlocal thread
            if "$rewindTo" in obj:
                fold.rewind(str(obj["$rewindTo"]))
            elif _is_message(obj):
                yield from self._put(fold, thread, obj, line)
            elif isinstance(obj.get("$set"), dict):
                update = obj["$set"]
                if isinstance(update.get("messages"), list):
                    fold.messages.clear()
                    for msg in update["messages"]:
                        if _is_message(msg):
                            yield from self._put(fold, thread, msg, line)
                info = self._info(path, thread, update, header=False)
                if info is not None:
                    yield info
            elif _is_header(obj):
                thread = str(obj["sessionId"])
                info = self._info(path, thread, obj, header=True)
                if info is not None:
                    yield info
                for msg in obj.get("messages") or []:  # a header that carries messages
                    if _is_message(msg):
                        yield from self._put(fold, thread, msg, line)
            else:
                yield Problem("not a Gemini CLI chat-log record: no id, $set or $rewindTo", line)

        yield from each_record(read_jsonl(path, cursor), read, "Gemini CLI chat-log record")
        after = fold.keys()
        if after[: len(before)] != before:
            raise Reread("a message read before was rewritten or dropped (a rewind, $set)")
        for seq, key in enumerate(after[len(before) :], start=len(before)):
            m = fold.built[key]
            m.seq = seq
            yield m
        st["thread"] = thread
        st["fold"] = fold.state()

    # -- one record -----------------------------------------------------------------------
    def _info(self, path: Path, thread: str, data: dict, header: bool) -> ThreadInfo | None:
        meta = {k: data[k] for k in _META_KEYS if data.get(k)}
        summary = data.get("summary")
        title = summary if isinstance(summary, str) and summary else None
        if not header and not meta and title is None:
            return None
        parent = None
        if path.parent.name != "chats" and path.parent.parent.name == "chats":
            parent = path.parent.name  # chats/<parent session id>/<session id>.jsonl
        return ThreadInfo(
            thread,
            AGENT,
            cwd=project_root(path) if header else None,
            title=title,
            parent_native_id=parent if header else None,
            is_sidechain=bool(parent) or data.get("kind") == "subagent",
            meta=meta or None,
        )

    def _put(self, fold: _Fold, thread: str, msg: dict, line: int) -> Iterator[Record]:
        records, usage = _records(thread, msg)
        if usage is not None:
            yield usage
        fold.put(msg["id"], records, line)


def _result(thread: str, call_id: str, text: str, is_error: bool, ts) -> list[Message]:
    """A tool result, and auditor's correction when an AfterTool hook put it beside the output."""
    correction = None
    found = _HOOK_CONTEXT.search(text)
    if found and CORRECTION_MARKER in found.group(1):
        text, correction = text[: found.start()], found.group(1).strip()
    result = Block("tool_result", text=text, tool_use_id=call_id, is_error=is_error)
    out = [
        Message(
            thread,
            f"{call_id}:result",
            TOOL,
            0,
            [result],
            source_type=SOURCE_TOOL_RESULT,
            timestamp=ts,
        )
    ]
    if correction is not None:
        # An AfterTool hook's additionalContext, read by the model with the result.
        out.append(
            Message(
                thread,
                f"{call_id}:hook_context",
                USER,
                0,
                [Block("text", text=correction)],
                source_type=SOURCE_COURSE_CORRECTION,
                timestamp=ts,
            )
        )
    return out


def _call(thread: str, call_id: str, name: Any, args: Any, ts, model: str | None) -> Message:
    use = Block("tool_use", tool_name=name, tool_use_id=call_id, tool_input=args)
    use.is_file_edit, use.edited_paths = tool_edits(name, args)
    return Message(
        thread, call_id, ASSISTANT, 0, [use], source_type=SOURCE_AGENT, timestamp=ts, model=model
    )


def _records(thread: str, msg: dict) -> tuple[list[Message], Usage | None]:
    """The records one chat message gives (seq and line are set by the fold).

    A reply's calls come from its `toolCalls` (with their results), or, in a list the CLI
    rebuilt from the model's history (a resumed session's `$set.messages`), from
    `functionCall` parts of its content, their results from the user turns' `functionResponse`
    parts."""
    kind, native = msg.get("type"), msg["id"]
    ts = parse_time(msg.get("timestamp"))
    content = msg.get("content")
    parts = content if isinstance(content, list) else [content]
    if kind == "user":
        if parts and all(isinstance(p, dict) and "functionResponse" in p for p in parts):
            out: list[Message] = []
            for i, part in enumerate(parts):
                fr = part["functionResponse"]
                fr = fr if isinstance(fr, dict) else {}
                call_id = str(fr.get("id") or f"{native}:{i}")
                text, is_error = call_result({"result": [part]})
                out += _result(thread, call_id, text, is_error, ts)
            return out, None
        blocks = content_blocks(content)
        source = _user_source("\n".join(b.text or "" for b in blocks if b.kind == "text"))
        return [Message(thread, native, USER, 0, blocks, source_type=source, timestamp=ts)], None
    if kind != "gemini":  # info, warning, error: written by the CLI
        source = SOURCE_ERROR if kind == "error" else SOURCE_META
        blocks = content_blocks(content)
        return [Message(thread, native, SYSTEM, 0, blocks, source_type=source, timestamp=ts)], None
    model = msg.get("model") if isinstance(msg.get("model"), str) else None
    usage = None
    tokens = msg.get("tokens")
    if isinstance(tokens, dict):
        cached, thoughts = to_int(tokens.get("cached")), to_int(tokens.get("thoughts"))
        usage = Usage(
            thread,
            f"msg:{native}",
            model=model,
            # `tool` (tool-use prompt tokens) is input too; `input` includes the cached part.
            input_tokens=to_int(tokens.get("input")) - cached + to_int(tokens.get("tool")),
            cache_read_tokens=cached,
            output_tokens=to_int(tokens.get("output")) + thoughts,
            reasoning_tokens=thoughts,
            timestamp=ts,
        )
    thinking = thinking_blocks(msg.get("thoughts"))
    said: list = []
    asked = []
    for part in parts:
        if isinstance(part, dict) and isinstance(part.get("functionCall"), dict):
            asked.append(part["functionCall"])
        elif isinstance(part, dict) and part.get("thought") and isinstance(part.get("text"), str):
            thinking.append(Block("thinking", text=part["text"]))
        else:
            said.append(part)
    out = [
        Message(
            thread,
            native,
            ASSISTANT,
            0,
            thinking + content_blocks(said if isinstance(content, list) else content),
            source_type=SOURCE_AGENT,
            timestamp=ts,
            model=model,
            # The bill is the reply's; its key is known from the first copy on, with or
            # without tokens yet, so that the record does not change when they arrive.
            usage_key=f"msg:{native}",
        )
    ]
    calls = [c for c in msg.get("toolCalls") or [] if isinstance(c, dict)]
    known = {str(c.get("id")) for c in calls}
    for i, call in enumerate(calls):
        call_id = str(call.get("id") or f"{native}:{i}")
        out.append(_call(thread, call_id, call.get("name"), call.get("args"), ts, model))
        if not call.get("result") and call.get("status") not in DONE_STATUSES:
            continue  # still running when the line was written
        text, is_error = call_result(call)
        out += _result(thread, call_id, text, is_error, parse_time(call.get("timestamp")) or ts)
    for i, fc in enumerate(asked):
        call_id = str(fc.get("id") or f"{native}:part{i}")
        if call_id not in known:
            out.append(_call(thread, call_id, fc.get("name"), fc.get("args"), ts, model))
    return out, usage
