"""Gemini CLI chat files (format ``gemini-cli``).

The chat JSON the CLI writes to
``~/.gemini/tmp/<sha256 project hash>/chats/session-<date>T<HH-MM>-<8hex>.json``:
``{sessionId, projectHash, startTime, lastUpdated, messages: [...]}``. Messages are
``{id, timestamp, type: user|gemini|info|error|warning, content}``; gemini messages add
``model``, ``thoughts [{subject, description}]``, ``tokens {input, output, cached, thoughts,
tool, total}`` and ``toolCalls [{id, name, args, status, result: [{functionResponse: {id,
name, response: {output|error}}}], resultDisplay}]``. The results live inside the call; they
are emitted as a separate ``tool`` message per call (``<call id>:result``) so that the engine
pairs them like any other agent's. The file is rewritten as a whole: not appendable.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

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
    each_record,
    parse_time,
    read_document,
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

# Chat file: the CLI writes sessionId and projectHash first, then the messages list.
_CHAT_KEYS = (
    re.compile(rb'"sessionId"\s*:\s*"'),
    re.compile(rb'"projectHash"\s*:\s*"'),
    re.compile(rb'"messages"\s*:\s*\['),
)


class GeminiChatFormat:
    """A Gemini CLI on-disk chat session (one JSON document per session)."""

    name = "gemini-cli"
    agent = AGENT
    vendor = "google"  # whose model the agent runs: an observer of another is chosen
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
        seq = 0  # a message's blocks may become several messages: the next free position

        def read(index: int, msg: dict) -> Iterator[Record]:
            nonlocal seq
            for rec in self._message(thread, index, msg, seq):
                if isinstance(rec, Message):
                    seq = rec.seq + 1
                yield rec

        yield from each_record(
            enumerate(doc["messages"]), read, "Gemini CLI message", numbered=True
        )

    def _message(self, thread: str, index: int, msg: dict, seq: int) -> Iterator[Record]:
        kind = msg.get("type")
        native = str(msg.get("id") or f"i{index}")
        ts = parse_time(msg.get("timestamp"))
        blocks = content_blocks(msg.get("content"))
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
            cached, thoughts = to_int(tokens.get("cached")), to_int(tokens.get("thoughts"))
            yield Usage(
                thread,
                key,
                model=model,
                # `tool` (tool-use prompt tokens) is input too; `input` includes the cached part.
                input_tokens=to_int(tokens.get("input")) - cached + to_int(tokens.get("tool")),
                cache_read_tokens=cached,
                output_tokens=to_int(tokens.get("output")) + thoughts,
                reasoning_tokens=thoughts,
                timestamp=ts,
            )
        yield Message(
            thread,
            native,
            ASSISTANT,
            seq,
            thinking_blocks(msg.get("thoughts")) + blocks + uses,
            source_type=SOURCE_AGENT,
            timestamp=ts,
            model=model,
            usage_key=key,
        )
        for call, use in zip(calls, uses):
            if not call.get("result") and call.get("status") not in DONE_STATUSES:
                continue  # still running when the file was saved
            text, is_error = call_result(call)
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
