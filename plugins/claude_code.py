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
one usage key; the last line's usage wins.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from auditor.hookspecs import hookimpl
from auditor.model import (
    ASSISTANT,
    SOURCE_AGENT,
    SOURCE_COMMAND,
    SOURCE_COMPACT,
    SOURCE_COURSE_CORRECTION,
    SOURCE_ERROR,
    SOURCE_INTERRUPT,
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
    parse_time,
    read_jsonl,
)

from .claude_code_edits import tool_edits

AGENT = "claude-code"
SYNTHETIC = "<synthetic>"
SPILL_CAP = 200 * 1024  # bytes of a spilled tool result kept (head and tail)
MAX_SUMMARIES = 20  # foreign summaries kept in thread meta
KEEP_SIDECHAIN = 32  # inline-sidechain uuid -> root entries carried in cursor.state
KEEP_SKIPPED = 16  # skipped-record uuid -> parent entries carried in cursor.state
KEEP_TASKS = 8  # pending Task prompts carried in cursor.state

CONVERSATION_TYPES = {"user", "assistant", "system", "progress", "attachment"}
METADATA_TYPES = {
    "summary", "file-history-snapshot", "queue-operation", "permission-mode", "mode",
    "last-prompt", "ai-title", "custom-title", "agent-name", "atis-latch", "cost-state",
}
UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
CLAUDE_MD_RE = re.compile(r"Contents of (\S*CLAUDE(?:\.local)?\.md)[^\n]*:\n")
CLAUDE_MD_END = ("\n</system-reminder>", "\n# currentDate", "\n      IMPORTANT: this context")

# Title sources, weakest first: a later source only replaces an equal or weaker one.
RANK_DESCRIPTION, RANK_SUMMARY, RANK_AI_TITLE, RANK_CUSTOM = 1, 2, 3, 4

# Leading markers of user text that is not typed by a person.
COMMAND_PREFIXES = (
    "<command-name>", "<command-message>", "<command-args>", "<local-command-stdout>",
    "<local-command-stderr>", "<bash-input>", "<bash-stdout>", "<bash-stderr>",
)
META_PREFIXES = (
    "<local-command-caveat>", "Caveat: The messages below were generated", "<system-reminder>",
    "<task-notification>", "<user-prompt-submit-hook>",
)
INTERRUPT_PREFIX = "[Request interrupted by user"


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
    appendable = True

    def detect(self, path: Path, head: bytes) -> bool:
        name = path.name
        if name.startswith("agent-") and name.endswith(".meta.json"):
            return head.lstrip()[:1] == b"{"
        if not name.endswith(".jsonl"):
            return False
        lines = head.split(b"\n")
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
            return raw.startswith(b"{") and b'"parentUuid"' in raw and (
                b'"sessionId"' in raw or b'"isSidechain"' in raw
            )
        return False

    def parse(self, path: Path, cursor: Cursor) -> Iterator[Record]:
        if path.name.endswith(".meta.json"):
            return iter(())  # read by the agent log's own parse
        return _Parser(path, cursor).run()


class _Thread:
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

    def __init__(self, native_id: str | None, parent: str | None = None, sidechain: bool = False):
        self.native_id = native_id
        self.cwd = self.git_branch = self.version = self.model = self.title = None
        self.title_rank = 0
        self.parent = parent
        self.parent_tool = None
        self.sidechain = sidechain
        self.agent_type = None
        self.claude_md: dict[str, str] | None = None
        self.meta: dict[str, Any] = {}
        self.sent: tuple | None = None
        self.established = False

    def set_title(self, title: Any, rank: int) -> None:
        if isinstance(title, str) and title.strip() and rank >= self.title_rank:
            self.title, self.title_rank = title.strip(), rank

    def envelope(self, rec: dict) -> None:
        cwd = rec.get("cwd")
        if cwd and self.cwd is None:
            self.cwd = cwd
        branch = rec.get("gitBranch")
        if branch and branch != self.git_branch:
            self.git_branch = branch
        version = rec.get("version")
        if version and version != self.version:
            self.version = version

    def snapshot(self) -> tuple:
        return (
            self.cwd, self.git_branch, self.version, self.model, self.title, self.parent,
            self.parent_tool, self.sidechain, self.agent_type,
            len(self.claude_md or ()), sum(len(v) for v in (self.claude_md or {}).values()),
            orjson.dumps(self.meta, option=orjson.OPT_SORT_KEYS) if self.meta else None,
        )

    def info(self) -> ThreadInfo:
        guidance = None
        if self.claude_md:
            if len(self.claude_md) == 1:
                text = next(iter(self.claude_md.values()))
            else:
                text = "\n\n".join(f"Contents of {p}:\n\n{c}" for p, c in self.claude_md.items())
            guidance = {"CLAUDE.md": text}
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


