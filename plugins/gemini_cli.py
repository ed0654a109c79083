"""Gemini CLI transcripts: the on-disk chat files and `gemini --output-format stream-json` output.

Two formats, one agent (``gemini-cli``):

* ``gemini-cli``: the chat JSON the CLI writes to
  ``~/.gemini/tmp/<sha256 project hash>/chats/session-<date>T<HH-MM>-<8hex>.json``:
  ``{sessionId, projectHash, startTime, lastUpdated, messages: [...]}``. Messages are
  ``{id, timestamp, type: user|gemini|info|error|warning, content}``; gemini messages add
  ``model``, ``thoughts [{subject, description}]``, ``tokens {input, output, cached, thoughts,
  tool, total}`` and ``toolCalls [{id, name, args, status, result: [{functionResponse: {id,
  name, response: {output|error}}}], resultDisplay}]``. The results live inside the call; they
  are emitted as a separate ``tool`` message per call (``<call id>:result``) so that the engine
  pairs them like any other agent's. The file is rewritten as a whole: not appendable.
* ``gemini-stream``: what ``gemini --output-format stream-json`` prints, one event a line:
  ``init {session_id, model}``, ``message {role, content, delta?}``, ``tool_use {tool_name,
  tool_id, parameters}``, ``tool_result {tool_id, status, output?, error?}``, ``error
  {severity, message}``, ``result {status, error?, stats}``. Append-only; every parser state
  (current thread, model, assistant text still being streamed) lives in ``cursor.state``.

Stream specifics:

* Assistant text arrives as ``delta`` chunks: consecutive chunks are one message, emitted when
  the next event of another kind arrives (a message is stored once, so emitting it while it may
  still grow would pin a truncated text). Text still streaming when the file ends waits in
  ``cursor.state`` for the next read: a run killed in mid-sentence loses that last sentence.
* Each ``init`` starts a run; its ``session_id`` is the thread. Output of several runs appended
  to one file gives several threads, or one if a run resumed the same session.
* Harness wrappers add fields: a ``ts`` on every line (used only when ``timestamp`` is missing)
  and a user message without ``timestamp`` before each ``init``. That message is kept (as
  meta: nobody typed it into Gemini) in the thread of the ``init`` that follows it.
* Tokens exist only in the final ``result.stats`` of a run, one bill per run. ``stats`` are
  the CLI's sums over models: ``input_tokens`` = prompt (cached included), ``output_tokens`` =
  candidates (thoughts excluded), ``total_tokens`` = everything. The remainder
  ``total - input_tokens - output_tokens`` (thoughts, plus tool-use prompt tokens, which the
  stats do not separate and which are normally 0) is counted as reasoning output.

The same session read from both its chat file and its stream output shares tool-call ids (so
calls are not doubled) but not message ids or usage keys: ingest one or the other.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from auditor.api import (
    ASSISTANT,
    SOURCE_AGENT,
    SOURCE_ERROR,
    SOURCE_META,
    SOURCE_TOOL_RESULT,
    SOURCE_TYPED,
    SYSTEM,
    TOOL,
    USER,
    Block,
    Cursor,
    Message,
    Problem,
    Record,
    ThreadInfo,
    Usage,
    hookimpl,
    parse_time,
    read_document,
    read_jsonl,
)

from .shell_edits import shell_edits

AGENT = "gemini-cli"

# Tools that change files: Gemini's own and the GitHub MCP server's (remote repository paths).
EDIT_TOOLS = {"write_file", "replace", "create_or_update_file", "push_files"}
_PATH_KEYS = ("file_path", "absolute_path", "path")
ERROR_STATUSES = {"error", "cancelled", "canceled"}
DONE_STATUSES = ERROR_STATUSES | {"success"}

# Chat file: the CLI writes sessionId and projectHash first, then the messages list.
_CHAT_KEYS = (
    re.compile(rb'"sessionId"\s*:\s*"'),
    re.compile(rb'"projectHash"\s*:\s*"'),
    re.compile(rb'"messages"\s*:\s*\['),
)
STREAM_TYPES = {"init", "message", "tool_use", "tool_result", "error", "result"}
# Envelope keys of other agents' JSONL lines (Claude Code, Codex, OpenAI Responses items).
_FOREIGN_KEYS = {"payload", "uuid", "sessionId", "parentUuid", "id", "thread_id", "item"}
_STREAM_HEAD = re.compile(rb'^\s*\{[^\n]*?"type"\s*:\s*"(?:init|message)"')


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def _unique(paths: list[str]) -> list[str]:
    return list(dict.fromkeys(p for p in paths if p))


def tool_edits(name: Any, args: Any) -> tuple[bool, list[str] | None]:
    """Whether a Gemini CLI tool call edits files, and which (best effort)."""
    if not isinstance(name, str):
        return False, None
    base = name.rsplit("__", 1)[-1]  # MCP tools may be named `server__tool`
    if base == "run_shell_command":
        command = args.get("command") if isinstance(args, dict) else None
        return shell_edits(command) if isinstance(command, str) else (False, None)
    if base not in EDIT_TOOLS:
        return False, None
    if not isinstance(args, dict):
        return True, None
    if base == "push_files":
        files = args.get("files")
        if isinstance(files, str):  # some clients send the list JSON-encoded
            try:
                files = json.loads(files)
            except ValueError:
                files = None
        if not isinstance(files, list):
            return True, None
        paths = [f["path"] for f in files if isinstance(f, dict) and isinstance(f.get("path"), str)]
        return True, _unique(paths) or None
    for key in _PATH_KEYS:  # the first one present names the file
        if isinstance(args.get(key), str) and args[key]:
            return True, [args[key]]
    return True, None


def _content_blocks(content: Any) -> list[Block]:
    """Blocks of a chat message `content`: a string, or a Part / list of Parts."""
    if isinstance(content, str):
        return [Block("text", text=content)] if content else []
    if isinstance(content, dict):
        content = [content]
    blocks: list[Block] = []
    for part in content or []:
        if isinstance(part, str):
            if part:
                blocks.append(Block("text", text=part))
        elif isinstance(part, dict):
            if isinstance(part.get("text"), str) and part["text"]:
                blocks.append(Block("text", text=part["text"]))
            elif "inlineData" in part or "fileData" in part:
                blocks.append(Block("image"))  # the data is not stored
    return blocks


def _thinking(thoughts: Any) -> list[Block]:
    blocks = []
    for t in thoughts or []:
        if isinstance(t, dict):
            text = "\n".join(
                s for s in (t.get("subject"), t.get("description")) if isinstance(s, str) and s
            )
            if text:
                blocks.append(Block("thinking", text=text))
        elif isinstance(t, str) and t:
            blocks.append(Block("thinking", text=t))
    return blocks


def _call_result(call: dict) -> tuple[str, bool]:
    """(text, is_error) of a chat-file tool call's `result` list."""
    texts: list[str] = []
    is_error = call.get("status") in ERROR_STATUSES
    for entry in call.get("result") or []:
        if not isinstance(entry, dict):
            continue
        fr = entry.get("functionResponse")
        if isinstance(fr, dict):
            response = fr.get("response")
            if isinstance(response, dict) and ("output" in response or "error" in response):
                if response.get("error"):
                    is_error = True
                    err = response["error"]
                    texts.append(
                        err.get("message")
                        if isinstance(err, dict) and err.get("message")
                        else _as_text(err)
                    )
                if "output" in response:
                    texts.append(_as_text(response["output"]))
            elif response is not None:
                texts.append(_as_text(response))
        elif isinstance(entry.get("text"), str):
            texts.append(entry["text"])
    text = "\n".join(t for t in texts if t)
    if not text and isinstance(call.get("resultDisplay"), str):
        text = call["resultDisplay"]
    return text, is_error


