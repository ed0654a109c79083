"""Claude Code message content: tool results as text, user message kinds, CLAUDE.md context."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson

from auditor.api import (
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

# Leading markers of user text that is not typed by a person.
COMMAND_PREFIXES = (
    "<command-name>",
    "<command-message>",
    "<command-args>",
    "<local-command-stdout>",
    "<local-command-stderr>",
    "<bash-input>",
    "<bash-stdout>",
    "<bash-stderr>",
)
META_PREFIXES = (
    "<local-command-caveat>",
    "Caveat: The messages below were generated",
    "<system-reminder>",
    "<task-notification>",
    "<user-prompt-submit-hook>",
)
INTERRUPT_PREFIX = "[Request interrupted by user"
HOOK_FEEDBACK_PREFIXES = ("Stop hook feedback:", "SubagentStop hook feedback:")


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
