"""Inspect AI evaluation logs: a `.json` log, or a `.eval` log (a zip of JSON members).

An Inspect log is one run of one task against one model. Each sample of the task (each epoch of
it) is a conversation of its own, so each becomes a thread: `EVAL_ID/SAMPLE_ID/EPOCH`.

* `.json`: `{version, status, eval: {eval_id, task, model, ...}, stats, samples: [...]}`.
* `.eval`: `header.json` holds what the JSON log holds outside `samples` (`_journal/start.json`
  while the run is still going), and each sample is a member `samples/ID_epoch_N.json`.

A sample's `messages` are `{id, role: system|user|assistant|tool, content, source?}`; `content`
is a string or a list of parts (`text`, `reasoning`, `image`, ...). An assistant message's
`tool_calls` are `[{id, function: NAME, arguments: {...}}]`; a `tool` message answers one by
`tool_call_id`, with `error: {type, message}` when the call failed. A user message with
`source: "input"` is the sample's input (the task as the dataset states it): it stands for the
person's turn. Any other user message was added by the solver (a "continue" nudge, say) and is
harness text. Messages carry no time: each takes the time of the model call that produced it
(the sample's `model` events), or the last time seen before it. Tokens are the sample's
`model_usage`, one bill per model.

Inspect runs any provider's model, so the format declares no vendor: any observer may audit it.
"""

from __future__ import annotations

import re
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

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

from .openai_chat import content_blocks, edit_tools, tool_edit

AGENT = "inspect-ai"
ROLES = {"system": SYSTEM, "user": USER, "assistant": ASSISTANT, "tool": TOOL}
# The first members of a JSON log, in the order Inspect writes them.
_JSON_HEAD = re.compile(
    rb'^\{\s*"version"\s*:\s*\d+\s*,\s*"status"\s*:\s*"[a-z_]+"\s*,\s*"eval"\s*:\s*\{'
)
# A `.eval` zip names its first member in its first local header (at byte 30).
_ZIP_MEMBERS = (b"_journal/start.json", b"header.json", b"samples/", b"summaries.json")
_SAMPLE_MEMBER = re.compile(r"^samples/.+\.json$")


def _parts(content: Any) -> list[Block]:
    """Inspect's content parts as blocks: its `reasoning` part keeps its text under `reasoning`."""
    if isinstance(content, list):
        content = [
            {"type": "reasoning", "text": p.get("reasoning") or p.get("summary") or ""}
            if isinstance(p, dict) and p.get("type") == "reasoning"
            else p
            for p in content
        ]
    return content_blocks(content)


def _usage(thread: str, model: str, u: Any) -> Usage | None:
    """One model's tokens in a sample. Providers differ on whether `input_tokens` counts the
    cached part: when the total is input + output alone, it does (OpenAI), and is taken out."""
    if not isinstance(u, dict):
        return None
    inp, out = int(u.get("input_tokens") or 0), int(u.get("output_tokens") or 0)
    read = int(u.get("input_tokens_cache_read") or 0)
    write = int(u.get("input_tokens_cache_write") or 0)
    if read and int(u.get("total_tokens") or 0) == inp + out:
        inp -= read
    return Usage(
        thread,
        f"model:{model}",
        model=model.split("/", 1)[-1],  # "openai/gpt-4o-mini": the provider goes, for pricing
        input_tokens=inp,
        output_tokens=out,
        cache_read_tokens=read,
        cache_write_tokens=write,
        reasoning_tokens=int(u.get("reasoning_tokens") or 0),
    )


def _message_times(sample: dict) -> tuple[dict[str, Any], Any]:
    """The time of each generated message (by id), and the sample's first time."""
    times: dict[str, Any] = {}
    first = None
    for event in sample.get("events") or []:
        if not isinstance(event, dict):
            continue
        ts = parse_time(event.get("timestamp"))
        first = first or ts
        if event.get("event") != "model" or ts is None:
            continue
        output = event.get("output")
        for choice in output.get("choices") or [] if isinstance(output, dict) else []:
            msg = choice.get("message") if isinstance(choice, dict) else None
            if isinstance(msg, dict) and msg.get("id"):
                times[str(msg["id"])] = ts
    return times, first


