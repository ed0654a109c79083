"""OpenHands trajectories: the event stream of one conversation, saved as a JSON list.

OpenHands records a conversation as events `{id, timestamp, source: user|agent|environment,
message, action | observation, args | content + extras, cause?, tool_call_metadata?}`; a
trajectory (the UI's "export trajectory", `save_trajectory_path` in its config, the files its
replay tests use) is that list in one JSON file. One file is one thread, named after the file.

* an `action` of the user (`message`) is a typed turn;
* an agent `message` or `finish` action is the agent's answer (`finish` ends its work);
* any other agent action (`run`, `edit`, `read`, `browse`, `run_ipython`, ...) is a tool call
  the model made: its `args.thought` is the text said before it, `tool_call_metadata` names
  the function and the call id, and `model_response` carries the model and its token usage
  (one bill per model response, however many calls it made);
* an `observation` answers the action its `cause` names: the tool's result (`error`
  observations, and commands that exit non-zero, are failed results);
* the environment's events (agent state changes, `null` observations) are left out.

OpenHands runs any provider's model (through LiteLLM), so the format declares no vendor.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from auditor.api import (
    ASSISTANT,
    SOURCE_AGENT,
    SOURCE_TOOL_RESULT,
    SOURCE_TYPED,
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

AGENT = "openhands"
# A trajectory opens with its first event: an id, its time and who it came from.
_HEAD = re.compile(
    rb'^\[\s*\{\s*"id"\s*:\s*\d+\s*,\s*"timestamp"\s*:\s*"[^"]*"\s*,\s*"source"\s*:\s*'
    rb'"(user|agent|environment)"'
)
_ANSWERS = {"message", "finish"}  # agent actions that are what it says, not a tool call
_QUIET = {"null", "agent_state_changed", "change_agent_state", "recall"}
_EDIT_ACTIONS = {"edit", "write"}


def _usage(thread: str, response: dict) -> Usage | None:
    """A LiteLLM response's usage: `prompt_tokens` includes both cache reads and writes."""
    u = response.get("usage")
    if not isinstance(u, dict) or not response.get("id"):
        return None
    details = u.get("prompt_tokens_details") or {}
    read = int(u.get("cache_read_input_tokens") or details.get("cached_tokens") or 0)
    write = int(u.get("cache_creation_input_tokens") or 0)
    return Usage(
        thread,
        f"response:{response['id']}",
        model=response.get("model"),
        input_tokens=max(0, int(u.get("prompt_tokens") or 0) - read - write),
        cache_read_tokens=read,
        cache_write_tokens=write,
        output_tokens=int(u.get("completion_tokens") or 0),
    )


def _edit(action: str, args: dict) -> tuple[bool, list[str] | None]:
    if action in _EDIT_ACTIONS:
        path = args.get("path")
        return True, [path] if isinstance(path, str) and path else None
    if action == "run" and isinstance(args.get("command"), str):
        return shell_edits(args["command"])
    return False, None


class OpenHandsFormat:
    """An OpenHands trajectory (a JSON list of events)."""

    name = "openhands"
    agent = AGENT
    appendable = False  # the list is written whole
    detect_priority = 10

    def detect(self, path: Path, head: bytes) -> bool:
        return path.suffix == ".json" and bool(_HEAD.match(head.lstrip()))

    def parse(self, path: Path, cursor: Cursor) -> Iterator[Record]:
        doc, problem = read_document(path)
        if problem is not None:
            yield problem
            return
        cursor.offset, cursor.line = path.stat().st_size, 0
        if not isinstance(doc, list):
            yield Problem("not an OpenHands trajectory: expected a JSON list of events")
            return
        thread = path.stem
        yield ThreadInfo(thread, AGENT)
        calls: dict[Any, str] = {}  # event id of an action -> its tool call id
        billed: set[str] = set()
        yield from each_record(
            enumerate(doc),
            lambda index, event: self._event(thread, index, event, calls, billed),
            "event",
            numbered=True,
        )

    def _event(self, thread, seq, event, calls, billed) -> Iterator[Record]:
        source, ts = event.get("source"), parse_time(event.get("timestamp"))
        native = str(event.get("id", seq))
        action, observation = event.get("action"), event.get("observation")
        args = event.get("args") if isinstance(event.get("args"), dict) else {}
        meta = event.get("tool_call_metadata")
        response = meta.get("model_response") if isinstance(meta, dict) else None
        model = response.get("model") if isinstance(response, dict) else None
        if action and source == "user" and action == "message":
            text = args.get("content") or event.get("message") or ""
            blocks = [Block("text", text=text)] if text else []
            blocks += [Block("image") for _ in args.get("image_urls") or []]
            yield Message(thread, native, USER, seq, blocks, source_type=SOURCE_TYPED, timestamp=ts)
            return
        if action and source == "agent" and action not in _QUIET:
            usage_key = None
            if isinstance(response, dict):
                usage = _usage(thread, response)
                if usage is not None:
                    usage_key = usage.key
                    if usage.key not in billed:
                        billed.add(usage.key)
                        yield usage
            if action in _ANSWERS:
                text = event.get("message") or args.get("content") or args.get("final_thought")
                blocks = [Block("text", text=text)] if text else []
            else:
                thought = args.get("thought")
                blocks = [Block("text", text=thought)] if thought else []
                meta = meta if isinstance(meta, dict) else {}
                call_id = str(meta.get("tool_call_id") or f"event-{native}")
                calls[event.get("id")] = call_id
                name = meta.get("function_name")
                tool_input = {k: v for k, v in args.items() if k != "thought"}
                block = Block(
                    "tool_use", tool_name=name or action, tool_use_id=call_id, tool_input=tool_input
                )
                block.is_file_edit, block.edited_paths = _edit(action, args)
                blocks.append(block)
            yield Message(
                thread,
                native,
                ASSISTANT,
                seq,
                blocks,
                source_type=SOURCE_AGENT,
                timestamp=ts,
                model=model,
                usage_key=usage_key,
                stop_reason="finish" if action == "finish" else None,
            )
            return
        if observation and observation not in _QUIET and event.get("cause") in calls:
            extras = event.get("extras")
            metadata = extras.get("metadata") if isinstance(extras, dict) else None
            exit_code = metadata.get("exit_code") if isinstance(metadata, dict) else None
            failed = observation == "error" or (isinstance(exit_code, int) and exit_code != 0)
            text = event.get("content") or event.get("message") or ""
            block = Block(
                "tool_result", text=text, tool_use_id=calls[event["cause"]], is_error=failed
            )
            yield Message(
                thread, native, TOOL, seq, [block], source_type=SOURCE_TOOL_RESULT, timestamp=ts
            )


@hookimpl
def register_formats(register) -> None:
    register(OpenHandsFormat())
