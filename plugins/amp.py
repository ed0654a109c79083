"""Amp threads: the JSON document `amp threads export T-...` prints (and `~/.local/share/amp/threads/T-*.json`).

Shape: `{v, id: "T-...", created, title?, env: {initial: {workingDirectory, trees: [...]}}, meta,
messages: [{role: user|assistant|info, messageId, content: [...], state?, usage?, meta?, source?}]}`.
Blocks: `text`, `thinking`, `tool_use {id, name, input}`, `tool_result {toolUseID, run: {status,
result: {output, exitCode}}}`, `summary` (compaction, role `info`), `image`. The AGENTS.md
files Amp loaded are named in `discoveredGuidanceFiles` (`[{uri, lineCount}]`) of user messages
and tool results: their text goes to `guidance` where the entry has it, else their paths to
`meta["guidance_paths"]`, read from disk by `auditor.ingest.guidance`.

The file is rewritten as a whole while the thread goes on, so it is not appendable: a changed
file is read again from the start (message ids are stable, so nothing is stored twice).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from auditor.api import (
    ASSISTANT,
    SOURCE_AGENT,
    SOURCE_COMMAND,
    SOURCE_COMPACT,
    SOURCE_COURSE_CORRECTION,
    SOURCE_META,
    SOURCE_TOOL_RESULT,
    SOURCE_TYPED,
    SYSTEM,
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
)

from .shell_edits import shell_edits

AGENT = "amp"

# Amp's built-in tools that change files, and the input key that names the file.
EDIT_TOOLS = {
    "edit_file",
    "create_file",
    "format_file",
    "delete_file",
    "undo_edit",
    "apply_patch",
    "multi_edit",
}
SHELL_TOOLS = {"Bash", "shell_command"}
_PATH_KEYS = ("path", "file_path", "filePath", "file", "target_file")
ERROR_STATUSES = {"error", "cancelled", "canceled", "rejected-by-user", "rejected", "failed"}

_AMP_ID = re.compile(rb'"id"\s*:\s*"T-[0-9A-Za-z-]+"')
_AMP_MARKER = re.compile(rb'"(v|env|created)"\s*:')
_SOURCE_TYPES = {
    "course-correction": SOURCE_COURSE_CORRECTION,
    "course_correction": SOURCE_COURSE_CORRECTION,
    "user": SOURCE_TYPED,
    "typed": SOURCE_TYPED,
    "command": SOURCE_COMMAND,
    "system": SOURCE_META,
}


def _edits(name: Any, tool_input: Any) -> tuple[bool, list[str] | None]:
    """Whether an Amp tool call edits files, and which."""
    if name in EDIT_TOOLS:
        return True, _paths(tool_input)
    if name in SHELL_TOOLS and isinstance(tool_input, dict):
        command = tool_input.get("cmd") or tool_input.get("command")
        if isinstance(command, (str, list)):
            return shell_edits(command)
    return False, None


def _paths(tool_input: Any) -> list[str] | None:
    if not isinstance(tool_input, dict):
        return None
    found = [
        str(tool_input[k])
        for k in _PATH_KEYS
        if isinstance(tool_input.get(k), str) and tool_input[k]
    ]
    return list(dict.fromkeys(found)) or None


def _result_text(run: dict) -> tuple[str, bool]:
    """(text, is_error) of an Amp tool_result `run`."""
    status = run.get("status")
    is_error = status in ERROR_STATUSES
    result = run.get("result")
    error = run.get("error")
    text = ""
    if isinstance(result, str):
        text = result
    elif isinstance(result, dict):
        out = result.get("output", result.get("content", result.get("diff")))
        if isinstance(out, str):
            text = out
        elif out is not None:
            text = json.dumps(out, ensure_ascii=False)
        else:
            text = json.dumps(result, ensure_ascii=False)
        code = result.get("exitCode")
        if isinstance(code, int) and code != 0:
            is_error = True
    elif isinstance(result, list):
        text = "\n".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in result)
    elif result is not None:
        text = json.dumps(result, ensure_ascii=False)
    if error:
        msg = error.get("message") if isinstance(error, dict) else str(error)
        text = f"{text}\n{msg}".strip() if msg else text
        is_error = True
    if not text and status and status != "done":
        text = f"[{status}]"
    return text, is_error


def _blocks(content: Any) -> list[Block]:
    if isinstance(content, str):
        return [Block("text", text=content)]
    blocks: list[Block] = []
    for part in content or []:
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        if kind == "text":
            blocks.append(Block("text", text=part.get("text") or ""))
        elif kind == "thinking":
            blocks.append(Block("thinking", text=part.get("thinking") or part.get("text") or ""))
        elif kind == "redacted_thinking":
            blocks.append(Block("thinking", text=""))
        elif kind == "tool_use":
            name = part.get("name")
            tool_input = part.get("input")
            blocks.append(
                Block(
                    "tool_use",
                    tool_name=name,
                    tool_use_id=part.get("id"),
                    tool_input=tool_input,
                )
            )
            blocks[-1].is_file_edit, blocks[-1].edited_paths = _edits(name, tool_input)
        elif kind == "tool_result":
            run = got if isinstance(got := part.get("run"), dict) else {}
            text, is_error = _result_text(run)
            blocks.append(
                Block(
                    "tool_result",
                    text=text,
                    tool_use_id=part.get("toolUseID") or part.get("tool_use_id"),
                    is_error=is_error,
                )
            )
        elif kind == "summary":
            summary = part.get("summary")
            if isinstance(summary, dict):
                summary = summary.get("text") or summary.get("summary")
            blocks.append(
                Block("text", text=summary if isinstance(summary, str) else part.get("text") or "")
            )
        elif kind == "image":
            blocks.append(Block("image"))  # data not stored
    return blocks


def _source(msg: dict, blocks: list[Block]) -> str | None:
    role = msg.get("role")
    if role == "assistant":
        return SOURCE_AGENT
    if role == "info":
        return (
            SOURCE_COMPACT
            if any(
                isinstance(p, dict) and p.get("type") == "summary" for p in msg.get("content") or []
            )
            else SOURCE_META
        )
    meta = got if isinstance(got := msg.get("meta"), dict) else {}
    source = msg.get("source") or meta.get("source")
    stype = (
        source.get("type")
        if isinstance(source, dict)
        else source
        if isinstance(source, str)
        else None
    )
    if stype in _SOURCE_TYPES:
        return _SOURCE_TYPES[stype]
    if blocks and all(b.kind == "tool_result" for b in blocks):
        return SOURCE_TOOL_RESULT
    return SOURCE_TYPED


def _git_branch(trees: Any) -> str | None:
    for tree in trees or []:
        repo = tree.get("repository") if isinstance(tree, dict) else None
        ref = repo.get("ref") if isinstance(repo, dict) else None
        if isinstance(ref, str) and ref:
            ref = ref.removeprefix("refs/heads/")
            return None if re.fullmatch(r"[0-9a-f]{40}", ref) else ref
    return None


class AmpFormat:
    """An Amp thread export (one JSON document per thread)."""

    name = "amp"
    agent = AGENT
    appendable = False

    def detect(self, path: Path, head: bytes) -> bool:
        if path.suffix != ".json" or not head.lstrip().startswith(b"{"):
            return False
        if not _AMP_ID.search(head):
            return False
        # An OpenAI-style log may have a "T-..." id too; Amp threads also have v/env/created.
        return b'"messages"' in head and bool(_AMP_MARKER.search(head))

    def parse(self, path: Path, cursor: Cursor) -> Iterator[Record]:
        doc, problem = read_document(path)
        if problem is not None:
            yield problem
            return
        cursor.offset, cursor.line = path.stat().st_size, 0
        if not isinstance(doc, dict) or not isinstance(doc.get("messages"), list):
            yield Problem("not an Amp thread: expected a JSON object with a 'messages' list")
            return
        thread = str(doc.get("id") or path.stem)
        env = got if isinstance(got := doc.get("env"), dict) else {}
        initial = got if isinstance(got := env.get("initial"), dict) else {}
        meta = {k: doc[k] for k in ("v", "created", "updatedAt") if k in doc}
        platform = initial.get("platform")
        if isinstance(platform, dict) and platform.get("client"):
            meta["client"] = platform["client"]
        guidance, unread = _guidance_files(doc["messages"])
        if unread:
            meta["guidance_paths"] = unread  # named without their text: read from disk
        yield ThreadInfo(
            thread,
            AGENT,
            cwd=initial.get("workingDirectory"),
            git_branch=_git_branch(initial.get("trees")),
            title=doc.get("title") if isinstance(doc.get("title"), str) else None,
            guidance=guidance or None,
            meta=meta or None,
        )
        yield from each_record(
            enumerate(doc["messages"]),
            lambda index, msg: self._message(thread, index, msg),
            "Amp message",
            numbered=True,
        )

    def _message(self, thread: str, index: int, msg: dict) -> Iterator[Record]:
        role = {"user": USER, "assistant": ASSISTANT, "info": SYSTEM}.get(
            str(msg.get("role")), SYSTEM
        )
        mid = msg.get("messageId")
        native = str(mid) if mid is not None else f"i{index}"
        blocks = _blocks(msg.get("content"))
        usage = got if isinstance(got := msg.get("usage"), dict) else None
        meta = got if isinstance(got := msg.get("meta"), dict) else {}
        ts = parse_time(meta.get("sentAt")) or parse_time(usage.get("timestamp") if usage else None)
        state = got if isinstance(got := msg.get("state"), dict) else {}
        stop = state.get("stopReason") or (
            state.get("type") if state.get("type") not in (None, "complete") else None
        )
        key = None
        if usage is not None:
            key = f"msg:{native}"
            yield Usage(
                thread,
                key,
                model=usage.get("model"),
                input_tokens=int(usage.get("inputTokens") or 0),
                output_tokens=int(usage.get("outputTokens") or 0),
                cache_read_tokens=int(usage.get("cacheReadInputTokens") or 0),
                cache_write_tokens=int(usage.get("cacheCreationInputTokens") or 0),
                timestamp=ts,
            )
        yield Message(
            thread,
            native,
            role,
            index,
            blocks,
            source_type=_source(msg, blocks),
            timestamp=ts,
            model=usage.get("model") if usage else None,
            usage_key=key,
            stop_reason=stop,
        )


def _listed(value: Any) -> list:
    return value if isinstance(value, list) else []


def _guidance_files(messages: list) -> tuple[dict[str, str], list[str]]:
    """The AGENTS.md files Amp found for the thread (`discoveredGuidanceFiles` of user messages
    and of tool results): path -> text where the entry carries its text, and the other paths."""
    entries = []
    for msg in messages:
        if not isinstance(msg, dict):
            continue
        entries += _listed(msg.get("discoveredGuidanceFiles"))
        for block in msg.get("content") or []:
            run = block.get("run") if isinstance(block, dict) else None
            result = run.get("result") if isinstance(run, dict) else None
            if isinstance(result, dict):
                entries += _listed(result.get("discoveredGuidanceFiles"))
    texts: dict[str, str] = {}
    paths: list[str] = []
    for entry in entries:
        uri = entry.get("uri") if isinstance(entry, dict) else None
        if not isinstance(uri, str) or not uri:
            continue
        path = unquote(urlsplit(uri).path) if uri.startswith("file:") else uri
        content = entry.get("content")
        if isinstance(content, str) and content.strip():
            texts[path] = content
        elif path not in paths:
            paths.append(path)
    return texts, [p for p in paths if p not in texts]


@hookimpl(trylast=True)
def register_formats(register) -> None:
    register(AmpFormat())
