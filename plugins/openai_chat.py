"""Generic OpenAI-style chat logs.

Accepted shapes:

* a JSON object with `messages` (and optional `id`, `model`, `usage`, `title`);
* a bare JSON list of messages;
* JSONL with one message per line.

A message is `{role: system|developer|user|assistant|tool|function, content, tool_calls?,
tool_call_id?, name?, usage?, id?}`; `content` is a string or a list of `{type: text, text}`
parts (images are kept as image blocks without their data). Assistant `tool_calls[{id,
function: {name, arguments}}]` become tool_use blocks (`arguments`, a JSON string, is decoded);
`role: tool` messages become tool results paired by `tool_call_id`.

Which tool calls edit files is configurable: `AUDITOR_OPENAI_EDIT_TOOLS` (comma-separated tool
names) replaces the defaults below. `str_replace_editor` counts only for its editing commands
(`create`, `str_replace`, `insert`, `undo_edit`); `apply_patch` inputs are parsed for paths.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from auditor.api import (
    ASSISTANT,
    SOURCE_AGENT,
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
    hookimpl,
    parse_time,
    read_document,
    read_jsonl,
)

from .shell_edits import patch_paths, shell_edits

AGENT = "openai"
EDIT_TOOLS_ENV = "AUDITOR_OPENAI_EDIT_TOOLS"
DEFAULT_EDIT_TOOLS = (
    "write_file",
    "edit_file",
    "create_file",
    "delete_file",
    "str_replace_editor",
    "str_replace_based_edit_tool",
    "apply_patch",
    "replace_in_file",
    "write_to_file",
    "insert_code",
    "text_editor",
)
EDITOR_COMMANDS = {"create", "str_replace", "insert", "undo_edit"}
EDITOR_TOOLS = {"str_replace_editor", "str_replace_based_edit_tool", "text_editor"}
SHELL_TOOLS = {"shell", "bash", "run_shell_command", "execute_bash", "exec_command", "run_command"}
_PATH_KEYS = ("path", "file_path", "filePath", "filename", "file", "target_file", "target")

ROLES = {"system", "developer", "user", "assistant", "tool", "function"}
_ROLE_MAP = {
    "system": SYSTEM,
    "developer": SYSTEM,
    "user": USER,
    "assistant": ASSISTANT,
    "tool": TOOL,
    "function": TOOL,
}
# Top-level keys of other formats that also have "messages" lists (Amp, Gemini CLI, Inspect AI,
# mini-swe-agent...): a document with any of them is not claimed.
FOREIGN_KEYS = {
    "v",
    "env",
    "sessionId",
    "projectHash",
    "eval",
    "samples",
    "trajectory_format",
    "info",
    "trajectory",
    "history",
    "events",
    "checkpoints",
}


def edit_tools() -> set[str]:
    raw = os.environ.get(EDIT_TOOLS_ENV)
    if raw is None or not raw.strip():
        return set(DEFAULT_EDIT_TOOLS)
    return {part.strip() for part in raw.split(",") if part.strip()}


_SPECIAL = re.compile(rb'["{}\[\],]')
_STRING_END = re.compile(rb'(?:[^"\\]|\\.)*"', re.DOTALL)
_ROLE_AT = re.compile(rb'\s*"(system|developer|user|assistant|tool|function)"')


def _top_level_keys(head: bytes) -> dict[str, int]:
    """The keys of the JSON object `head` starts with (`head` may be cut short), each with the
    offset of its value. A small scanner that knows strings and nesting, nothing else."""
    keys: dict[str, int] = {}
    depth, pos, expect_key = 0, 0, False
    while True:
        m = _SPECIAL.search(head, pos)
        if m is None:
            return keys
        c, pos = m.group(), m.end()
        if c == b'"':
            end = _STRING_END.match(head, pos)
            if end is None:
                return keys
            if depth == 1 and expect_key:
                colon = re.compile(rb"\s*:").match(head, end.end())
                if colon:
                    keys[head[pos : end.end() - 1].decode("utf-8", "replace")] = colon.end()
                expect_key = False
            pos = end.end()
        elif c in (b"{", b"["):
            depth += 1
            expect_key = depth == 1 and c == b"{"
        elif c in (b"}", b"]"):
            depth -= 1
            if depth <= 0:
                return keys
        elif depth == 1:  # a comma between top-level members
            expect_key = True


def _looks_like_messages(head: bytes, start: int, allow_empty: bool = True) -> bool:
    """True if the JSON array at `start` is empty or opens with a message that has a chat role."""
    rest = head[start:].lstrip()
    if not rest.startswith(b"["):
        return False
    rest = rest[1:].lstrip()
    if rest.startswith(b"]"):
        return allow_empty
    if not rest.startswith(b"{"):
        return False
    keys = _top_level_keys(rest)
    return "role" in keys and bool(_ROLE_AT.match(rest, keys["role"]))


def content_blocks(content: Any) -> list[Block]:
    if content is None:
        return []
    if isinstance(content, str):
        return [Block("text", text=content)] if content else []
    if isinstance(content, dict):
        content = [content]
    blocks: list[Block] = []
    for part in content if isinstance(content, list) else []:
        if isinstance(part, str):
            blocks.append(Block("text", text=part))
            continue
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        if kind in ("text", "input_text", "output_text") or (kind is None and "text" in part):
            blocks.append(Block("text", text=part.get("text") or ""))
        elif kind in ("image_url", "input_image", "image"):
            blocks.append(Block("image"))
        elif kind == "refusal":
            blocks.append(Block("text", text=part.get("refusal") or ""))
        elif kind in ("thinking", "reasoning"):
            blocks.append(Block("thinking", text=part.get("thinking") or part.get("text") or ""))
    return blocks


def _loads_maybe(raw: Any) -> Any:
    if not isinstance(raw, str):
        return raw
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def tool_edit(name: str | None, args: Any, tools: set[str]) -> tuple[bool, list[str] | None]:
    if not name:
        return False, None
    if name in SHELL_TOOLS and name not in tools:
        command = args.get("command") or args.get("cmd") if isinstance(args, dict) else args
        if isinstance(command, (str, list)):
            return shell_edits(command)
        return False, None
    if name not in tools:
        return False, None
    if (
        name in EDITOR_TOOLS
        and isinstance(args, dict)
        and args.get("command") not in EDITOR_COMMANDS
    ):
        return False, None
    if name == "apply_patch" or (isinstance(args, str) and "*** Begin Patch" in args):
        patch = args.get("input") or args.get("patch") if isinstance(args, dict) else args
        return True, (patch_paths(patch) if isinstance(patch, str) else None) or None
    if isinstance(args, dict):
        paths = [str(args[k]) for k in _PATH_KEYS if isinstance(args.get(k), str) and args[k]]
        return True, list(dict.fromkeys(paths)) or None
    return True, None


def _usage(thread: str, key: str, u: Any, model: str | None, ts) -> Usage | None:
    if not isinstance(u, dict):
        return None
    details = u.get("prompt_tokens_details") or u.get("input_tokens_details") or {}
    out_details = u.get("completion_tokens_details") or u.get("output_tokens_details") or {}
    if "prompt_tokens" in u or "completion_tokens" in u:  # Chat Completions: prompt includes cached
        cached = int(details.get("cached_tokens") or 0)
        prompt = int(u.get("prompt_tokens") or 0)
        return Usage(
            thread,
            key,
            model=model,
            input_tokens=prompt - cached,
            cache_read_tokens=cached,
            output_tokens=int(u.get("completion_tokens") or 0),
            reasoning_tokens=int(out_details.get("reasoning_tokens") or 0),
            timestamp=ts,
        )
    if "input_tokens" in u or "output_tokens" in u:
        cached = int(details.get("cached_tokens") or 0)
        if "cache_read_input_tokens" in u or "cache_creation_input_tokens" in u:  # Anthropic-style
            return Usage(
                thread,
                key,
                model=model,
                input_tokens=int(u.get("input_tokens") or 0),
                cache_read_tokens=int(u.get("cache_read_input_tokens") or 0),
                cache_write_tokens=int(u.get("cache_creation_input_tokens") or 0),
                output_tokens=int(u.get("output_tokens") or 0),
                timestamp=ts,
            )
        return Usage(
            thread,
            key,
            model=model,
            input_tokens=int(u.get("input_tokens") or 0) - cached,
            cache_read_tokens=cached,
            output_tokens=int(u.get("output_tokens") or 0),
            reasoning_tokens=int(out_details.get("reasoning_tokens") or 0),
            timestamp=ts,
        )
    return None


class OpenAIChatFormat:
    """An OpenAI-style chat log (JSON document or JSONL of messages)."""

    name = "openai"
    agent = AGENT
    vendor = "openai"  # whose model the agent runs: an observer of another is chosen
    appendable = False  # JSON documents are rewritten; a grown JSONL log is simply read again
    detect_priority = 100  # generic: tried after the formats of specific agents

    def detect(self, path: Path, head: bytes) -> bool:
        body = head.lstrip()
        if path.suffix == ".jsonl":
            first = body.split(b"\n", 1)[0]
            try:
                obj = orjson.loads(first)
            except orjson.JSONDecodeError:
                return False
            return (
                isinstance(obj, dict)
                and obj.get("role") in ROLES
                and ("content" in obj or "tool_calls" in obj)
                and not {"type", "uuid", "sessionId", "payload", "timestamp"} & obj.keys()
            )
        if path.suffix != ".json":
            return False
        from .mini_swe_agent import looks_like_mini

        if looks_like_mini(body):  # a chat log too, but mini-swe-agent's own format reads it
            return False
        if body.startswith(b"["):
            return _looks_like_messages(body, 0, allow_empty=False)
        if not body.startswith(b"{"):
            return False
        keys = _top_level_keys(body)
        if "messages" not in keys or FOREIGN_KEYS & keys.keys():
            return False
        if re.search(rb'"id"\s*:\s*"T-', body[:4096]) and "created" in keys:  # an Amp thread
            return False
        return _looks_like_messages(body, keys["messages"])

    def parse(self, path: Path, cursor: Cursor) -> Iterator[Record]:
        if path.suffix == ".jsonl":
            yield from self._parse_jsonl(path, cursor)
            return
        doc, problem = read_document(path)
        if problem is not None:
            yield problem
            return
        cursor.offset, cursor.line = path.stat().st_size, 0
        if isinstance(doc, list):
            doc = {"messages": doc}
        if not isinstance(doc, dict) or not isinstance(doc.get("messages"), list):
            yield Problem(
                "not an OpenAI chat log: expected a 'messages' list or a list of messages"
            )
            return
        thread = str(doc.get("id") or path.stem)
        model = doc.get("model") if isinstance(doc.get("model"), str) else None
        meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else None
        yield ThreadInfo(
            thread,
            AGENT,
            title=doc.get("title") if isinstance(doc.get("title"), str) else None,
            model=model,
            cwd=doc.get("cwd") if isinstance(doc.get("cwd"), str) else None,
            meta=meta,
        )
        state = {"thread": thread, "model": model}
        tools = edit_tools()
        yield from each_record(
            enumerate(doc["messages"]),
            lambda index, msg: self._message(index, None, msg, state, tools),
            "message",
            numbered=True,
        )
        usage = _usage(thread, "total", doc.get("usage"), model, None)
        if usage is not None and not state.get("per_message_usage"):  # else it would count twice
            yield usage

    def _parse_jsonl(self, path: Path, cursor: Cursor) -> Iterator[Record]:
        state = cursor.state
        state.setdefault("thread", path.stem)
        tools = edit_tools()
        if cursor.offset == 0:
            yield ThreadInfo(state["thread"], AGENT)
        yield from each_record(
            read_jsonl(path, cursor),
            lambda line, msg: self._message(line, line, msg, state, tools),
            "chat message",
        )

    def _message(
        self, seq: int, line: int | None, msg: dict, state: dict, tools: set[str]
    ) -> Iterator[Record]:
        thread = state["thread"]
        role_name = msg.get("role")
        role = _ROLE_MAP.get(role_name) if isinstance(role_name, str) else None
        if role is None:
            yield Problem(f"message with unknown role {role_name!r} skipped", line)
            return
        native = str(msg.get("id") or (f"L{line}" if line is not None else f"m{seq}"))
        model = msg.get("model") if isinstance(msg.get("model"), str) else state.get("model")
        ts = parse_time(msg.get("timestamp") or msg.get("created_at"))
        if ts is None and isinstance(msg.get("created"), (int, float)):
            ts = parse_time(msg["created"] * 1000)
        blocks = []
        reasoning = msg.get("reasoning_content") or msg.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            blocks.append(Block("thinking", text=reasoning))
        if role == TOOL:
            call_id = msg.get("tool_call_id") or state.get("last_function_call")
            text = "\n\n".join(
                b.text or "" for b in content_blocks(msg.get("content")) if b.kind == "text"
            )
            blocks.append(
                Block("tool_result", text=text, tool_use_id=call_id, is_error=msg.get("is_error"))
            )
            source = SOURCE_TOOL_RESULT
        else:
            blocks += content_blocks(msg.get("content"))
            source = {USER: SOURCE_TYPED, SYSTEM: SOURCE_META, ASSISTANT: SOURCE_AGENT}[role]
            calls = c if isinstance(c := msg.get("tool_calls"), list) else []
            for n, call in enumerate(calls):
                if not isinstance(call, dict):
                    continue
                fn = f if isinstance(f := call.get("function"), dict) else call
                name = fn.get("name")
                args = _loads_maybe(fn.get("arguments", fn.get("input")))
                block = Block(
                    "tool_use",
                    tool_name=name,
                    tool_use_id=str(call.get("id") or f"{native}:{n}"),
                    tool_input=args,
                )
                block.is_file_edit, block.edited_paths = tool_edit(name, args, tools)
                blocks.append(block)
            legacy = msg.get("function_call")
            if isinstance(legacy, dict) and legacy.get("name"):
                call_id = f"{native}:function_call"
                state["last_function_call"] = call_id
                args = _loads_maybe(legacy.get("arguments"))
                block = Block(
                    "tool_use", tool_name=legacy["name"], tool_use_id=call_id, tool_input=args
                )
                block.is_file_edit, block.edited_paths = tool_edit(legacy["name"], args, tools)
                blocks.append(block)
        key = None
        usage = _usage(thread, f"msg:{native}", msg.get("usage"), model, ts)
        if usage is not None:
            key = usage.key
            state["per_message_usage"] = True
            yield usage
        yield Message(
            thread,
            native,
            role,
            seq,
            blocks,
            source_type=source,
            timestamp=ts,
            model=model if role == ASSISTANT else None,
            usage_key=key,
            stop_reason=msg.get("finish_reason") or msg.get("stop_reason"),
            line=line,
        )


@hookimpl(trylast=True)
def register_formats(register) -> None:
    register(OpenAIChatFormat())
