"""Reading one Claude Code JSONL file from a cursor (see `auditor_plugins.claude_code`)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson

from auditor.api import (
    ASSISTANT,
    CORRECTION_MARKER,
    SOURCE_AGENT,
    SOURCE_COMMAND,
    SOURCE_COURSE_CORRECTION,
    SOURCE_ERROR,
    SOURCE_META,
    SOURCE_TYPED,
    SYSTEM,
    USER,
    Block,
    Cursor,
    Message,
    Record,
    ThreadInfo,
    Usage,
    each_record,
    parse_time,
    read_jsonl,
)

from .claude_code_content import (
    api_error_text,
    classify_user,
    claude_md_sections,
    first_text,
    flatten,
    spilled,
)
from .claude_code_edits import tool_edits
from .claude_code_threads import (
    AGENT,
    RANK_DESCRIPTION,
    ThreadState,
    count_of,
    prompt_key,
    text_of,
)

SYNTHETIC = "<synthetic>"
KEEP_SIDECHAIN = 32  # inline-sidechain uuid -> root entries carried in cursor.state
KEEP_SKIPPED = 16  # skipped-record uuid -> parent entries carried in cursor.state
KEEP_TASKS = 8  # pending Task prompts carried in cursor.state
UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def _then_raise(given: list[Record], exc: Exception) -> Iterator[Record]:
    """The records a failing record gave, then its error."""
    yield from given
    raise exc


class Parser:
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
        self.threads: dict[str, ThreadState] = {}
        # The file's own thread: created now so that metadata lines before the first
        # conversation line (summaries, titles) have somewhere to go.
        self.main = ThreadState("")
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
        if t.agent_type is None and self.file_agent is not None:
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

    def _thread_for(self, rec: dict, uuid: str | None) -> ThreadState:
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
            t = self.threads[tid] = ThreadState(tid, parent=self.sid, sidechain=True)
            t.cwd = self.main.cwd
            if not agent_id:
                self._link_inline(t, rec)
        return t

    def _sidechain_root(self, rec: dict, uuid: str | None) -> str:
        parent = rec.get("parentUuid")
        if type(parent) is not str:
            parent = None
        root = self.side_root.get(parent) if parent else None
        if root is None:
            # A root record (parentUuid null) starts a sidechain; a dangling parent continues
            # the current one.
            root = (self.current_root if parent else None) or uuid or "unknown"
        if uuid:
            self.side_root[uuid] = root
        self.current_root = root
        return root

    def _link_inline(self, t: ThreadState, rec: dict) -> None:
        """Link an inline sidechain to the Task call whose prompt it starts with."""
        msg = rec.get("message")
        text = first_text(msg.get("content")) if isinstance(msg, dict) else None
        if not text:
            return
        key = prompt_key(text)
        for tool_id, (task_key, kind, desc) in self.tasks.items():
            if task_key == key:
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

    def _establish(self, t: ThreadState) -> None:
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

        def read(line: int, rec: dict) -> Iterable[Record]:
            # The handlers put what a record gives in `out`, handed on as a list (a generator
            # per record cost more); a record that fails keeps what it gave before failing,
            # reported after it.
            kind = rec.get("type")
            handler = handlers.get(kind) if type(kind) is str else None
            try:
                if handler is not None:
                    handler(rec, line)
                else:
                    self._metadata(rec)
            except Exception as exc:  # noqa: BLE001 - raised again, after what it gave
                given = out[:]
                out.clear()
                return _then_raise(given, exc)
            if not out:
                return ()  # most progress and metadata records give nothing
            given = out[:]
            out.clear()
            return given

        try:
            yield from each_record(read_jsonl(self.path, self.cursor), read, "Claude Code record")
            self._finish()
            yield from out
            out.clear()
        finally:
            self._save_state()

    def _parent(self, rec: dict, key: str = "parentUuid") -> str | None:
        parent = rec.get(key)
        if type(parent) is not str:
            return None
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
        if type(uuid) is str and uuid:
            parent = rec.get("parentUuid")
            self.skipped[uuid] = parent if type(parent) is str else None
            if rec.get("isSidechain") and self.file_agent is None and not rec.get("agentId"):
                self._sidechain_root(rec, uuid)

    def _message(
        self,
        t: ThreadState,
        rec: dict,
        uuid: str,
        line: int,
        role: str,
        blocks: list,
        source_type: str,
        parent: str | None = None,
        timestamp=None,
        model: str | None = None,
        usage_key: str | None = None,
        stop_reason: str | None = None,
    ) -> None:
        if not t.established or t.sent is None:
            self._establish(t)
        self.uuids.add(uuid)
        # The fields in the order `Message` declares them: made once per message, and keyword
        # arguments cost a dataclass twice as much.
        self.out.append(
            Message(
                t.native_id,  # thread
                uuid,  # native_id
                role,
                line,  # seq
                blocks,
                source_type,
                timestamp or parse_time(rec.get("timestamp")),
                model,
                parent,  # parent_id
                usage_key,
                stop_reason,
                bool(rec.get("isSidechain")),  # is_sidechain
                line,
            )
        )

    def _envelope(self, rec: dict, uuid: str) -> ThreadState:
        t = self._thread_for(rec, uuid)
        t.envelope(rec)
        if t is self.main:
            meta = t.meta
            slug, entrypoint = rec.get("slug"), rec.get("entrypoint")
            if slug and "slug" not in meta:
                meta["slug"] = slug
            if entrypoint and "entrypoint" not in meta:
                meta["entrypoint"] = entrypoint
            mode = rec.get("permissionMode")
            if mode and meta.get("permission_mode") != mode:
                meta["permission_mode"] = mode
        return t

    def _assistant(self, rec: dict, line: int) -> None:
        uuid = rec.get("uuid")
        msg = rec.get("message")
        if type(uuid) is not str or not uuid or type(msg) is not dict:
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
                    blocks.append(Block("text", text_of(b.get("text"))))
                elif kind == "tool_use" or kind == "server_tool_use":
                    name, tool_input = b.get("name"), b.get("input")
                    is_edit, paths = tool_edits(name, tool_input)
                    tool_id = text_of(b.get("id"))
                    blocks.append(
                        Block(
                            "tool_use",
                            None,
                            text_of(name),
                            tool_id,
                            tool_input,
                            None,
                            is_edit,
                            paths,
                        )
                    )
                    if (name == "Task" or name == "Agent") and isinstance(tool_input, dict):
                        self._remember_task(tool_id, tool_input)
                elif kind == "thinking":
                    blocks.append(Block("thinking", text_of(b.get("thinking")) or None))
                elif kind == "redacted_thinking":
                    blocks.append(Block("thinking", None))
                elif b.get("tool_use_id"):  # server tool results (web search...)
                    blocks.append(
                        Block(
                            "tool_result",
                            flatten(b.get("content")),
                            tool_use_id=text_of(b["tool_use_id"]),
                            is_error=bool(b.get("is_error")),
                        )
                    )
                elif isinstance(b.get("text"), str):
                    blocks.append(Block("text", b["text"]))
        usage_key = None
        usage = msg.get("usage")
        timestamp = parse_time(rec.get("timestamp"))
        if not synthetic:
            if model and t.model is None:
                t.model = model
            usage_key = text_of(msg.get("id") or rec.get("requestId")) or uuid
            if isinstance(usage, dict):
                self._usage(t, usage_key, model, usage, timestamp)
        source = SOURCE_ERROR if synthetic or rec.get("isApiErrorMessage") else SOURCE_AGENT
        self._message(
            t,
            rec,
            uuid,
            line,
            ASSISTANT,
            blocks,
            source,
            self._parent(rec),
            timestamp,
            model=text_of(model),
            usage_key=usage_key,
            stop_reason=text_of(msg.get("stop_reason")),
        )

    def _usage(self, t: ThreadState, key: str, model: Any, usage: dict, timestamp) -> None:
        details = usage.get("output_tokens_details")
        values = (
            count_of(usage.get("input_tokens")),
            count_of(usage.get("output_tokens")),
            count_of(usage.get("cache_read_input_tokens")),
            count_of(usage.get("cache_creation_input_tokens")),
            count_of(details.get("thinking_tokens")) if type(details) is dict else 0,
        )
        if self.last_usage == (t.native_id, key, values):
            return  # a streamed copy of the same bill
        self.last_usage = (t.native_id, key, values)
        self.out.append(Usage(t.native_id, key, text_of(model), *values, timestamp=timestamp))

    def _remember_task(self, tool_id: Any, tool_input: dict) -> None:
        if isinstance(tool_id, str):
            prompt = tool_input.get("prompt")
            key = prompt_key(prompt) if isinstance(prompt, str) and prompt else None
            self.tasks[tool_id] = [
                key,
                text_of(tool_input.get("subagent_type")),
                text_of(tool_input.get("description")),
            ]

    def _user(self, rec: dict, line: int) -> None:
        uuid = rec.get("uuid")
        msg = rec.get("message")
        if type(uuid) is not str or not uuid or type(msg) is not dict:
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
                    text = flatten(b.get("content"))
                    if text and text.startswith("<persisted-output>"):
                        text = spilled(text, self.path, self.sid, self.in_subagents_dir)
                    blocks.append(
                        Block(
                            "tool_result",
                            text,
                            tool_use_id=text_of(b.get("tool_use_id")),
                            is_error=bool(b.get("is_error")),
                        )
                    )
                elif kind == "text":
                    blocks.append(Block("text", text_of(b.get("text"))))
                elif kind == "image" or kind == "document":
                    source = b.get("source")
                    media = text_of(source.get("media_type")) if isinstance(source, dict) else None
                    label = "image" if kind == "image" else "document"
                    blocks.append(
                        Block(
                            kind if kind == "image" else "text",
                            f"[{label} {media}]" if media else f"[{label}]",
                        )
                    )
                elif isinstance(b.get("text"), str):
                    blocks.append(Block("text", b["text"]))
        source_type = classify_user(rec, msg, content)
        if source_type == SOURCE_META or source_type == SOURCE_TYPED:
            self._scan_guidance(t, content)
        result = rec.get("toolUseResult")
        if type(result) is dict and "agentId" in result:
            first = next((b.tool_use_id for b in blocks if b.kind == "tool_result"), None)
            self._link_agent(result.get("agentId"), first)
        self._message(t, rec, uuid, line, USER, blocks, source_type, self._parent(rec))

    def _scan_guidance(self, t: ThreadState, content: Any) -> None:
        text = first_text(content)
        if not text or "CLAUDE" not in text or "Contents of " not in text:
            return
        sections = claude_md_sections(text)
        if sections:
            t.claude_md = {**(t.claude_md or {}), **sections}

    def _system(self, rec: dict, line: int) -> None:
        uuid = rec.get("uuid")
        if type(uuid) is not str or not uuid:
            return
        subtype = rec.get("subtype")
        content = rec.get("content")
        parent_key = "parentUuid"
        if subtype == "compact_boundary":
            text, source = (
                content if isinstance(content, str) and content else "Conversation compacted",
                SOURCE_META,
            )
            if rec.get("logicalParentUuid"):
                parent_key = "logicalParentUuid"
        elif subtype == "local_command":
            text, source = content if isinstance(content, str) else "", SOURCE_COMMAND
        elif subtype == "api_error":
            text, source = api_error_text(rec), SOURCE_ERROR
        elif subtype == "stop_hook_summary":
            errors = rec.get("hookErrors")
            if not errors and not rec.get("preventedContinuation"):
                self._skip(rec)
                return
            text = "Stop hook " + (
                "prevented continuation" if rec.get("preventedContinuation") else "errors"
            )
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
        self._message(
            t, rec, uuid, line, SYSTEM, [Block("text", text)], source, self._parent(rec, parent_key)
        )

    def _progress(self, rec: dict, line: int) -> None:
        self._skip(rec)
        data = rec.get("data")
        if type(data) is dict and data.get("type") == "agent_progress":
            if self.sid is None and type(rec.get("sessionId")) is str and rec["sessionId"]:
                self._name_main(rec["sessionId"])
            self._link_agent(data.get("agentId"), rec.get("parentToolUseID"))

    def _attachment(self, rec: dict, line: int) -> None:
        att = rec.get("attachment")
        if type(att) is dict and att.get("type") == "hook_additional_context":
            # A hook's additionalContext, read by Claude with a tool's result: auditor's own
            # mid-turn correction when it carries the marker (so no audit follows it).
            content = att.get("content")
            parts = content if isinstance(content, list) else [content]
            text = "\n".join(p for p in parts if isinstance(p, str))
            uuid = rec.get("uuid")
            if CORRECTION_MARKER in text and type(uuid) is str and uuid:
                t = self._envelope(rec, uuid)
                blocks = [Block("text", text)]
                self._message(
                    t, rec, uuid, line, USER, blocks, SOURCE_COURSE_CORRECTION, self._parent(rec)
                )
                return
        self._skip(rec)
        if type(att) is not dict or att.get("type") == "edited_text_file":
            return
        path, content = att.get("path") or att.get("filename"), att.get("content")
        if isinstance(content, dict):
            path = path or content.get("path")
            content = content.get("content")
        loaded = att.get("type") == "nested_memory" or (isinstance(path, str) and "CLAUDE" in path)
        if loaded and isinstance(path, str) and path.endswith(".md") and isinstance(content, str):
            t = self._thread_for(rec, rec.get("uuid"))
            t.claude_md = {**(t.claude_md or {}), path: content}

    def _metadata(self, rec: dict) -> None:
        sid = rec.get("sessionId")
        if self.sid is None and self.file_agent is None and type(sid) is str and sid:
            self._name_main(sid)
        self.main.read_metadata(rec)

    # -- end of parse ---------------------------------------------------------------------
    def _finish(self) -> None:
        self.main.title_from_summaries(self.uuids)
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
