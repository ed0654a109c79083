"""Helpers for audit tests: build stored messages, and a fake observer registered through the real hook."""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass

from auditor.audit.observe import ObserveResult, ObserverUsage
from auditor.hookspecs import hookimpl
from auditor.model import Block
from auditor.store.threads import StoredMessage


def quiet(line: str) -> None:
    """An `announce` that prints nothing."""


def message_id(prefix: str, *content) -> str:
    """A native id made from the content: the same on every run, whatever the hash seed."""
    return prefix + hashlib.sha256(repr(content).encode()).hexdigest()[:8]


def user(text: str, source: str = "user") -> StoredMessage:
    return StoredMessage(
        0, message_id("u", text), "user", source, None, None, 0, [Block("text", text=text)]
    )


def agent(text: str = "", tools: list[tuple[str, bool]] = ()) -> StoredMessage:
    blocks = [Block("text", text=text)] if text else []
    for i, (name, edit) in enumerate(tools):
        blocks.append(
            Block("tool_use", tool_name=name, tool_use_id=f"c{i}", tool_input={}, is_file_edit=edit)
        )
    return StoredMessage(
        0, message_id("a", text, tuple(tools)), "assistant", "agent", None, "m", 0, blocks
    )


def result(text: str = "ok", error: bool = False) -> StoredMessage:
    return StoredMessage(
        0,
        message_id("r", text),
        "user",
        "tool-result",
        None,
        None,
        0,
        [Block("tool_result", text=text, tool_use_id="c0", is_error=error)],
    )


def numbered(messages: list[StoredMessage]) -> list[StoredMessage]:
    for i, m in enumerate(messages):
        m.native_id = f"{m.native_id}-{i}"
        m.seq = i
    return messages


@dataclass
class FakeObserver:
    """Says "needs correction" when the rendered thread contains `trigger`; counts its calls."""

    name: str = "fake"
    default_model: str = "fake-1"
    trigger: str = "all tests pass"
    answer: str = "tool"  # tool | none | wrong-tool | bad-args | raise
    delay: float = 0.0
    calls: int = 0

    def check(self, options):
        return None

    async def observe(self, request, options):
        self.calls += 1
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.answer == "raise":
            raise ConnectionError("observer unreachable")
        needs = self.trigger in request.user
        args = {
            "needsCorrection": needs,
            "message": "the tests failed, look again" if needs else None,
        }
        name = {"tool": "course_correct", "none": None, "wrong-tool": "other_tool"}.get(
            self.answer, "course_correct"
        )
        if self.answer == "bad-args":
            args = {"needsCorrection": "maybe"}
        usage = ObserverUsage(input=len(request.user) // 4, output=20, cached=0, thinking=5)
        return ObserveResult(
            name, args if name else None, usage, request.model, self.delay, raw={"fake": True}
        )


class FakeObserverPlugin:
    def __init__(self, observer: FakeObserver):
        self.observer = observer

    @hookimpl
    def register_observers(self, register):
        register(self.observer)


class ScriptFormat:
    """A tiny JSONL format for tests: {"thread", "id", "role", "text", "tools": [[name, is_edit]], "source"}."""

    name, agent, appendable = "script", "script", True

    def detect(self, path, head):
        return head.startswith(b'{"script"')

    def parse(self, path, cursor):
        from auditor.model import Message, ThreadInfo
        from auditor.transcript_reading import read_jsonl

        for item in read_jsonl(path, cursor):
            if not isinstance(item, tuple):
                yield item
                continue
            line, obj = item
            yield ThreadInfo(obj["thread"], "script", cwd="/work/demo")
            blocks = [Block("text", text=obj["text"])] if obj.get("text") else []
            for i, (name, edit) in enumerate(obj.get("tools", [])):
                blocks.append(
                    Block(
                        "tool_use",
                        tool_name=name,
                        tool_use_id=f"{obj['id']}-{i}",
                        tool_input={"path": "a.py"},
                        is_file_edit=edit,
                    )
                )
            if obj.get("result") is not None:
                blocks.append(
                    Block(
                        "tool_result",
                        text=obj["result"],
                        tool_use_id=obj["for"],
                        is_error=obj.get("error"),
                    )
                )
            yield Message(
                obj["thread"],
                obj["id"],
                obj["role"],
                seq=line,
                line=line,
                blocks=blocks,
                source_type=obj.get("source", "agent" if obj["role"] == "assistant" else "user"),
            )


class ScriptPlugin:
    @hookimpl
    def register_formats(self, register):
        register(ScriptFormat())


def write_script_thread(path, thread: str, final_text: str, n_tools: int = 6) -> None:
    """Write a thread: a task, n tool rounds with one edit, and a final claim."""
    import json

    rows = [
        {
            "script": 1,
            "thread": thread,
            "id": f"{thread}-u",
            "role": "user",
            "text": "Fix the parser and run the tests.",
        }
    ]
    for i in range(n_tools):
        rows.append(
            {
                "script": 1,
                "thread": thread,
                "id": f"{thread}-a{i}",
                "role": "assistant",
                "tools": [["Edit" if i == 0 else "Bash", i == 0]],
            }
        )
        rows.append(
            {
                "script": 1,
                "thread": thread,
                "id": f"{thread}-r{i}",
                "role": "user",
                "source": "tool-result",
                "result": "1 failed, 3 passed" if i == n_tools - 1 else "ok",
                "for": f"{thread}-a{i}-0",
                "error": i == n_tools - 1,
            }
        )
    rows.append(
        {
            "script": 1,
            "thread": thread,
            "id": f"{thread}-end",
            "role": "assistant",
            "text": final_text,
        }
    )
    with open(path, "a") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rows)