def _prompt_key(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _first_text(content: Any) -> str | None:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        for b in content:
            if isinstance(b, dict) and b.get("type") == "text":
                return b.get("text")
    return None


def _read_capped(path: Path, limit: int = SPILL_CAP) -> str:
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


def _flatten(content: Any) -> str | None:
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
                    parts.append(item.get("text") or "")
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


def _classify_user(rec: dict, msg: dict, content: Any) -> str:
    source = rec.get("source") or msg.get("source")
    if isinstance(source, dict) and source.get("type") == SOURCE_COURSE_CORRECTION:
        return SOURCE_COURSE_CORRECTION
    if source == SOURCE_COURSE_CORRECTION:
        return SOURCE_COURSE_CORRECTION
    if rec.get("isCompactSummary"):
        return SOURCE_COMPACT
    if isinstance(content, list) and content and all(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in content
    ):
        return SOURCE_TOOL_RESULT
    if rec.get("isMeta"):
        return SOURCE_META
    text = _first_text(content)
    if text:
        text = text.lstrip()
        if text.startswith(INTERRUPT_PREFIX):
            return SOURCE_INTERRUPT
        if text.startswith(COMMAND_PREFIXES):
            return SOURCE_COMMAND
        if text.startswith(META_PREFIXES):
            return SOURCE_META
    return SOURCE_TYPED


def _claude_md_sections(text: str) -> dict[str, str]:
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


class _Parser:
    """One parse of one file, from a cursor."""

    def __init__(self, path: Path, cursor: Cursor):
        self.path = path
        self.cursor = cursor
        state = cursor.state
        name = path.name
        stem = name[:-6] if name.endswith(".jsonl") else path.stem
        self.file_agent: str | None = stem[6:] if stem.startswith("agent-") else None
        self.in_subagents_dir = path.parent.name == "subagents"
        sid = state.get("sid")
        if sid is None and self.file_agent is None and UUID_RE.match(stem):
            sid = stem
        self.sid: str | None = sid
        self.threads: dict[str, _Thread] = {}
        # The file's own thread: created now so that metadata lines before the first
        # conversation line (summaries, titles) have somewhere to go.
        self.main = _Thread(None)
        self.main.cwd = state.get("cwd")
        self.main.title = state.get("title")
        self.main.title_rank = state.get("title_rank", 0)
        self.main.meta = dict(state.get("meta") or {})
        self.main.established = bool(state.get("est"))
        if self.file_agent:
            self.main.sidechain = True
            self.main.meta.setdefault("agent_id", self.file_agent)
            self._read_sidecar()
        if sid is not None:
            self._name_main(sid)
        self.side_root: dict[str, str] = dict(state.get("side") or {})
        self.current_root: str | None = state.get("root")
        self.skipped: dict[str, str | None] = dict(state.get("skip") or {})
        # Task/Agent calls not yet linked to their sidechain: tool_use_id -> [prompt key, type,
        # description].
        self.tasks: dict[str, list] = dict(state.get("tasks") or {})
        self.linked_agents: set[str] = set()
        self.uuids: set[str] = set()
        self.last_usage: tuple | None = None
        self.out: list[Record] = []

    # -- threads --------------------------------------------------------------------------
    def _read_sidecar(self) -> None:
        sidecar = self.path.with_name(f"agent-{self.file_agent}.meta.json")
        try:
            data = orjson.loads(sidecar.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            data = None
        t = self.main
        if isinstance(data, dict):
            if isinstance(data.get("agentType"), str):
                t.agent_type = data["agentType"]
            if isinstance(data.get("description"), str):
                t.meta["description"] = data["description"]
                t.set_title(data["description"], RANK_DESCRIPTION)
            if isinstance(data.get("worktreePath"), str):
                t.meta["worktree_path"] = data["worktreePath"]
        if t.agent_type is None:
            # Built-in helpers have no sidecar but a telling id.
            for prefix, kind in (("acompact-", "compact"), ("aside_question-", "aside_question")):
                if self.file_agent.startswith(prefix):
                    t.agent_type = kind

    def _fallback_sid(self) -> str:
        if self.file_agent is not None:
            if self.in_subagents_dir:
                return self.path.parent.parent.name
            return "unknown-session"
        name = self.path.name
        return name[:-6] if name.endswith(".jsonl") else self.path.stem

    def _name_main(self, sid: str) -> None:
        self.sid = sid
        if self.file_agent is None:
            self.main.native_id = sid
        else:
            self.main.native_id = f"{sid}/agent-{self.file_agent}"
            self.main.parent = sid
        self.threads[self.main.native_id] = self.main

    def _thread_for(self, rec: dict, uuid: str | None) -> _Thread:
        if self.sid is None:
            sid = rec.get("sessionId")
            self._name_main(sid if isinstance(sid, str) and sid else self._fallback_sid())
        if self.file_agent is not None or not rec.get("isSidechain"):
            return self.main
        agent_id = rec.get("agentId")
        if agent_id:
            tid = f"{self.sid}/agent-{agent_id}"
        else:
            tid = f"{self.sid}/sidechain-{self._sidechain_root(rec, uuid)}"
        t = self.threads.get(tid)
        if t is None:
            t = self.threads[tid] = _Thread(tid, parent=self.sid, sidechain=True)
            t.cwd = self.main.cwd
            if not agent_id:
                self._link_inline(t, rec)
        return t

    def _sidechain_root(self, rec: dict, uuid: str | None) -> str:
        parent = rec.get("parentUuid")
        root = self.side_root.get(parent) if parent else None
        if root is None:
            # A root record (parentUuid null) starts a sidechain; a dangling parent continues
            # the current one.
            root = (self.current_root if parent else None) or uuid or "unknown"
        if uuid:
            self.side_root[uuid] = root
        self.current_root = root
        return root

    def _link_inline(self, t: _Thread, rec: dict) -> None:
        """Link an inline sidechain to the Task call whose prompt it starts with."""
        msg = rec.get("message")
        text = _first_text(msg.get("content")) if isinstance(msg, dict) else None
        if not text:
            return
        key = _prompt_key(text)
        for tool_id, (prompt_key, kind, desc) in self.tasks.items():
            if prompt_key == key:
                del self.tasks[tool_id]
                t.parent_tool, t.agent_type = tool_id, kind
                t.set_title(desc, RANK_DESCRIPTION)
                return

    def _link_agent(self, agent_id: Any, tool_use_id: Any) -> None:
        """Give an existing subagent log's thread its spawning call, seen from the parent."""
        if not isinstance(agent_id, str) or not agent_id or agent_id in self.linked_agents:
            return
        self.linked_agents.add(agent_id)
        if self.file_agent is not None or self.sid is None:
            return
        here = self.path.parent
        name = f"agent-{agent_id}.jsonl"
        if not ((here / self.sid / "subagents" / name).exists() or (here / name).exists()):
            return  # no log: do not create an empty thread
        kind = desc = None
        if isinstance(tool_use_id, str):
            _, kind, desc = self.tasks.pop(tool_use_id, (None, None, None))
        self.out.append(
            ThreadInfo(
                native_id=f"{self.sid}/agent-{agent_id}",
                agent=AGENT,
                parent_native_id=self.sid,
                parent_tool_use_id=tool_use_id if isinstance(tool_use_id, str) else None,
                is_sidechain=True,
                agent_type=kind,
                title=desc,
            )
        )

    def _establish(self, t: _Thread) -> None:
        t.established = True
        self.out.append(t.info())

    # -- records --------------------------------------------------------------------------
    def run(self) -> Iterator[Record]:
        out = self.out
        handlers = {
            "assistant": self._assistant,
            "user": self._user,
            "system": self._system,
            "progress": self._progress,
            "attachment": self._attachment,
        }
        try:
            for item in read_jsonl(self.path, self.cursor):
                if type(item) is Problem:
                    yield item
                    continue
                line, rec = item
                if type(rec) is not dict:
                    yield Problem(f"not a JSON object: {type(rec).__name__}", line)
                    continue
                handler = handlers.get(rec.get("type"))
                if handler is not None:
                    handler(rec, line)
                else:
                    self._metadata(rec)
                if out:
                    yield from out
                    out.clear()
            self._finish()
            yield from out
            out.clear()
        finally:
            self._save_state()

    def _parent(self, rec: dict, key: str = "parentUuid") -> str | None:
        parent = rec.get(key)
        skipped = self.skipped
        # Walk up past records that are not messages (they can be written out of order, so
        # the walk happens here and not when they are read).
        for _ in range(64):
            if parent not in skipped:
                break
            parent = skipped[parent]
        return parent

    def _skip(self, rec: dict) -> None:
        """Remember a record that is not a message so its children can skip over it."""
        uuid = rec.get("uuid")
        if uuid:
            self.skipped[uuid] = rec.get("parentUuid")
            if rec.get("isSidechain") and self.file_agent is None and not rec.get("agentId"):
                self._sidechain_root(rec, uuid)

    def _message(self, t: _Thread, rec: dict, uuid: str, line: int, role: str, blocks: list,
                 source_type: str, parent: str | None = None, timestamp=None, **extra) -> None:
        if not t.established or t.sent is None:
            self._establish(t)
        self.uuids.add(uuid)
        self.out.append(
            Message(
                thread=t.native_id,
                native_id=uuid,
                role=role,
                seq=line,
                blocks=blocks,
                source_type=source_type,
                timestamp=timestamp or parse_time(rec.get("timestamp")),
                parent_id=parent,
                is_sidechain=bool(rec.get("isSidechain")),
                line=line,
                **extra,
            )
        )

    def _envelope(self, rec: dict, uuid: str) -> _Thread:
        t = self._thread_for(rec, uuid)
        t.envelope(rec)
        if t is self.main:
            meta = t.meta
            for key, name in (("slug", "slug"), ("entrypoint", "entrypoint")):
                value = rec.get(key)
                if value and name not in meta:
                    meta[name] = value
            mode = rec.get("permissionMode")
            if mode and meta.get("permission_mode") != mode:
                meta["permission_mode"] = mode
        return t

    def _assistant(self, rec: dict, line: int) -> None:
        uuid = rec.get("uuid")
        msg = rec.get("message")
        if not uuid or not isinstance(msg, dict):
            self._skip(rec)
            return
        t = self._envelope(rec, uuid)
        model = msg.get("model")
        synthetic = model == SYNTHETIC
        blocks: list[Block] = []
        content = msg.get("content")
        if isinstance(content, str):
            blocks.append(Block("text", content))
        elif isinstance(content, list):
            for b in content:
                if type(b) is not dict:
                    continue
                kind = b.get("type")
                if kind == "text":
                    blocks.append(Block("text", b.get("text")))
                elif kind == "tool_use" or kind == "server_tool_use":
                    name, tool_input = b.get("name"), b.get("input")
                    is_edit, paths = tool_edits(name, tool_input)
                    tool_id = b.get("id")
                    blocks.append(Block("tool_use", None, name, tool_id, tool_input, None, is_edit, paths))
                    if (name == "Task" or name == "Agent") and isinstance(tool_input, dict):
                        self._remember_task(tool_id, tool_input)
                elif kind == "thinking":
                    blocks.append(Block("thinking", b.get("thinking") or None))
                elif kind == "redacted_thinking":
                    blocks.append(Block("thinking", None))
                elif b.get("tool_use_id"):  # server tool results (web search...)
                    blocks.append(Block("tool_result", _flatten(b.get("content")), tool_use_id=b["tool_use_id"],
                                        is_error=bool(b.get("is_error"))))
                elif isinstance(b.get("text"), str):
                    blocks.append(Block("text", b["text"]))
        usage_key = None
        usage = msg.get("usage")
        timestamp = parse_time(rec.get("timestamp"))
        if not synthetic:
            if model and t.model is None:
                t.model = model
            usage_key = msg.get("id") or rec.get("requestId") or uuid
            if isinstance(usage, dict):
                self._usage(t, usage_key, model, usage, timestamp)
        source = SOURCE_ERROR if synthetic or rec.get("isApiErrorMessage") else SOURCE_AGENT
        self._message(t, rec, uuid, line, ASSISTANT, blocks, source, self._parent(rec), timestamp,
                      model=model, usage_key=usage_key, stop_reason=msg.get("stop_reason"))

    def _usage(self, t: _Thread, key: str, model: Any, usage: dict, timestamp) -> None:
        details = usage.get("output_tokens_details")
        values = (
            usage.get("input_tokens") or 0,
            usage.get("output_tokens") or 0,
            usage.get("cache_read_input_tokens") or 0,
            usage.get("cache_creation_input_tokens") or 0,
            (details.get("thinking_tokens") or 0) if isinstance(details, dict) else 0,
        )
        if self.last_usage == (t.native_id, key, values):
            return  # a streamed copy of the same bill
        self.last_usage = (t.native_id, key, values)
        self.out.append(
            Usage(t.native_id, key, model, *values, timestamp=timestamp)
        )

    def _remember_task(self, tool_id: Any, tool_input: dict) -> None:
        if isinstance(tool_id, str):
            prompt = tool_input.get("prompt")
            key = _prompt_key(prompt) if isinstance(prompt, str) and prompt else None
            self.tasks[tool_id] = [key, tool_input.get("subagent_type"), tool_input.get("description")]

    def _user(self, rec: dict, line: int) -> None:
        uuid = rec.get("uuid")
        msg = rec.get("message")
        if not uuid or not isinstance(msg, dict):
            self._skip(rec)
            return
        t = self._envelope(rec, uuid)
        content = msg.get("content")
        blocks: list[Block] = []
        if isinstance(content, str):
            blocks.append(Block("text", content))
        elif isinstance(content, list):
            for b in content:
                if type(b) is not dict:
                    continue
                kind = b.get("type")
                if kind == "tool_result":
                    text = _flatten(b.get("content"))
                    if text and text.startswith("<persisted-output>"):
                        text = self._spilled(text)
                    blocks.append(Block("tool_result", text, tool_use_id=b.get("tool_use_id"),
                                        is_error=bool(b.get("is_error"))))
                elif kind == "text":
                    blocks.append(Block("text", b.get("text")))
                elif kind == "image" or kind == "document":
                    source = b.get("source")
                    media = source.get("media_type") if isinstance(source, dict) else None
                    label = "image" if kind == "image" else "document"
                    blocks.append(Block(kind if kind == "image" else "text",
                                        f"[{label} {media}]" if media else f"[{label}]"))
                elif isinstance(b.get("text"), str):
                    blocks.append(Block("text", b["text"]))
        source_type = _classify_user(rec, msg, content)
        if source_type == SOURCE_META or source_type == SOURCE_TYPED:
            self._scan_guidance(t, content)
        result = rec.get("toolUseResult")
        if type(result) is dict and "agentId" in result:
            first = next((b.tool_use_id for b in blocks if b.kind == "tool_result"), None)
            self._link_agent(result.get("agentId"), first)
        self._message(t, rec, uuid, line, USER, blocks, source_type, self._parent(rec))

    def _scan_guidance(self, t: _Thread, content: Any) -> None:
        text = _first_text(content)
        if not text or "CLAUDE" not in text or "Contents of " not in text:
            return
        sections = _claude_md_sections(text)
        if sections:
            t.claude_md = {**(t.claude_md or {}), **sections}

    def _spilled(self, text: str) -> str:
        """Replace a `<persisted-output>` preview with the spilled file, when it is here."""
        start = text.find("saved to: ")
        if start < 0:
            return text
        end = text.find("\n", start)
        where = text[start + 10 : end if end >= 0 else len(text)].strip()
        parts = where.replace("\\", "/").split("/")
        name = parts[-1]
        if not name or name in (".", ".."):
            return text
        here = self.path.parent
        candidates = []
        if self.in_subagents_dir:
            candidates.append(here.parent / "tool-results" / name)
        if self.sid:
            candidates.append(here / self.sid / "tool-results" / name)
        if len(parts) >= 3 and parts[-2] == "tool-results":
            candidates.append(here / parts[-3] / "tool-results" / name)
            candidates.append(here.parent.parent / parts[-3] / "tool-results" / name)
        candidates.append(here / "tool-results" / name)
        for candidate in candidates:
            try:
                return _read_capped(candidate)
            except OSError:
                continue
        return text

    def _system(self, rec: dict, line: int) -> None:
        uuid = rec.get("uuid")
        if not uuid:
            return
        subtype = rec.get("subtype")
        content = rec.get("content")
        parent_key = "parentUuid"
        if subtype == "compact_boundary":
            text, source = content if isinstance(content, str) and content else "Conversation compacted", SOURCE_META
            if rec.get("logicalParentUuid"):
                parent_key = "logicalParentUuid"
        elif subtype == "local_command":
            text, source = content if isinstance(content, str) else "", SOURCE_COMMAND
        elif subtype == "api_error":
            text, source = self._api_error(rec), SOURCE_ERROR
        elif subtype == "stop_hook_summary":
            errors = rec.get("hookErrors")
            if not errors and not rec.get("preventedContinuation"):
                self._skip(rec)
                return
            text = "Stop hook " + ("prevented continuation" if rec.get("preventedContinuation") else "errors")
            if errors:
                text += ":\n" + "\n".join(str(e) for e in errors)
            if rec.get("stopReason"):
                text += f"\nstop reason: {rec['stopReason']}"
            source = SOURCE_META
        elif isinstance(content, str) and content and subtype != "turn_duration":
            source = SOURCE_ERROR if rec.get("level") == "error" else SOURCE_META
            text = content
        else:
            self._skip(rec)
            return
        t = self._envelope(rec, uuid)
        self._message(t, rec, uuid, line, SYSTEM, [Block("text", text)], source,
                      self._parent(rec, parent_key))

    @staticmethod
    def _api_error(rec: dict) -> str:
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

    def _progress(self, rec: dict, line: int) -> None:
        self._skip(rec)
        data = rec.get("data")
        if type(data) is dict and data.get("type") == "agent_progress":
            if self.sid is None and rec.get("sessionId"):
                self._name_main(rec["sessionId"])
            self._link_agent(data.get("agentId"), rec.get("parentToolUseID"))

    def _attachment(self, rec: dict, line: int) -> None:
        self._skip(rec)
        att = rec.get("attachment")
        if type(att) is not dict or att.get("type") == "edited_text_file":
            return
        path, content = att.get("path") or att.get("filename"), att.get("content")
        if isinstance(content, dict):
            path = path or content.get("path")
            content = content.get("content")
        if isinstance(path, str) and path.endswith(".md") and "CLAUDE" in path and isinstance(content, str):
            t = self._thread_for(rec, rec.get("uuid"))
            t.claude_md = {**(t.claude_md or {}), path: content}

    def _metadata(self, rec: dict) -> None:
        kind = rec.get("type")
        t = self.main
        if self.sid is None and self.file_agent is None and rec.get("sessionId"):
            self._name_main(rec["sessionId"])
        if kind == "custom-title":
            t.set_title(rec.get("customTitle"), RANK_CUSTOM)
        elif kind == "ai-title":
            t.set_title(rec.get("aiTitle"), RANK_AI_TITLE)
        elif kind == "summary":
            leaf, summary = rec.get("leafUuid"), rec.get("summary")
            if isinstance(leaf, str) and isinstance(summary, str):
                summaries = t.meta.setdefault("summaries", {})
                if leaf in summaries or len(summaries) < MAX_SUMMARIES:
                    summaries[leaf] = summary
        elif kind == "permission-mode":
            mode = rec.get("permissionMode")
            if mode:
                t.meta["permission_mode"] = mode
        elif kind == "agent-name":
            if rec.get("agentName"):
                t.meta["agent_name"] = rec["agentName"]
        elif kind == "cost-state":
            t.meta["cost"] = {
                "total_cost_usd": rec.get("totalCostUSD"),
                "lines_added": rec.get("totalLinesAdded"),
                "lines_removed": rec.get("totalLinesRemoved"),
                "duration_ms": rec.get("totalDuration"),
            }
        # Other metadata (snapshots, queue operations, modes...) and unknown types: ignored.

    # -- end of parse ---------------------------------------------------------------------
    def _finish(self) -> None:
        main = self.main
        summaries = main.meta.get("summaries")
        if summaries and main.title_rank <= RANK_SUMMARY:
            # A summary describes the conversation ending at its leaf; only one whose leaf is
            # in this file is about this session (most are written into other sessions' files).
            for leaf, summary in summaries.items():
                if leaf in self.uuids:
                    main.set_title(summary, RANK_SUMMARY)
        for t in self.threads.values():
            if t.established and t.native_id and t.snapshot() != t.sent:
                self.out.append(t.info())

    def _save_state(self) -> None:
        main = self.main
        state: dict[str, Any] = {}
        if self.sid is not None:
            state["sid"] = self.sid
        if main.cwd:
            state["cwd"] = main.cwd
        if main.title:
            state["title"], state["title_rank"] = main.title, main.title_rank
        if main.meta:
            state["meta"] = main.meta
        if main.established:
            state["est"] = True
        if self.side_root:
            state["side"] = dict(list(self.side_root.items())[-KEEP_SIDECHAIN:])
        if self.current_root:
            state["root"] = self.current_root
        if self.skipped:
            state["skip"] = dict(list(self.skipped.items())[-KEEP_SKIPPED:])
        if self.tasks:
            state["tasks"] = dict(list(self.tasks.items())[-KEEP_TASKS:])
        self.cursor.state = state
