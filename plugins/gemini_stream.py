"""``gemini --output-format stream-json`` output (format ``gemini-stream``), one event a line:

``init {session_id, model}``, ``message {role, content, delta?}``, ``tool_use {tool_name,
tool_id, parameters}``, ``tool_result {tool_id, status, output?, error?}``, ``error
{severity, message}``, ``result {status, error?, stats}``. Append-only; every parser state
(current thread, model, assistant text still being streamed) lives in ``cursor.state``.

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
"""

from __future__ import annotations

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
    Record,
    ThreadInfo,
    Usage,
    each_record,
    parse_time,
    read_jsonl,
)

from .gemini_records import AGENT, ERROR_STATUSES, as_text, content_blocks, to_int, tool_edits

STREAM_TYPES = {"init", "message", "tool_use", "tool_result", "error", "result"}
# Envelope keys of other agents' JSONL lines (Claude Code, Codex, OpenAI Responses items).
_FOREIGN_KEYS = {"payload", "uuid", "sessionId", "parentUuid", "id", "thread_id", "item"}
_STREAM_HEAD = re.compile(rb'^\s*\{[^\n]*?"type"\s*:\s*"(?:init|message)"')


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
    vendor = "google"  # whose model the agent runs: an observer of another is chosen
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
        yield from each_record(
            read_jsonl(path, cursor),
            lambda line, obj: self._event(path, line, obj, st),
            "Gemini stream-json event",
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
            text: str | None = as_text(obj.get("content"))
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
                {"line": line, "text": as_text(obj.get("content")), "ts": obj.get("ts")}
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
            blocks = content_blocks(obj.get("content"))
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
            text = as_text(obj.get("output"))
            if not text and error:
                text = error.get("message") if isinstance(error, dict) else as_text(error)
            is_error = obj.get("status") in ERROR_STATUSES or bool(error)
            result = Block("tool_result", text=text or "", tool_use_id=call_id, is_error=is_error)
            yield msg(f"{call_id}:result", TOOL, [result], SOURCE_TOOL_RESULT)
        elif t == "error":  # non-fatal warnings and errors of the run
            severity = obj.get("severity")
            text = as_text(obj.get("message"))
            source = SOURCE_META if severity == "warning" else SOURCE_ERROR
            yield msg(f"L{line}", SYSTEM, [Block("text", text=text)], source)
        elif t == "result":
            stats = obj.get("stats") if isinstance(obj.get("stats"), dict) else None
            if stats is not None:
                prompt, output = (
                    to_int(stats.get("input_tokens")),
                    to_int(stats.get("output_tokens")),
                )
                cached = to_int(stats.get("cached"))
                uncached = to_int(stats["input"]) if "input" in stats else prompt - cached
                extra = max(0, to_int(stats.get("total_tokens")) - prompt - output)
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
                text = error.get("message") if isinstance(error, dict) else as_text(error)
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
