"""mini-swe-agent trajectories (`*.traj.json`): one run of the agent, one thread.

mini-swe-agent talks to its model in plain chat: the model answers with its reasoning and
exactly one shell command in a fenced block (```mswea_bash_command, ```bash in older
versions); mini runs it and sends the output back as the next user message
(`<returncode>0</returncode><output>...</output>`). The trajectory is that message list, bare
(older versions) or as `{info, messages, trajectory_format: "mini-swe-agent-1..."}`.

* the system prompt is harness text, the first user message the task (the typed turn);
* an assistant message with one command block is a `bash` tool call (the block is taken out
  of its text into the call's input); with tool calls of its own (tool-calling models), those;
* the user message after a command is its result (failed when the return code is not 0); a
  user message after an answer without a command is mini's format reminder: harness text;
* the command that ends the run (`echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`, or
  `MINI_SWE_AGENT_FINAL_OUTPUT` in older versions) is no tool call: that message is the run's
  last answer, with what it submitted (the next message, or `info.submission`) as its text.

`info.model_stats` holds the run's cost and API calls (kept in meta); token counts come from
the messages' `extra.response.usage` when the version records it. The model is named in
`info.config.model.model_name`; mini runs any provider's model, so no vendor is declared.
"""

from __future__ import annotations

import re
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
    parse_time,
    read_document,
)

from .shell_edits import shell_edits

AGENT = "mini-swe-agent"
_FORMAT = re.compile(rb'"trajectory_format"\s*:\s*"mini-swe-agent')
_ACTION = re.compile(r"```(?:mswea_bash_command|bash)[ \t]*\n(.*?)\n```", re.S)
_RETURN_CODE = re.compile(r"^\s*<returncode>(-?\d+)</returncode>")
_FINAL = ("COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", "MINI_SWE_AGENT_FINAL_OUTPUT")
# In a bare list: an answer with a command block, and an observation with its return code.
_HEAD_ACTION = re.compile(rb"```(?:mswea_bash_command|bash)\\n")
_HEAD_OBSERVATION = re.compile(rb'"content"\s*:\s*"\s*<returncode>-?\d+</returncode>')


def looks_like_mini(head: bytes) -> bool:
    """True for the opening of a mini-swe-agent trajectory (read by the generic chat format
    too, which leaves it to this one)."""
    body = head.lstrip()
    if body.startswith(b"{"):
        return bool(_FORMAT.search(body))
    return (
        body.startswith(b"[")
        and bool(_HEAD_ACTION.search(body))
        and bool(_HEAD_OBSERVATION.search(body))
    )


def _text(content: Any) -> str:
    """A message's text: a string, or the text parts of a list (multimodal messages)."""
    if isinstance(content, str):
        return content
    parts = content if isinstance(content, list) else []
    return "\n\n".join(
        p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)
    )


