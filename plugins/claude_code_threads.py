"""What a Claude Code parse knows about each thread (`ThreadState`), and small field readers."""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from auditor.api import ThreadInfo

AGENT = "claude-code"
MAX_SUMMARIES = 20  # foreign summaries kept in thread meta

# Title sources, weakest first: a later source only replaces an equal or weaker one.
RANK_DESCRIPTION, RANK_SUMMARY, RANK_AI_TITLE, RANK_CUSTOM = 1, 2, 3, 4


class ThreadState:
    """What this parse knows about one thread, turned into ThreadInfo when it changes."""

    __slots__ = (
        "agent_type",
        "claude_md",
        "cwd",
        "established",
        "git_branch",
        "meta",
        "model",
        "native_id",
        "parent",
        "parent_tool",
        "sent",
        "sidechain",
        "title",
        "title_rank",
        "version",
    )

    def __init__(self, native_id: str, parent: str | None = None, sidechain: bool = False):
        self.native_id = native_id  # "" until the file's session is known
        self.cwd: str | None = None
        self.git_branch: str | None = None
        self.version: str | None = None
        self.model: str | None = None
        self.title: str | None = None
        self.title_rank = 0
        self.parent = parent
        self.parent_tool: str | None = None
        self.sidechain = sidechain
        self.agent_type: str | None = None
        self.claude_md: dict[str, str] | None = None
        self.meta: dict[str, Any] = {}
        self.sent: tuple | None = None
        self.established = False

    def set_title(self, title: Any, rank: int) -> None:
        if isinstance(title, str) and title.strip() and rank >= self.title_rank:
            self.title, self.title_rank = title.strip(), rank

    def envelope(self, rec: dict) -> None:
        cwd = rec.get("cwd")
        if cwd and self.cwd is None and type(cwd) is str:
            self.cwd = cwd
        branch = rec.get("gitBranch")
        if branch and branch != self.git_branch and type(branch) is str:
            self.git_branch = branch
        version = rec.get("version")
        if version and version != self.version and type(version) is str:
            self.version = version

    def read_metadata(self, rec: dict) -> None:
        """Take in a metadata record (title, summary, permission mode, agent name, cost)."""
        kind = rec.get("type")
        if kind == "custom-title":
            self.set_title(rec.get("customTitle"), RANK_CUSTOM)
        elif kind == "ai-title":
            self.set_title(rec.get("aiTitle"), RANK_AI_TITLE)
        elif kind == "summary":
            leaf, summary = rec.get("leafUuid"), rec.get("summary")
            if isinstance(leaf, str) and isinstance(summary, str):
                summaries = self.meta.setdefault("summaries", {})
                if leaf in summaries or len(summaries) < MAX_SUMMARIES:
                    summaries[leaf] = summary
        elif kind == "permission-mode":
            mode = rec.get("permissionMode")
            if mode:
                self.meta["permission_mode"] = mode
        elif kind == "agent-name":
            if rec.get("agentName"):
                self.meta["agent_name"] = rec["agentName"]
        elif kind == "cost-state":
            self.meta["cost"] = {
                "total_cost_usd": rec.get("totalCostUSD"),
                "lines_added": rec.get("totalLinesAdded"),
                "lines_removed": rec.get("totalLinesRemoved"),
                "duration_ms": rec.get("totalDuration"),
            }
        # Other metadata (snapshots, queue operations, modes...) and unknown types: ignored.

    def title_from_summaries(self, uuids) -> None:
        """Title the thread from a summary whose leaf is one of its messages' `uuids`."""
        summaries = self.meta.get("summaries")
        if summaries and self.title_rank <= RANK_SUMMARY:
            # A summary describes the conversation ending at its leaf; only one whose leaf is
            # in this file is about this session (most are written into other sessions' files).
            for leaf, summary in summaries.items():
                if leaf in uuids:
                    self.set_title(summary, RANK_SUMMARY)

    def snapshot(self) -> tuple:
        return (
            self.cwd,
            self.git_branch,
            self.version,
            self.model,
            self.title,
            self.parent,
            self.parent_tool,
            self.sidechain,
            self.agent_type,
            len(self.claude_md or ()),
            sum(len(v) for v in (self.claude_md or {}).values()),
            orjson.dumps(self.meta, option=orjson.OPT_SORT_KEYS) if self.meta else None,
        )

    def info(self) -> ThreadInfo:
        guidance = dict(self.claude_md) if self.claude_md else None  # path -> text
        self.sent = self.snapshot()
        return ThreadInfo(
            native_id=self.native_id,
            agent=AGENT,
            cwd=self.cwd,
            git_branch=self.git_branch,
            title=self.title,
            model=self.model,
            version=self.version,
            parent_native_id=self.parent,
            parent_tool_use_id=self.parent_tool,
            is_sidechain=self.sidechain,
            agent_type=self.agent_type,
            guidance=guidance,
            meta=dict(self.meta) if self.meta else None,
        )


def text_of(value: Any) -> str | None:
    """Return `value` as a string (None stays None): fields of odd type must not reach the store."""
    if value is None or type(value) is str:
        return value
    return orjson.dumps(value).decode() if isinstance(value, (dict, list)) else str(value)


def count_of(value: Any) -> int:
    return value if type(value) is int else 0


def prompt_key(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
