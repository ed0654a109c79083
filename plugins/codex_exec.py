"""What ``codex exec --json`` prints: ``thread.started``, ``turn.started``, ``item.started`` /
``item.completed``, ``turn.completed`` (with usage) lines, no timestamps.

Append-only, so the parser works from any cursor; what it needs from earlier lines (thread id,
runs and turns so far) lives in ``cursor.state``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from auditor.api import (
    ASSISTANT,
    SOURCE_AGENT,
    SOURCE_ERROR,
    SOURCE_TOOL_RESULT,
    SYSTEM,
    TOOL,
    Block,
    Cursor,
    Record,
    ThreadInfo,
    Usage,
    each_record,
    read_jsonl,
)

from .codex_records import AGENT, as_text, first_json_line, msg
from .shell_edits import shell_edits


class CodexExecFormat:
    """`codex exec --json` output: thread/turn/item events, one JSON object a line.

    Items are emitted when `item.completed` arrives (an item that only ever started, e.g. a
    command still running when the file was read, is left out until it completes: emitting it
    early would pin its incomplete version, since a message is stored once).
    """

    name = "codex-exec"
    agent = AGENT
    vendor = "openai"  # whose model the agent runs: an observer of another is chosen
    appendable = True

    def detect(self, path: Path, head: bytes) -> bool:
        if path.suffix not in (".jsonl", ".json"):
            return False
        obj = first_json_line(head)
        if not isinstance(obj, dict):
            return False
        t = obj.get("type")
        if not isinstance(t, str) or any(
            k in obj for k in ("payload", "timestamp", "sessionId", "uuid")
        ):
            return False
        return t.startswith(("thread.", "turn.", "item."))

    def parse(self, path: Path, cursor: Cursor) -> Iterator[Record]:
        st = cursor.state
        if "thread" not in st:
            st["thread"] = path.stem
        yield from each_record(
            read_jsonl(path, cursor),
            lambda line, obj: self._event(line, obj, st),
            "codex exec event",
        )

    def _event(self, line: int, obj: dict, st: dict) -> Iterator[Record]:
        t = obj.get("type")
        if t == "thread.started":
            # `codex exec resume` appends a run of the same thread (its item ids start again);
            # output of several runs concatenated may also hold other threads.
            thread_id = str(obj.get("thread_id") or st["thread"])
            if thread_id == st["thread"] and st.get("runs"):
                st["runs"] += 1
            else:
                st["thread"], st["runs"] = thread_id, 1
            yield ThreadInfo(st["thread"], AGENT)
        elif t == "turn.completed":
            st["turns"] = st.get("turns", 0) + 1
            u = obj.get("usage") or {}
            cached = int(u.get("cached_input_tokens") or 0)
            yield Usage(
                st["thread"],
                f"turn:{st['turns']}",
                input_tokens=int(u.get("input_tokens") or 0) - cached,
                cache_read_tokens=cached,
                output_tokens=int(u.get("output_tokens") or 0),
                reasoning_tokens=int(u.get("reasoning_output_tokens") or 0),
            )
        elif t == "turn.failed" or t == "error":
            err = e if isinstance(e := obj.get("error"), dict) else obj
            text = err.get("message") or t
            yield msg(
                st["thread"],
                f"L{line}",
                SYSTEM,
                line,
                [Block("text", text=text)],
                SOURCE_ERROR,
                None,
            )
        elif t == "item.completed" and isinstance(obj.get("item"), dict):
            yield from self._item(line, obj["item"], st)

    def _item(self, line: int, item: dict, st: dict) -> Iterator[Record]:
        thread = st["thread"]
        runs = st.get("runs", 1)
        raw_id = str(item.get("id") or f"L{line}")
        iid = raw_id if runs <= 1 else f"r{runs}:{raw_id}"  # item ids restart in a resumed run
        kind = item.get("type") or item.get("item_type")
        if kind in ("agent_message", "assistant_message"):
            yield msg(
                thread,
                iid,
                ASSISTANT,
                line,
                [Block("text", text=item.get("text") or "")],
                SOURCE_AGENT,
                None,
            )
        elif kind == "reasoning":
            yield msg(
                thread,
                iid,
                ASSISTANT,
                line,
                [Block("thinking", text=item.get("text") or "")],
                SOURCE_AGENT,
                None,
            )
        elif kind == "command_execution":
            command = item.get("command")
            use = Block(
                "tool_use", tool_name="shell", tool_use_id=iid, tool_input={"command": command}
            )
            if isinstance(command, (str, list)):
                use.is_file_edit, use.edited_paths = shell_edits(command)
            yield msg(thread, iid, ASSISTANT, line, [use], SOURCE_AGENT, None)
            code = item.get("exit_code")
            failed = item.get("status") in ("failed", "declined")
            result = Block(
                "tool_result",
                text=item.get("aggregated_output") or "",
                tool_use_id=iid,
                is_error=failed or code not in (0, None),
            )
            yield msg(thread, f"{iid}:output", TOOL, line, [result], SOURCE_TOOL_RESULT, None)
        elif kind == "file_change":
            changes = [c for c in item.get("changes") or [] if isinstance(c, dict)]
            paths = list(dict.fromkeys(str(c["path"]) for c in changes if c.get("path")))
            use = Block(
                "tool_use",
                tool_name="apply_patch",
                tool_use_id=iid,
                tool_input={"changes": changes},
                is_file_edit=True,
                edited_paths=paths or None,
            )
            yield msg(thread, iid, ASSISTANT, line, [use], SOURCE_AGENT, None)
            status = item.get("status") or "completed"
            summary = "\n".join(f"{c.get('kind', 'update')} {c.get('path')}" for c in changes)
            result = Block(
                "tool_result",
                text=f"{status}\n{summary}".strip(),
                tool_use_id=iid,
                is_error=status == "failed",
            )
            yield msg(thread, f"{iid}:output", TOOL, line, [result], SOURCE_TOOL_RESULT, None)
        elif kind == "mcp_tool_call":
            name = f"mcp__{item.get('server')}__{item.get('tool')}"
            use = Block(
                "tool_use", tool_name=name, tool_use_id=iid, tool_input=item.get("arguments")
            )
            yield msg(thread, iid, ASSISTANT, line, [use], SOURCE_AGENT, None)
            error = item.get("error")
            if isinstance(error, dict) and isinstance(error.get("message"), str):
                text = error["message"]
            else:
                text = as_text(error or item.get("result"))
            result = Block(
                "tool_result",
                text=text,
                tool_use_id=iid,
                is_error=bool(error) or item.get("status") == "failed",
            )
            yield msg(thread, f"{iid}:output", TOOL, line, [result], SOURCE_TOOL_RESULT, None)
        elif kind == "web_search":
            use = Block(
                "tool_use",
                tool_name="web_search",
                tool_use_id=iid,
                tool_input={"query": item.get("query")},
            )
            yield msg(thread, iid, ASSISTANT, line, [use], SOURCE_AGENT, None)
        elif kind == "todo_list":
            use = Block(
                "tool_use",
                tool_name="todo_list",
                tool_use_id=iid,
                tool_input={"items": item.get("items")},
            )
            yield msg(thread, iid, ASSISTANT, line, [use], SOURCE_AGENT, None)
        elif kind == "error":
            yield msg(
                thread,
                iid,
                SYSTEM,
                line,
                [Block("text", text=item.get("message") or "error")],
                SOURCE_ERROR,
                None,
            )
