"""What both Codex formats build their records with: the agent name and message helpers."""

from __future__ import annotations

import json
from typing import Any

import orjson

from auditor.api import Block, Message

AGENT = "codex"


def msg(
    thread: str,
    native: str,
    role: str,
    line: int,
    blocks: list[Block],
    source: str,
    ts,
    model: str | None = None,
) -> Message:
    """A message of a JSONL transcript: its seq is its line number."""
    return Message(
        thread, native, role, line, blocks, source_type=source, timestamp=ts, model=model, line=line
    )


def as_text(value: Any) -> str:
    """`value` as text: a string as it is, anything else as JSON."""
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def first_json_line(head: bytes) -> Any:
    """Return the first non-blank line of `head` parsed as JSON, or None if it does not parse."""
    for raw in head.split(b"\n", 32)[:32]:
        body = raw.strip()
        if not body:
            continue
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError:
            return None
    return None
