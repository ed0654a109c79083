"""Helpers shared by the report tests (this module holds no tests).

`UsageFormat` is a tiny JSONL transcript format whose lines carry billed tokens, so that tests
can build stores with known agent usage; `TwoFaced` is a fake observer whose answer is read from
the thread text, so two of them can be made to agree or disagree on chosen checkpoints.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from auditor.audit.observe import ObserveResult, ObserverUsage
from auditor.hookspecs import hookimpl
from auditor.model import Block, Message, ThreadInfo, Usage, parse_time
from auditor.transcript_reading import read_jsonl

# Gate on counts only: the threads written here end with a failing test and a claim, which a
# signal would send to the observer whatever the counts.
COUNTS_ONLY = {"audit_on_signals": []}


class UsageFormat:
    """Lines: {"usage": 1, "thread", "id", "role", "text"?, "tools"?: [[name, is_edit, input?]], "source"?,
    "model"?, "ts"?, "tokens"?: [input, output, cache_read, cache_write], "parent"?, "cwd"?}."""

    name, agent, appendable = "usage-script", "script", True

    def detect(self, path, head):
        return head.startswith(b'{"usage"')

    def parse(self, path, cursor):
        for item in read_jsonl(path, cursor):
            if not isinstance(item, tuple):
                yield item
                continue
            line, obj = item
            parent = obj.get("parent")
            yield ThreadInfo(
                obj["thread"],
                "script",
                cwd=obj.get("cwd", "/work/demo"),
                parent_native_id=parent,
                is_sidechain=bool(parent),
            )
            blocks = [Block("text", text=obj["text"])] if obj.get("text") else []
            for i, (name, edit, *given) in enumerate(obj.get("tools", [])):
                blocks.append(
                    Block(
                        "tool_use",
                        tool_name=name,
                        tool_use_id=f"{obj['id']}-{i}",
                        tool_input=given[0] if given else {"path": "a.py"},
                        is_file_edit=edit,
                    )
                )
            if obj.get("result") is not None:
                blocks.append(Block("tool_result", text=obj["result"], tool_use_id=obj["for"]))
            ts = parse_time(obj.get("ts"))
            key = obj.get("key", obj["id"]) if obj.get("tokens") else None
            yield Message(
                obj["thread"],
                obj["id"],
                obj["role"],
                seq=line,
                line=line,
                blocks=blocks,
                source_type=obj.get("source", "agent" if obj["role"] == "assistant" else "user"),
                timestamp=ts,
                model=obj.get("model"),
                usage_key=key,
            )
            if obj.get("tokens"):
                yield Usage(obj["thread"], key, obj.get("model"), *obj["tokens"], timestamp=ts)


class UsagePlugin:
    @hookimpl
    def register_formats(self, register):
        register(UsageFormat())


def write_thread(
    path,
    thread: str,
    final_text: str,
    *,
    n_tools: int = 6,
    model: str = "agent-model",
    day: str = "2026-03-02",
    tokens=(100, 50, 1000, 200),
    cwd: str = "/work/demo",
    parent: str | None = None,
    source: str | None = None,
    edit: bool = True,
) -> list[dict]:
    """Append a thread (a task, n tool rounds with one edit, a final claim) billed `tokens` per
    assistant call, one call an hour from 10:00 UTC of `day`; return the lines written."""
    base = {"usage": 1, "thread": thread, "cwd": cwd}
    if parent:
        base["parent"] = parent
    rows = [
        {
            **base,
            "id": f"{thread}-u",
            "role": "user",
            "text": "Fix the parser and run the tests.",
            "ts": f"{day}T09:59:00Z",
        }
    ]
    for i in range(n_tools):
        rows.append(
            {
                **base,
                "id": f"{thread}-a{i}",
                "role": "assistant",
                "tools": [["Edit" if i == 0 and edit else "Bash", i == 0 and edit]],
                "model": model,
                "ts": f"{day}T{10 + i:02d}:00:00Z",
                "tokens": list(tokens),
            }
        )
        rows.append(
            {
                **base,
                "id": f"{thread}-r{i}",
                "role": "user",
                "source": "tool-result",
                "result": "1 failed" if i == n_tools - 1 else "ok",
                "for": f"{thread}-a{i}-0",
                "ts": f"{day}T{10 + i:02d}:00:30Z",
            }
        )
    end = {
        **base,
        "id": f"{thread}-end",
        "role": "assistant",
        "text": final_text,
        "model": model,
        "ts": f"{day}T{10 + n_tools:02d}:00:00Z",
        "tokens": list(tokens),
    }
    if source:
        end["source"] = source
    rows.append(end)
    with open(path, "a") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rows)
    return rows


@dataclass
class TwoFaced:
    """A fake observer that asks for a correction when `mark` is in the rendered thread."""

    name: str
    mark: str
    default_model: str = "fake-1"
    answer: str = "tool"  # tool | none | raise
    calls: int = 0

    def check(self, options):
        return None

    async def observe(self, request, options):
        self.calls += 1
        if self.answer == "raise":
            raise ConnectionError("observer unreachable")
        needs = self.mark in request.user
        args = {"needsCorrection": needs, "message": f"{self.name}: look again" if needs else None}
        usage = ObserverUsage(input=1000, output=40, cached=200, thinking=10)
        name = "course_correct" if self.answer == "tool" else None
        return ObserveResult(
            name, args if name else None, usage, request.model, 0.25, raw={"fake": True}
        )


class ObserversPlugin:
    def __init__(self, *observers):
        self.observers = observers

    @hookimpl
    def register_observers(self, register):
        for o in self.observers:
            register(o)


def price_file(tmp_path, monkeypatch, rates: dict) -> None:
    """Point AUDITOR_PRICES at a file holding `rates` (USD per million tokens)."""
    path = tmp_path / "prices.json"
    path.write_text(json.dumps(rates))
    monkeypatch.setenv("AUDITOR_PRICES", str(path))