def _obj(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


class MiniSweAgentFormat:
    """A mini-swe-agent trajectory (a message list, bare or in `{info, messages}`)."""

    name = "mini-swe-agent"
    agent = AGENT
    appendable = False  # written whole at the end of each step
    detect_priority = 10

    def detect(self, path: Path, head: bytes) -> bool:
        return path.suffix == ".json" and looks_like_mini(head)

    def parse(self, path: Path, cursor: Cursor) -> Iterator[Record]:
        doc, problem = read_document(path)
        if problem is not None:
            yield problem
            return
        cursor.offset, cursor.line = path.stat().st_size, 0
        info = _obj(doc.get("info")) if isinstance(doc, dict) else {}
        messages = doc.get("messages") if isinstance(doc, dict) else doc
        if not isinstance(messages, list):
            yield Problem(
                "not a mini-swe-agent trajectory: expected a list of messages, or an object "
                "with a 'messages' list"
            )
            return
        thread = path.name.removesuffix(".json").removesuffix(".traj")
        config = _obj(info.get("config"))
        model = _obj(config.get("model")).get("model_name")
        model = model if isinstance(model, str) else None
        stats = _obj(info.get("model_stats"))
        meta = {
            k: v
            for k, v in (
                ("exit_status", info.get("exit_status")),
                ("api_calls", stats.get("api_calls")),
                ("instance_cost", stats.get("instance_cost")),
                ("mini_version", info.get("mini_version")),
            )
            if v is not None
        }
        yield ThreadInfo(thread, AGENT, model=model, meta=meta or None)
        run = _Run(thread, model, info, messages)
        yield from each_record(enumerate(messages), run.read, "message", numbered=True)


class _Run:
    """The messages of one run, read in order: what the last answer asked for is remembered."""

    def __init__(self, thread: str, model: str | None, info: dict, messages: list):
        self.thread, self.model, self.info, self.messages = thread, model, info, messages
        self.pending: list[str] = []  # calls waiting for their observation
        self.task_seen = False
        self.submitted = False

    def read(self, seq: int, msg: dict) -> Iterator[Record]:
        role, native = msg.get("role"), f"m{seq}"
        extra = _obj(msg.get("extra"))
        stamp = extra.get("timestamp")  # seconds since the epoch
        ts = parse_time(stamp * 1000) if isinstance(stamp, (int, float)) else None
        if role == "assistant":
            yield from self._answer(seq, native, msg, extra, ts)
            return
        if role not in ("system", "user", "tool"):
            yield Problem(f"message {seq} has no known role ({role!r}); skipped")
            return
        text = _text(msg.get("content"))
        if self.submitted:
            return  # what the run submitted: already the text of its last answer
        if role == "tool" or (role == "user" and self.pending):
            call = msg.get("tool_call_id") if role == "tool" else None
            call = str(call) if call else (self.pending[0] if self.pending else f"{native}:call")
            if call in self.pending:
                self.pending.remove(call)
            if role == "user":
                self.pending.clear()  # one observation answers the whole action
            code = _RETURN_CODE.match(text)
            failed = code is not None and int(code.group(1)) != 0
            block = Block("tool_result", text=text, tool_use_id=call, is_error=failed)
            yield Message(
                self.thread,
                native,
                TOOL if role == "tool" else USER,
                seq,
                [block],
                source_type=SOURCE_TOOL_RESULT,
                timestamp=ts,
            )
            return
        if role == "user" and not self.task_seen:
            self.task_seen, source = True, SOURCE_TYPED
        else:
            source = SOURCE_META  # the system prompt, mini's reminders of its format
        yield Message(
            self.thread,
            native,
            SYSTEM if role == "system" else USER,
            seq,
            [Block("text", text=text)] if text else [],
            source_type=source,
            timestamp=ts,
        )

    def _answer(self, seq, native, msg, extra, ts) -> Iterator[Record]:
        text = _text(msg.get("content"))
        usage_key = None
        response = _obj(extra.get("response"))
        usage = _obj(response.get("usage"))
        if usage:
            details = _obj(usage.get("prompt_tokens_details"))
            cached = int(details.get("cached_tokens") or usage.get("cache_read_input_tokens") or 0)
            written = int(usage.get("cache_creation_input_tokens") or 0)
            usage_key = f"{native}:usage"
            yield Usage(
                self.thread,
                usage_key,
                model=response.get("model") or self.model,
                input_tokens=max(0, int(usage.get("prompt_tokens") or 0) - cached - written),
                cache_read_tokens=cached,
                cache_write_tokens=written,
                output_tokens=int(usage.get("completion_tokens") or 0),
                timestamp=ts,
            )
        blocks: list[Block] = []
        calls = msg.get("tool_calls") if isinstance(msg.get("tool_calls"), list) else []
        actions = _ACTION.findall(text)
        final = False
        if calls:
            if text:
                blocks.append(Block("text", text=text))
            for n, call in enumerate(c for c in calls if isinstance(c, dict)):
                fn = _obj(call.get("function"))
                call_id = str(call.get("id") or f"{native}:call{n}")
                arguments = fn.get("arguments")
                block = Block(
                    "tool_use",
                    tool_name=str(fn.get("name") or "bash"),
                    tool_use_id=call_id,
                    tool_input={"arguments": arguments},
                )
                command = arguments if isinstance(arguments, str) else ""
                block.is_file_edit, block.edited_paths = shell_edits(command)
                blocks.append(block)
                self.pending.append(call_id)
        elif len(actions) == 1:  # mini runs an answer's command only when it is the one
            command = actions[0].strip()
            said = _ACTION.sub("", text).strip()
            if said:
                blocks.append(Block("text", text=said))
            if (
                command.split("\n", 1)[0].split("&&")[0].strip().removeprefix("echo ").strip()
                in _FINAL
            ):
                final = True
                blocks.append(Block("text", text=f"Submitted with: {command}"))
                blocks.append(Block("text", text=self._submission(seq)))
            else:
                call_id = f"{native}:bash"
                block = Block(
                    "tool_use",
                    tool_name="bash",
                    tool_use_id=call_id,
                    tool_input={"command": command},
                )
                block.is_file_edit, block.edited_paths = shell_edits(command)
                blocks.append(block)
                self.pending = [call_id]
        elif text:
            blocks.append(Block("text", text=text))
        self.submitted = final
        yield Message(
            self.thread,
            native,
            ASSISTANT,
            seq,
            [b for b in blocks if b.kind != "text" or b.text],
            source_type=SOURCE_AGENT,
            timestamp=ts,
            model=self.model,
            usage_key=usage_key,
            stop_reason="submitted" if final else None,
        )

    def _submission(self, seq: int) -> str:
        after = self.messages[seq + 1] if seq + 1 < len(self.messages) else None
        if isinstance(after, dict) and after.get("role") == "user":
            return _text(after.get("content"))
        submission = self.info.get("submission")
        return submission if isinstance(submission, str) else ""


@hookimpl
def register_formats(register) -> None:
    register(MiniSweAgentFormat())
