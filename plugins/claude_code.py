"""Claude Code session logs (`~/.claude/projects/<encoded-cwd>/<sessionId>.jsonl`).

Threads (native ids):

* main session: the session id (the file name stem when it is a UUID, else the records'
  `sessionId`).
* subagent logs, current layout `<sessionId>/subagents/agent-<id>.jsonl` and legacy layout
  `agent-<id>.jsonl` beside the session files: `"<sessionId>/agent-<id>"`, a sidechain of the
  session (whose id the records carry). `agent-<id>.meta.json` gives its type and description;
  the sidecar itself parses to nothing.
* inline sidechains (1.0.x: `isSidechain` records inside the main file):
  `"<sessionId>/sidechain-<uuid of the sidechain's first record>"`, linked to the `Task` call
  whose prompt it starts with.

A session file also names its subagents (`agent_progress` lines, `toolUseResult.agentId`); when
that subagent's log exists on disk the subagent thread gets its `Task`/`Agent` call id, type and
description from the parent too, whichever file is ingested first.

Messages: one per `user`/`assistant` record and per meaningful `system` record (`turn_duration`
and hook summaries without errors are bookkeeping). `progress` and `attachment` records are not
messages; a message whose `parentUuid` names one of them (or a skipped system record) gets the
nearest stored ancestor as its parent instead, so parent links always point at messages.
Streamed responses (several lines sharing `message.id`) stay one message per line, billed under
one usage key; the last line's usage wins; `<synthetic>` error replies are not billed.
A `<persisted-output>` tool result is replaced by its spilled `tool-results/<id>.txt` when that
file is beside the log (head and tail kept past 200 KB). Images are named, never stored.

Thread info: title from `custom-title`, else `ai-title`, else a `summary` whose leaf is in the
file (most summaries describe other sessions: kept in `meta["summaries"]`), else a subagent's
description; the instruction files Claude Code put into the context (CLAUDE.md sections of a
context message, `nested_memory` attachments such as a subdirectory's AGENTS.md) go to
`guidance`, by path.

`cursor.state` (small, JSON) carries what a read from the middle of the file needs: the session
id, the thread's title and meta, the last inline-sidechain and skipped-record links, and the
Task calls not yet matched to their sidechain.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from auditor.api import Cursor, LiveHooks, Record, hookimpl

from .claude_code_parser import Parser
from .claude_code_threads import AGENT

CONVERSATION_TYPES = {"user", "assistant", "system", "progress", "attachment"}
METADATA_TYPES = {
    "summary",
    "file-history-snapshot",
    "queue-operation",
    "permission-mode",
    "mode",
    "last-prompt",
    "ai-title",
    "custom-title",
    "agent-name",
    "atis-latch",
    "cost-state",
}


@hookimpl(trylast=True)
def register_formats(register):
    register(ClaudeCodeFormat())


def _looks_like_claude_code(obj: Any) -> bool:
    if not isinstance(obj, dict):
        return False
    kind = obj.get("type")
    if kind in CONVERSATION_TYPES:
        return "uuid" in obj and ("sessionId" in obj or "parentUuid" in obj)
    if kind == "summary":
        return "leafUuid" in obj
    if kind == "file-history-snapshot":
        return "messageId" in obj
    if isinstance(kind, str) and "sessionId" in obj:
        return kind in METADATA_TYPES or "uuid" in obj or "leafUuid" in obj
    return False


class ClaudeCodeFormat:
    """The Claude Code JSONL transcript format."""

    name = "claude-code"
    agent = AGENT
    vendor = "anthropic"  # whose model the agent runs: an observer of another is chosen
    appendable = True
    live_hooks = LiveHooks(
        "claude-code",
        hook_events=(
            "PostToolUse",
            "PostToolUseFailure",
            "UserPromptSubmit",
            "Stop",
            "SubagentStop",
            "SessionEnd",
        ),
        settings={
            "project": ".claude/settings.json",
            "local": ".claude/settings.local.json",  # not committed
            "user": "~/.claude/settings.json",
        },
        rewake=True,
        tested=("claude", "2.1.328"),  # tests/test_real_claude_code.py
    )

    def detect(self, path: Path, head: bytes) -> bool:
        name = path.name
        if name.startswith("agent-") and name.endswith(".meta.json"):
            return head.lstrip()[:1] == b"{"
        if not name.endswith(".jsonl"):
            return False
        # The first 8 lines are looked at (the head may hold hundreds): the 9th piece is the rest.
        lines = head.split(b"\n", 8)
        complete = len(lines) - 1  # the last piece may be cut by the 64 KiB limit
        for i, raw in enumerate(lines[:8]):
            raw = raw.strip()
            if not raw:
                continue
            if i < complete or len(head) < 65536:
                try:
                    if _looks_like_claude_code(orjson.loads(raw)):
                        return True
                except orjson.JSONDecodeError:
                    return False
                continue
            # A line longer than the head (a pasted image): judge by its envelope keys.
            return (
                raw.startswith(b"{")
                and b'"parentUuid"' in raw
                and (b'"sessionId"' in raw or b'"isSidechain"' in raw)
            )
        return False

    def parse(self, path: Path, cursor: Cursor) -> Iterator[Record]:
        if path.name.endswith(".meta.json"):
            return iter(())  # read by the agent log's own parse
        return Parser(path, cursor).run()
