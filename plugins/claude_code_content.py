"""Claude Code message content: tool results as text, user message kinds, CLAUDE.md context."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson

from auditor.api import (
    CLAUDE_CODE_COMMAND_PREFIXES,
    CLAUDE_CODE_HOOK_FEEDBACK_PREFIXES,
    CLAUDE_CODE_INTERRUPT_PREFIX,
    CLAUDE_CODE_META_PREFIXES,
    CORRECTION_MARKER,
    SOURCE_COMMAND,
    SOURCE_COMPACT,
    SOURCE_COURSE_CORRECTION,
    SOURCE_INTERRUPT,
    SOURCE_META,
    SOURCE_TOOL_RESULT,
    SOURCE_TYPED,
)

SPILL_CAP = 200 * 1024  # bytes of a spilled tool result kept (head and tail)
CLAUDE_MD_RE = re.compile(r"Contents of (\S*CLAUDE(?:\.local)?\.md)[^\n]*:\n")
CLAUDE_MD_END = ("\n</system-reminder>", "\n# currentDate", "\n      IMPORTANT: this context")

# Leading markers of user text that is not typed by a person (shared with the live hook).
COMMAND_PREFIXES = CLAUDE_CODE_COMMAND_PREFIXES
META_PREFIXES = CLAUDE_CODE_META_PREFIXES
INTERRUPT_PREFIX = CLAUDE_CODE_INTERRUPT_PREFIX
HOOK_FEEDBACK_PREFIXES = CLAUDE_CODE_HOOK_FEEDBACK_PREFIXES


def first_text(content: Any) -> str | None:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        for b in content:
            if isinstance(b, dict) and b.get("type") == "text":
                text = b.get("text")
                return text if isinstance(text, str) else None
    return None


def read_capped(path: Path, limit: int = SPILL_CAP) -> str:
    """Read a text file, keeping its head and tail when it is larger than `limit` bytes."""
    with open(path, "rb") as fh:
        size = fh.seek(0, 2)
        fh.seek(0)
        if size <= limit:
            return fh.read().decode("utf-8", "replace")
        half = limit // 2
        head = fh.read(half)
        fh.seek(size - half)
        tail = fh.read(half)
    cut = f"\n… [{size - 2 * half} bytes cut] …\n"
    return head.decode("utf-8", "replace") + cut + tail.decode("utf-8", "replace")


def flatten(content: Any) -> str | None:
    """Return a tool result's content as text (images and references named, never embedded)."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for item in content:
            if isinstance(item, str):
                parts.append(item)
            elif isinstance(item, dict):
                kind = item.get("type")
                if kind == "text":
                    text = item.get("text")
                    parts.append(text if isinstance(text, str) else "")
                elif kind == "image":
                    parts.append("[image]")
                elif kind == "tool_reference":
                    parts.append(f"[tool_reference: {item.get('tool_name')}]")
                elif isinstance(item.get("text"), str):
                    parts.append(item["text"])
                elif item.get("url"):
                    parts.append(f"{item.get('title') or ''} {item['url']}".strip())
                else:
                    parts.append(f"[{kind}]")
        return "\n".join(parts)
    return orjson.dumps(content).decode()


def classify_user(rec: dict, msg: dict, content: Any) -> str:
    source = rec.get("source") or msg.get("source")
    if isinstance(source, dict) and source.get("type") == SOURCE_COURSE_CORRECTION:
        return SOURCE_COURSE_CORRECTION
    if source == SOURCE_COURSE_CORRECTION:
        return SOURCE_COURSE_CORRECTION
    if rec.get("isCompactSummary"):
        return SOURCE_COMPACT
    if (
        isinstance(content, list)
        and content
        and all(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)
    ):
        return SOURCE_TOOL_RESULT
    text = first_text(content)
    if text and text.lstrip().startswith(HOOK_FEEDBACK_PREFIXES):
        # A Stop hook's `reason`, fed back as a user message (isMeta): auditor's own
        # corrections carry its marker; other hooks' feedback is harness text.
        return SOURCE_COURSE_CORRECTION if CORRECTION_MARKER in text else SOURCE_META
    if rec.get("isMeta"):
        # Harness text; one that carries auditor's marker is its correction (e.g. the message
        # a Stop hook's asyncRewake handler woke Claude with).
        return SOURCE_COURSE_CORRECTION if text and CORRECTION_MARKER in text else SOURCE_META
    if text:
        text = text.lstrip()
        if text.startswith(INTERRUPT_PREFIX):
            return SOURCE_INTERRUPT
        if text.startswith(COMMAND_PREFIXES):
            return SOURCE_COMMAND
        if text.startswith(META_PREFIXES):
            return SOURCE_META
    return SOURCE_TYPED


def claude_md_sections(text: str) -> dict[str, str]:
    """Find the `Contents of …/CLAUDE.md (…):` sections Claude Code injects as context."""
    found: dict[str, str] = {}
    matches = list(CLAUDE_MD_RE.finditer(text))
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        body = text[m.end() : end]
        for marker in CLAUDE_MD_END:
            cut = body.find(marker)
            if cut >= 0:
                body = body[:cut]
        body = body.strip()
        if body:
            found[m.group(1)] = body
    return found


def api_error_text(rec: dict) -> str:
    """The text of an `api_error` system record: status, message and retry."""
    err = rec.get("error")
    status = message = None
    if isinstance(err, dict):
        status = err.get("status")
        inner = err.get("error")
        if isinstance(inner, dict):
            inner = inner.get("error", inner)
            if isinstance(inner, dict):
                message = inner.get("message")
        message = message or err.get("message")
    elif isinstance(err, str):
        message = err
    text = "API error" + (f" {status}" if status else "") + (f": {message}" if message else "")
    if rec.get("retryAttempt") is not None:
        text += f" (retry {rec.get('retryAttempt')}/{rec.get('maxRetries')})"
    return text


def spilled(text: str, path: Path, sid: str | None, in_subagents_dir: bool) -> str:
    """Replace a `<persisted-output>` preview in `text` (a tool result of the transcript at
    `path`, session `sid`) with the spilled file, when it is here."""
    start = text.find("saved to: ")
    if start < 0:
        return text
    end = text.find("\n", start)
    where = text[start + 10 : end if end >= 0 else len(text)].strip()
    parts = where.replace("\\", "/").split("/")
    name = parts[-1]
    if not name or name.startswith("."):
        return text
    here = path.parent
    candidates = []
    if in_subagents_dir:
        candidates.append(here.parent / "tool-results" / name)
    if sid:
        candidates.append(here / sid / "tool-results" / name)
    if len(parts) >= 3 and parts[-2] == "tool-results" and parts[-3] not in ("", ".", ".."):
        candidates.append(here / parts[-3] / "tool-results" / name)
        candidates.append(here.parent.parent / parts[-3] / "tool-results" / name)
    candidates.append(here / "tool-results" / name)
    for candidate in candidates:
        try:
            return read_capped(candidate)
        except OSError:
            continue
    return text