class InspectLogFormat:
    """An Inspect AI evaluation log; each sample (and epoch) is a thread."""

    name = "inspect-ai"
    agent = AGENT
    appendable = False  # a `.json` log is written whole; a `.eval` zip is rewritten as it grows
    detect_priority = 10

    def detect(self, path: Path, head: bytes) -> bool:
        if path.suffix == ".eval":
            return head.startswith(b"PK\x03\x04") and any(
                head[30:].startswith(m) for m in _ZIP_MEMBERS
            )
        return path.suffix == ".json" and bool(_JSON_HEAD.match(head.lstrip()))

    def parse(self, path: Path, cursor: Cursor) -> Iterator[Record]:
        cursor.offset, cursor.line = path.stat().st_size, 0
        if path.suffix == ".eval":
            yield from self._parse_zip(path)
            return
        doc, problem = read_document(path)
        if problem is not None:
            yield problem
            return
        if not isinstance(doc, dict) or not isinstance(doc.get("eval"), dict):
            yield Problem("not an Inspect AI log: expected an object with an 'eval' object")
            return
        samples = doc.get("samples") or []
        if not isinstance(samples, list):
            yield Problem("not an Inspect AI log: 'samples' is not a list")
            return
        for index, sample in enumerate(samples):
            yield from self._sample(doc["eval"], sample, f"sample {index}")

    def _parse_zip(self, path: Path) -> Iterator[Record]:
        try:
            with zipfile.ZipFile(path) as z:
                names = z.namelist()
                header_name = next(
                    (n for n in ("header.json", "_journal/start.json") if n in names), None
                )
                if header_name is None:
                    yield Problem("not an Inspect AI .eval log: no header.json in the zip")
                    return
                header = orjson.loads(z.read(header_name))
                ev = header.get("eval") if isinstance(header, dict) else None
                if not isinstance(ev, dict):
                    yield Problem(f"not an Inspect AI .eval log: {header_name} has no 'eval'")
                    return
                for name in sorted(n for n in names if _SAMPLE_MEMBER.match(n)):
                    try:
                        sample = orjson.loads(z.read(name))
                    except (orjson.JSONDecodeError, zipfile.BadZipFile, OSError) as exc:
                        yield Problem(f"{name}: cannot read this sample: {exc}")
                        continue
                    yield from self._sample(ev, sample, name)
        except (zipfile.BadZipFile, OSError, orjson.JSONDecodeError) as exc:
            yield Problem(f"damaged .eval log (a zip): {exc}; re-export it from Inspect")

    def _sample(self, ev: dict, sample: Any, where: str) -> Iterator[Record]:
        if not isinstance(sample, dict) or not isinstance(sample.get("messages"), list):
            yield Problem(f"{where}: not a sample with a 'messages' list")
            return
        sid, epoch = sample.get("id"), sample.get("epoch") or 1
        thread = f"{ev.get('eval_id') or ev.get('run_id')}/{sid}/{epoch}"
        model = ev.get("model") if isinstance(ev.get("model"), str) else None
        task = ev.get("task")
        title = f"{task} · sample {sid}" + (f" · epoch {epoch}" if epoch != 1 else "")
        meta = {"task": task, "sample": sid, "epoch": epoch, "eval_id": ev.get("eval_id")}
        yield ThreadInfo(thread, AGENT, title=title, model=model, meta=meta)
        times, last_time = _message_times(sample)
        tools = edit_tools()

        def read(seq: int, msg: dict) -> Iterator[Record]:
            nonlocal last_time
            if msg.get("role") not in ROLES:
                yield Problem(f"{where}: message {seq} has no known role; skipped")
                return
            native = str(msg.get("id") or f"{thread}:{seq}")
            last_time = times.get(native, last_time)
            yield self._message(thread, native, seq, msg, tools, last_time)

        yield from each_record(
            enumerate(sample["messages"]), read, f"{where}: message", numbered=True
        )
        for name, u in (sample.get("model_usage") or {}).items():
            usage = _usage(thread, name, u)
            if usage is not None:
                yield usage

    def _message(self, thread, native, seq, msg, tools, ts) -> Message:
        role = ROLES[msg["role"]]
        if role == TOOL:
            error = msg.get("error") if isinstance(msg.get("error"), dict) else None
            text = "\n\n".join(b.text or "" for b in _parts(msg.get("content")) if b.text)
            if error and error.get("message"):
                text = f"{text}\n\n{error['message']}".strip()
            blocks = [
                Block(
                    "tool_result",
                    text=text,
                    tool_use_id=msg.get("tool_call_id"),
                    is_error=bool(error),
                )
            ]
            source = SOURCE_TOOL_RESULT
        else:
            blocks = _parts(msg.get("content"))
            if role == USER:
                source = SOURCE_TYPED if msg.get("source") == "input" else SOURCE_META
            else:
                source = SOURCE_AGENT if role == ASSISTANT else SOURCE_META
            for n, call in enumerate(msg.get("tool_calls") or []):
                if not isinstance(call, dict):
                    continue
                name, args = call.get("function"), call.get("arguments")
                block = Block(
                    "tool_use",
                    tool_name=name if isinstance(name, str) else None,
                    tool_use_id=str(call.get("id") or f"{native}:{n}"),
                    tool_input=args,
                )
                block.is_file_edit, block.edited_paths = tool_edit(block.tool_name, args, tools)
                blocks.append(block)
        return Message(
            thread,
            native,
            role,
            seq,
            blocks,
            source_type=source,
            timestamp=ts,
            model=msg.get("model") if role == ASSISTANT else None,
        )


@hookimpl
def register_formats(register) -> None:
    register(InspectLogFormat())