class GeminiChatFormat:
    """A Gemini CLI on-disk chat session (one JSON document per session)."""

    name = "gemini-cli"
    agent = AGENT
    appendable = False

    def detect(self, path: Path, head: bytes) -> bool:
        if path.suffix != ".json" or not head.lstrip().startswith(b"{"):
            return False
        return all(p.search(head) for p in _CHAT_KEYS)

    def parse(self, path: Path, cursor: Cursor) -> Iterator[Record]:
        doc, problem = read_document(path)
        if problem is not None:
            yield problem
            return
        cursor.offset, cursor.line = path.stat().st_size, 0
        if not isinstance(doc, dict) or not isinstance(doc.get("messages"), list):
            yield Problem("not a Gemini CLI chat: expected a JSON object with a 'messages' list")
            return
        thread = str(doc.get("sessionId") or path.stem)
        meta = {k: doc[k] for k in ("projectHash", "startTime", "lastUpdated") if doc.get(k)}
        summary = doc.get("summary")
        yield ThreadInfo(
            thread,
            AGENT,
            title=summary if isinstance(summary, str) and summary else None,
            meta=meta or None,
        )
        seq = 0
        for index, msg in enumerate(doc["messages"]):
            if not isinstance(msg, dict):
                yield Problem(f"message {index} is not an object")
                continue
            try:
                for rec in self._message(thread, index, msg, seq):
                    if isinstance(rec, Message):
                        seq = rec.seq + 1
                    yield rec
            except Exception as exc:  # noqa: BLE001  # one odd message must not stop the file
                yield Problem(
                    f"cannot read Gemini CLI message {index}: {type(exc).__name__}: {exc}"
                )

    def _message(self, thread: str, index: int, msg: dict, seq: int) -> Iterator[Record]:
        kind = msg.get("type")
        native = str(msg.get("id") or f"i{index}")
        ts = parse_time(msg.get("timestamp"))
        blocks = _content_blocks(msg.get("content"))
        if kind == "user":
            yield Message(thread, native, USER, seq, blocks, source_type=SOURCE_TYPED, timestamp=ts)
            return
        if kind != "gemini":  # info, warning, error: written by the CLI
            source = SOURCE_ERROR if kind == "error" else SOURCE_META
            yield Message(thread, native, SYSTEM, seq, blocks, source_type=source, timestamp=ts)
            return
        model = msg.get("model") if isinstance(msg.get("model"), str) else None
        calls = [c for c in msg.get("toolCalls") or [] if isinstance(c, dict)]
        uses: list[Block] = []
        for i, call in enumerate(calls):
            call_id = str(call.get("id") or f"{native}:{i}")
            use = Block(
                "tool_use",
                tool_name=call.get("name"),
                tool_use_id=call_id,
                tool_input=call.get("args"),
            )
            use.is_file_edit, use.edited_paths = tool_edits(call.get("name"), call.get("args"))
            uses.append(use)
        key = None
        tokens = msg.get("tokens")
        if isinstance(tokens, dict):
            key = f"msg:{native}"
            cached, thoughts = _int(tokens.get("cached")), _int(tokens.get("thoughts"))
            yield Usage(
                thread,
                key,
                model=model,
                # `tool` (tool-use prompt tokens) is input too; `input` includes the cached part.
                input_tokens=_int(tokens.get("input")) - cached + _int(tokens.get("tool")),
                cache_read_tokens=cached,
                output_tokens=_int(tokens.get("output")) + thoughts,
                reasoning_tokens=thoughts,
                timestamp=ts,
            )
        yield Message(
            thread,
            native,
            ASSISTANT,
            seq,
            _thinking(msg.get("thoughts")) + blocks + uses,
            source_type=SOURCE_AGENT,
            timestamp=ts,
            model=model,
            usage_key=key,
        )
        for call, use in zip(calls, uses):
            if not call.get("result") and call.get("status") not in DONE_STATUSES:
                continue  # still running when the file was saved
            text, is_error = _call_result(call)
            seq += 1
            yield Message(
                thread,
                f"{use.tool_use_id}:result",
                TOOL,
                seq,
                [Block("tool_result", text=text, tool_use_id=use.tool_use_id, is_error=is_error)],
                source_type=SOURCE_TOOL_RESULT,
                timestamp=parse_time(call.get("timestamp")) or ts,
            )


