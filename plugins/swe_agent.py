"""SWE-agent trajectories (`.traj`): one run of the agent on one task, one thread.

A `.traj` file is a JSON object `{environment?, trajectory: [...], history: [...], info: {...},
replay_config?}`. `history` is the conversation as the model saw it, and is what is read:
`{role: system|user|assistant|tool, content, agent, thought?, action?, tool_calls?,
tool_call_ids?, is_demo?, message_type?}`. `trajectory` repeats each step (action, observation,
thought) and is not read again.

* The first user message that is not a demonstration is the task (the issue): the typed turn.
  Demonstrations (`is_demo`) and the system prompt are harness text.
* An assistant message's `action` is the command it ran: one tool call, named after the
  command's first word (`edit`, `open`, `find_file`, `submit`...) or, with function calling,
  after the function of its `tool_calls`; `thought` is its text.
* The answer to a call is the next `tool` message (function calling) or, in the older layout
  where observations come back as user messages, the next user message.
* `info.model_stats` (`tokens_sent`, `tokens_received`, `api_calls`, `instance_cost`) is the
  run's one token bill; `info.exit_status` and the cost go into the thread's meta.

The model is named only in `replay_config` (newer versions), and SWE-agent runs any
provider's model, so the format declares no vendor.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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
    read_document,
)

from .openai_chat import content_blocks
from .shell_edits import shell_edits

AGENT = "swe-agent"
_HEAD = re.compile(rb'^\{\s*(?:"environment"\s*:\s*"[^"]*"\s*,\s*)?"trajectory"\s*:\s*\[')
# SWE-agent's own commands that change files, and where their path is.
_EDIT_COMMANDS = {"edit", "create", "insert", "append", "edit_file", "write_file"}
_EDITOR_COMMANDS = {"create", "str_replace", "insert", "undo_edit"}
# Commands that end the run rather than call a tool: `submit`, and the exits SWE-agent forces.
_FINAL_COMMANDS = {
    "submit",
    "exit_cost",
    "exit_context",
    "exit_format",
    "exit_error",
    "exit_forfeit",
}


def _obj(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _text(content: Any) -> str:
    return "\n\n".join(b.text or "" for b in content_blocks(content) if b.text)


def _edit(name: str, action: str) -> tuple[bool, list[str] | None]:
    if name == "str_replace_editor":
        try:
            words = shlex.split(action)
        except ValueError:
            words = action.split()
        if len(words) > 2 and words[1] in _EDITOR_COMMANDS:
            return True, [words[2]]
        return False, None
    if name in _EDIT_COMMANDS:
        words = action.split()
        path = words[1] if name == "create" and len(words) > 1 else None
        return True, [path] if path else None
    return shell_edits(action)


def _model(doc: dict) -> str | None:
    config = doc.get("replay_config")
    if isinstance(config, str):
        try:
            config = json.loads(config)
        except ValueError:
            return None
    agent = config.get("agent") if isinstance(config, dict) else None
    model = agent.get("model") if isinstance(agent, dict) else None
    name = model.get("name") if isinstance(model, dict) else None
    return name if isinstance(name, str) else None


class _History:
    """The run's history read in order: the call waiting for its observation is remembered."""

    def __init__(self, thread: str, model: str | None, info: dict):
        self.thread, self.model, self.info = thread, model, info
        self.pending: str | None = None
        self.task_seen = False

    def read(self, seq: int, msg: dict) -> Iterator[Record]:
        thread, model, info = self.thread, self.model, self.info
        if msg.get("role") not in ("system", "user", "assistant", "tool"):
            yield Problem(f"history entry {seq} has no known role; skipped")
            return
        role, native = msg["role"], f"h{seq}"
        if role == "assistant":
            blocks: list[Block] = []
            thought = msg.get("thought") if isinstance(msg.get("thought"), str) else None
            text = thought or _text(msg.get("content"))
            if text:
                blocks.append(Block("text", text=text))
            action = msg.get("action")
            if isinstance(action, str) and action.strip().split()[0] in _FINAL_COMMANDS:
                # The run's end: the agent's last answer, with the patch it submitted.
                submission = info.get("submission")
                if isinstance(submission, str) and submission:
                    blocks.append(Block("text", text=f"Submitted patch:\n{submission}"))
            elif isinstance(action, str) and action.strip():
                calls = msg.get("tool_calls") if isinstance(msg.get("tool_calls"), list) else []
                first = calls[0] if calls and isinstance(calls[0], dict) else {}
                fn = _obj(first.get("function"))
                command = action.strip()
                name = fn.get("name") or command.split()[0]
                self.pending = str(first.get("id") or f"{native}:action")
                block = Block(
                    "tool_use",
                    tool_name=name,
                    tool_use_id=self.pending,
                    tool_input={"command": command},
                )
                block.is_file_edit, block.edited_paths = _edit(command.split()[0], command)
                blocks.append(block)
            yield Message(
                thread,
                native,
                ASSISTANT,
                seq,
                blocks,
                source_type=SOURCE_AGENT,
                model=model,
            )
            return
        text = _text(msg.get("content"))
        if role == "tool" or (role == "user" and self.pending is not None):
            ids = msg.get("tool_call_ids")
            call = ids[0] if isinstance(ids, list) and ids else self.pending
            block = Block("tool_result", text=text, tool_use_id=str(call))
            self.pending = None
            yield Message(
                thread,
                native,
                TOOL if role == "tool" else USER,
                seq,
                [block],
                source_type=SOURCE_TOOL_RESULT,
            )
            return
        if role == "user" and not msg.get("is_demo") and not self.task_seen:
            self.task_seen, source = True, SOURCE_TYPED
        else:
            source = SOURCE_META
        blocks = [Block("text", text=text)] if text else []
        yield Message(
            thread,
            native,
            SYSTEM if role == "system" else USER,
            seq,
            blocks,
            source_type=source,
        )


class SweAgentFormat:
    """A SWE-agent `.traj` trajectory."""

    name = "swe-agent"
    agent = AGENT
    appendable = False  # written whole at the end of each step
    detect_priority = 10

    def detect(self, path: Path, head: bytes) -> bool:
        return path.suffix in (".traj", ".json") and bool(_HEAD.match(head.lstrip()))

    def parse(self, path: Path, cursor: Cursor) -> Iterator[Record]:
        doc, problem = read_document(path)
        if problem is not None:
            yield problem
            return
        cursor.offset, cursor.line = path.stat().st_size, 0
        if not isinstance(doc, dict) or not isinstance(doc.get("history"), list):
            yield Problem("not a SWE-agent trajectory: expected an object with a 'history' list")
            return
        thread = path.name.removesuffix(".json").removesuffix(".traj")
        info = _obj(doc.get("info"))
        stats = _obj(info.get("model_stats"))
        model = _model(doc)
        meta = {
            "exit_status": info.get("exit_status"),
            "api_calls": stats.get("api_calls"),
            "instance_cost": stats.get("instance_cost"),
        }
        yield ThreadInfo(thread, AGENT, model=model, meta=meta)
        history = _History(thread, model, info)
        yield from each_record(
            enumerate(doc["history"]), history.read, "history entry", numbered=True
        )
        if stats.get("tokens_sent") or stats.get("tokens_received"):
            yield Usage(
                thread,
                "model_stats",
                model=model,
                input_tokens=int(stats.get("tokens_sent") or 0),
                output_tokens=int(stats.get("tokens_received") or 0),
            )


@hookimpl
def register_formats(register) -> None:
    register(SweAgentFormat())
