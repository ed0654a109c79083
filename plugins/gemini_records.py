"""What both Gemini CLI formats build their records with: the agent name, which tool calls edit
files, and message content as blocks."""

from __future__ import annotations

import json
from typing import Any

from auditor.api import Block

from .shell_edits import shell_edits

AGENT = "gemini-cli"

# Tools that change files: Gemini's own and the GitHub MCP server's (remote repository paths).
EDIT_TOOLS = {"write_file", "replace", "create_or_update_file", "push_files"}
_PATH_KEYS = ("file_path", "absolute_path", "path")
ERROR_STATUSES = {"error", "cancelled", "canceled"}
DONE_STATUSES = ERROR_STATUSES | {"success"}


def as_text(value: Any) -> str:
    """`value` as text: a string as it is, anything else as JSON."""
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def to_int(value: Any) -> int:
    """`value` as an int; 0 when it is missing or not a number."""
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


def content_blocks(content: Any) -> list[Block]:
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


def thinking_blocks(thoughts: Any) -> list[Block]:
    """Thinking blocks of a chat message's `thoughts` ({subject, description} or text)."""
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


def call_result(call: dict) -> tuple[str, bool]:
    """(text, is_error) of a chat tool call's `result` list."""
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
                        as_text(err.get("message"))
                        if isinstance(err, dict) and err.get("message")
                        else as_text(err)
                    )
                if "output" in response:
                    texts.append(as_text(response["output"]))
            elif response is not None:
                texts.append(as_text(response))
        elif isinstance(entry.get("text"), str):
            texts.append(entry["text"])
    text = "\n".join(t for t in texts if t)
    if not text and isinstance(call.get("resultDisplay"), str):
        text = call["resultDisplay"]
    return text, is_error