# -- gemini --output-format stream-json ---------------------------------------------------------


def _head_events(head: bytes, limit: int = 12) -> list[Any]:
    """The complete lines at the start of `head` parsed as JSON (stops at the first that fails)."""
    lines = head.split(b"\n")
    complete = lines if len(head) < 65536 else lines[:-1]
    out: list[Any] = []
    for raw in complete:
        body = raw.strip()
        if not body:
            continue
        try:
            out.append(orjson.loads(body))
        except orjson.JSONDecodeError:
            break
        if len(out) >= limit:
            break
    return out


def _is_stream_event(obj: Any) -> bool:
    """A line only `gemini --output-format stream-json` writes."""
    if not isinstance(obj, dict):
        return False
    t = obj.get("type")
    return (
        (t == "init" and "session_id" in obj)
        or (t == "message" and "delta" in obj and obj.get("role") == "assistant")
        or (t in ("tool_use", "tool_result") and "tool_id" in obj)
    )


class GeminiStreamFormat:
    """`gemini --output-format stream-json` output (one event a line)."""

    name = "gemini-stream"
    agent = AGENT
    appendable = True

    def detect(self, path: Path, head: bytes) -> bool:
        if path.suffix not in (".jsonl", ".json"):
            return False
        events = _head_events(head)
        if not events:  # a first line longer than the head: judge by its opening
            first = head.lstrip().split(b"\n", 1)[0]
            return bool(_STREAM_HEAD.match(first)) and b'"session_id"' in first
        first = events[0]
        if not isinstance(first, dict) or first.get("type") not in ("init", "message"):
            return False
        if _FOREIGN_KEYS & first.keys():
            return False
        # The first line may be a harness's own user message: look for a Gemini event after it.
        return all(isinstance(e, dict) and e.get("type") in STREAM_TYPES for e in events) and any(
            _is_stream_event(e) for e in events
        )

    def parse(self, path: Path, cursor: Cursor) -> Iterator[Record]:
        st = cursor.state
        for item in read_jsonl(path, cursor):
            if isinstance(item, Problem):
                yield item
                continue
            line, obj = item
            if not isinstance(obj, dict):
                yield Problem(f"not a Gemini stream-json event (a JSON {type(obj).__name__})", line)
                continue
            try:
                yield from self._event(path, line, obj, st)
            except Exception as exc:  # noqa: BLE001
                yield Problem(
                    f"cannot read Gemini stream-json {obj.get('type')!r} event: {type(exc).__name__}: {exc}",
                    line,
                )

    # -- state helpers --------------------------------------------------------------------
    @staticmethod
    def _thread(path: Path, st: dict) -> str:
        if not st.get("thread"):
            st["thread"] = path.stem  # output read from its middle, before any init
        return st["thread"]

    def _flush_text(self, path: Path, st: dict) -> Iterator[Record]:
        pending = st.pop("text", None)
        if pending:
            thread = self._thread(path, st)
            yield Message(
                thread,
                f"L{pending['line']}",
                ASSISTANT,
                pending["line"],
                [Block("text", text=pending["text"])],
                source_type=SOURCE_AGENT,
                timestamp=parse_time(pending.get("ts")),
                model=st.get("model"),
                line=pending["line"],
            )

    def _flush_harness(self, path: Path, st: dict) -> Iterator[Record]:
        pending = st.pop("harness", None)
        if pending:
            thread = self._thread(path, st)
            for h in pending:
                yield Message(
                    thread,
                    f"L{h['line']}",
                    USER,
                    h["line"],
                    [Block("text", text=h["text"])],
                    source_type=SOURCE_META,
                    timestamp=parse_time(h.get("ts")),
                    line=h["line"],
                )

    # -- one event ------------------------------------------------------------------------
    def _event(self, path: Path, line: int, obj: dict, st: dict) -> Iterator[Record]:
        t = obj.get("type")
        ts_raw = obj.get("timestamp") or obj.get("ts")
        if t == "message" and obj.get("role") == "assistant" and obj.get("delta"):
            yield from self._flush_harness(path, st)
            text = _as_text(obj.get("content"))
            if st.get("text"):
                st["text"]["text"] += text
            else:
                st["text"] = {"line": line, "text": text, "ts": ts_raw}
            return
        yield from self._flush_text(path, st)
        if t == "message" and obj.get("role") == "user" and "timestamp" not in obj:
            # Written by a harness around the CLI, before the run it announces: its thread is
            # the next init's.
            st.setdefault("harness", []).append(
                {"line": line, "text": _as_text(obj.get("content")), "ts": obj.get("ts")}
            )
            return
        if t == "init":
            st["thread"] = str(obj.get("session_id") or st.get("thread") or path.stem)
            if isinstance(obj.get("model"), str):
                st["model"] = obj["model"]
            yield ThreadInfo(st["thread"], AGENT, model=st.get("model"))
            yield from self._flush_harness(path, st)
            return
        yield from self._flush_harness(path, st)
        thread = self._thread(path, st)
        ts = parse_time(ts_raw)

        def msg(
            native: str, role: str, blocks: list[Block], source: str, model=None, key=None
        ) -> Message:
            return Message(
                thread,
                native,
                role,
                line,
                blocks,
                source_type=source,
                timestamp=ts,
                model=model,
                usage_key=key,
                line=line,
            )

        if t == "message":
            role = obj.get("role")
            blocks = _content_blocks(obj.get("content"))
            if role == "user":
                yield msg(f"L{line}", USER, blocks, SOURCE_TYPED)
            elif role == "assistant":  # a whole message (no deltas, e.g. quiet mode)
                yield msg(f"L{line}", ASSISTANT, blocks, SOURCE_AGENT, st.get("model"))
            else:
                yield msg(f"L{line}", SYSTEM, blocks, SOURCE_META)
        elif t == "tool_use":
            call_id = str(obj.get("tool_id") or f"L{line}")
            name, params = obj.get("tool_name"), obj.get("parameters")
            use = Block("tool_use", tool_name=name, tool_use_id=call_id, tool_input=params)
            use.is_file_edit, use.edited_paths = tool_edits(name, params)
            yield msg(call_id, ASSISTANT, [use], SOURCE_AGENT, st.get("model"))
        elif t == "tool_result":
            call_id = str(obj.get("tool_id") or f"L{line}")
            error = obj.get("error")
            text = _as_text(obj.get("output"))
            if not text and error:
                text = error.get("message") if isinstance(error, dict) else _as_text(error)
            is_error = obj.get("status") in ERROR_STATUSES or bool(error)
            result = Block("tool_result", text=text or "", tool_use_id=call_id, is_error=is_error)
            yield msg(f"{call_id}:result", TOOL, [result], SOURCE_TOOL_RESULT)
        elif t == "error":  # non-fatal warnings and errors of the run
            severity = obj.get("severity")
            text = _as_text(obj.get("message"))
            source = SOURCE_META if severity == "warning" else SOURCE_ERROR
            yield msg(f"L{line}", SYSTEM, [Block("text", text=text)], source)
        elif t == "result":
            stats = obj.get("stats") if isinstance(obj.get("stats"), dict) else None
            if stats is not None:
                prompt, output = _int(stats.get("input_tokens")), _int(stats.get("output_tokens"))
                cached = _int(stats.get("cached"))
                uncached = _int(stats["input"]) if "input" in stats else prompt - cached
                extra = max(0, _int(stats.get("total_tokens")) - prompt - output)
                yield Usage(
                    thread,
                    f"result:{obj.get('timestamp') or f'L{line}'}",
                    model=st.get("model"),
                    input_tokens=uncached,
                    cache_read_tokens=cached,
                    output_tokens=output + extra,
                    reasoning_tokens=extra,
                    timestamp=ts,
                )
            error = obj.get("error")
            if obj.get("status") == "error" or error:
                text = error.get("message") if isinstance(error, dict) else _as_text(error)
                yield Message(
                    thread,
                    f"L{line}",
                    SYSTEM,
                    line,
                    [Block("text", text=text or "error")],
                    source_type=SOURCE_ERROR,
                    timestamp=ts,
                    stop_reason="error",
                    line=line,
                )


@hookimpl(trylast=True)
def register_formats(register) -> None:
    register(GeminiChatFormat())
    register(GeminiStreamFormat())
