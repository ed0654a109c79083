"""Codex CLI rollout files: ``~/.codex/sessions/YYYY/MM/DD/rollout-<ts>-<uuid>.jsonl``.

Every line is ``{timestamp, type, payload}``; ``type`` is ``session_meta``, ``turn_context``,
``response_item``, ``event_msg`` or ``compacted``. The file is append-only, so the parser works
from any cursor: what it needs from earlier lines (session id, current model, the last
cumulative token count...) lives in ``cursor.state``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from auditor.api import (
    ASSISTANT,
    CORRECTION_MARKER,
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
    TOOL,
    USER,
    Block,
    Cursor,
    LiveHooks,
    Message,
    Problem,
    Record,
    ThreadInfo,
    Usage,
    each_record,
    parse_time,
    read_jsonl,
)

from .codex_records import AGENT, first_json_line, msg
from .shell_edits import patch_paths, shell_edits

ROLLOUT_TYPES = {"session_meta", "turn_context", "response_item", "event_msg", "compacted"}
_ROLLOUT_HEAD = re.compile(
    rb'^\s*\{\s*"timestamp"\s*:\s*"[^"]*"\s*,\s*"type"\s*:\s*"('
    + b"|".join(t.encode() for t in sorted(ROLLOUT_TYPES))
    + rb')"\s*,\s*"payload"\s*:\s*\{'
)
_UUID_AT_END = re.compile(
    r"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$", re.IGNORECASE
)

# User messages the harness writes, not the person: environment, AGENTS.md, review output...
META_PREFIXES = (
    "<environment_context>",
    "# AGENTS.md instructions",
    "<user_instructions>",
    "<user_action>",
    "<permissions instructions>",
    "<turn_aborted>",
)
COMMAND_PREFIXES = ("<user_shell_command>",)
# Tool outputs that say the call failed although they carry no exit code.
ERROR_PREFIXES = (
    "failed in sandbox",
    "patch rejected",
    "apply_patch verification failed",
    "execution error",
    "error:",
    "exec error",
    "sandbox error",
    "command timed out",
)
_EXIT_CODE = re.compile(r"^Exit code: (-?\d+)", re.MULTILINE)
_ABORTED = re.compile(r"^(aborted|aborted by user|command aborted)\b", re.MULTILINE | re.IGNORECASE)


def _uuid_from_name(path: Path) -> str:
    m = _UUID_AT_END.search(path.stem)
    return m.group(1) if m else path.stem


def _text_of_content(content: Any) -> list[Block]:
    """Blocks of a Responses-API `content` list (input_text / output_text / input_image)."""
    if isinstance(content, str):
        return [Block("text", text=content)]
    blocks: list[Block] = []
    for part in content or []:
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        if kind in ("input_text", "output_text", "text"):
            blocks.append(Block("text", text=part.get("text") or ""))
        elif kind in ("input_image", "image", "image_url"):
            blocks.append(Block("image"))  # the data URL is not stored
        elif kind == "refusal":
            blocks.append(Block("text", text=part.get("refusal") or ""))
    return blocks


def _loads_maybe(raw: Any) -> Any:
    """`json.loads(raw)` for a JSON string, else `raw` itself."""
    if not isinstance(raw, str):
        return raw
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def _user_source(text: str) -> str:
    stripped = text.lstrip()
    if stripped.startswith("<hook_prompt"):  # a Stop hook's `reason`; auditor's carry its marker
        return SOURCE_COURSE_CORRECTION if CORRECTION_MARKER in stripped else SOURCE_META
    if stripped.startswith(META_PREFIXES):
        return SOURCE_META
    if stripped.startswith(COMMAND_PREFIXES):
        return SOURCE_COMMAND
    return SOURCE_TYPED


def _guidance(text: str) -> str | None:
    """The AGENTS.md text of a `# AGENTS.md instructions` / `<user_instructions>` message."""
    stripped = text.strip()
    if stripped.startswith("# AGENTS.md instructions"):
        m = re.search(r"<INSTRUCTIONS>\n?(.*?)\n?</INSTRUCTIONS>", stripped, re.DOTALL)
        if m:
            return m.group(1)
        return stripped.split("\n", 1)[1].strip() if "\n" in stripped else None
    if stripped.startswith("<user_instructions>"):
        m = re.search(r"<user_instructions>\n?(.*?)\n?</user_instructions>", stripped, re.DOTALL)
        return m.group(1) if m else None
    return None


def tool_output(output: Any) -> tuple[str, bool]:
    """Return (text, is_error) for a Codex `function_call_output.output` string.

    Handles the JSON-encoded `{"output", "metadata": {"exit_code"}}` shape (CLI 0.40-0.55), the
    plain `Exit code: N\\nWall time: ...\\nOutput:\\n...` shape (0.66+) and the bare messages
    (`failed in sandbox ...`, `patch rejected by user`, `Plan updated`).
    """
    if isinstance(output, dict):  # newer CLIs may store {content, success}
        text = output.get("content") or output.get("output") or ""
        if not isinstance(text, str):
            text = json.dumps(text, ensure_ascii=False)
        success = output.get("success")
        return text, success is False
    if not isinstance(output, str):
        return json.dumps(output, ensure_ascii=False), False
    if output.startswith("{"):
        data = _loads_maybe(output)
        if isinstance(data, dict) and "output" in data:
            text = data.get("output")
            text = text if isinstance(text, str) else json.dumps(text, ensure_ascii=False)
            meta = m if isinstance(m := data.get("metadata"), dict) else {}
            code = meta.get("exit_code")
            if isinstance(code, int):
                return text, code != 0
            return text, text.lstrip().lower().startswith(ERROR_PREFIXES)
    head = output[:400]
    m = _EXIT_CODE.match(head)
    if m:
        return output, int(m.group(1)) != 0
    lowered = head.lstrip().lower()
    if lowered.startswith(ERROR_PREFIXES):
        return output, True
    if lowered.startswith("wall time:") and _ABORTED.search(head):
        return output, True
    return output, False


class CodexFormat:
    """Codex CLI rollout JSONL (`~/.codex/sessions/.../rollout-*.jsonl`)."""

    name = "codex"
    agent = AGENT
    vendor = "openai"  # whose model the agent runs: an observer of another is chosen
    appendable = True
    live_hooks = LiveHooks(
        "codex",
        hook_events=("PostToolUse", "UserPromptSubmit", "Stop"),
        settings={"project": ".codex/hooks.json", "user": "${CODEX_HOME:-~/.codex}/hooks.json"},
        tested=("codex", "0.169.0"),  # tests/test_real_codex.py
    )

    def detect(self, path: Path, head: bytes) -> bool:
        if path.suffix != ".jsonl":
            return False
        obj = first_json_line(head)
        if isinstance(obj, dict):
            return (
                obj.get("type") in ROLLOUT_TYPES
                and isinstance(obj.get("payload"), dict)
                and "sessionId" not in obj
                and "uuid" not in obj
            )
        # A first line longer than the head (huge instructions): look at its opening only.
        return obj is None and bool(_ROLLOUT_HEAD.match(head))

    def parse(self, path: Path, cursor: Cursor) -> Iterator[Record]:
        st = cursor.state
        if "thread" not in st:
            st["thread"] = _uuid_from_name(path)
        for rec in each_record(
            read_jsonl(path, cursor), lambda line, obj: self._record(line, obj, st), "Codex record"
        ):
            if isinstance(rec, Message) and st.get("subagent"):
                rec.is_sidechain = True
            yield rec

    # -- one line ------------------------------------------------------------------------
    def _record(self, line: int, obj: dict, st: dict) -> Iterator[Record]:
        kind = obj.get("type")
        payload = obj.get("payload")
        if not isinstance(payload, dict):
            if kind in ROLLOUT_TYPES:
                yield Problem(f"Codex {kind!r} record without a payload object", line)
            return
        ts = parse_time(obj.get("timestamp"))
        if kind == "session_meta":
            yield from self._session_meta(payload, st)
        elif kind == "turn_context":
            model = payload.get("model")
            if model and model != st.get("model"):
                st["model"] = model
                yield ThreadInfo(st["thread"], AGENT, model=model)
        elif kind == "response_item":
            yield from self._response_item(line, ts, payload, st)
        elif kind == "event_msg":
            yield from self._event(line, ts, payload, st)
        elif kind == "compacted":
            text = payload.get("message") or ""
            yield msg(
                st["thread"], f"L{line}", USER, line, [Block("text", text=text)], SOURCE_COMPACT, ts
            )

    def _session_meta(self, p: dict, st: dict) -> Iterator[Record]:
        if st.get("meta_seen"):
            return  # a resumed/forked session repeats it; the file stays one thread
        st["meta_seen"] = True
        if p.get("id"):
            st["thread"] = str(p["id"])
        git = g if isinstance(g := p.get("git"), dict) else {}
        meta = {
            k: v
            for k, v in {
                "originator": p.get("originator"),
                "source": p.get("source") if isinstance(p.get("source"), str) else None,
                "model_provider": p.get("model_provider"),
                "git_commit": git.get("commit_hash"),
                "repository_url": git.get("repository_url"),
                "started": p.get("timestamp"),
            }.items()
            if v
        }
        source = p.get("source")
        subagent = source.get("subagent") if isinstance(source, dict) else None
        parent = None
        if subagent is not None:  # {"subagent": "review"} or {"subagent": {"thread_spawn": {...}}}
            if isinstance(subagent, dict) and subagent:
                kind, detail = next(iter(subagent.items()))
                if isinstance(detail, dict):
                    parent = detail.get("parent_thread_id")
                subagent = kind
            st["subagent"] = str(subagent)[:64]
        instructions = p.get("instructions")
        yield ThreadInfo(
            st["thread"],
            AGENT,
            cwd=p.get("cwd"),
            git_branch=git.get("branch"),
            version=p.get("cli_version"),
            guidance={"AGENTS.md": instructions}
            if isinstance(instructions, str) and instructions.strip()
            else None,
            meta=meta or None,
            is_sidechain=subagent is not None,
            agent_type=st.get("subagent"),
            parent_native_id=str(parent) if parent else None,
        )

    def _response_item(self, line: int, ts, p: dict, st: dict) -> Iterator[Record]:
        thread = st["thread"]
        model = st.get("model")
        t = p.get("type")
        if t == "message":
            role = p.get("role")
            blocks = _text_of_content(p.get("content"))
            text = "\n\n".join(b.text for b in blocks if b.kind == "text" and b.text)
            if role == "user":
                st["last_user"] = _digest(text)
                source = _user_source(text)
                if source == SOURCE_TYPED and st.get("subagent"):
                    # Nobody typed a sub-agent's prompt: /review wrote it, or the parent agent.
                    source = SOURCE_COMMAND if st["subagent"] == "review" else SOURCE_META
                guidance = _guidance(text)
                if guidance is not None:
                    yield ThreadInfo(thread, AGENT, guidance={"AGENTS.md": guidance})
                yield msg(thread, f"L{line}", USER, line, blocks, source, ts)
            elif role == "assistant":
                yield msg(thread, f"L{line}", ASSISTANT, line, blocks, SOURCE_AGENT, ts, model)
            else:  # developer / system
                # Codex writes a hook's additionalContext (PostToolUse, UserPromptSubmit) into
                # the conversation as a developer message, just before the tool's output: the
                # one carrying auditor's marker is a correction the model was handed.
                source = SOURCE_COURSE_CORRECTION if CORRECTION_MARKER in text else SOURCE_META
                yield msg(thread, f"L{line}", SYSTEM, line, blocks, source, ts)
        elif t == "reasoning":
            texts: list[Any] = [
                s.get("text")
                for s in p.get("summary") or []
                if isinstance(s, dict) and s.get("text")
            ]
            if not texts and isinstance(p.get("content"), list):
                texts = [
                    c.get("text") for c in p["content"] if isinstance(c, dict) and c.get("text")
                ]
            if texts:  # encrypted_content is never stored
                yield msg(
                    thread,
                    f"L{line}",
                    ASSISTANT,
                    line,
                    [Block("thinking", text="\n\n".join(texts))],
                    SOURCE_AGENT,
                    ts,
                    model,
                )
        elif t in ("function_call", "custom_tool_call", "local_shell_call"):
            call_id = str(p.get("call_id") or p.get("id") or f"L{line}")
            name = p.get("name") or ("local_shell" if t == "local_shell_call" else None)
            if t == "function_call":
                tool_input = _loads_maybe(p.get("arguments"))
            elif t == "custom_tool_call":
                tool_input = p.get("input")
            else:
                tool_input = p.get("action")
            block = Block("tool_use", tool_name=name, tool_use_id=call_id, tool_input=tool_input)
            block.is_file_edit, block.edited_paths = _call_edits(name, tool_input)
            yield msg(thread, call_id, ASSISTANT, line, [block], SOURCE_AGENT, ts, model)
        elif t in ("function_call_output", "custom_tool_call_output"):
            call_id = str(p.get("call_id") or f"L{line}")
            text, is_error = tool_output(p.get("output"))
            block = Block("tool_result", text=text, tool_use_id=call_id, is_error=is_error)
            yield msg(thread, f"{call_id}:output", TOOL, line, [block], SOURCE_TOOL_RESULT, ts)
        elif t == "web_search_call":
            action = p.get("action")
            call_id = str(p.get("id") or f"L{line}")
            block = Block(
                "tool_use", tool_name="web_search", tool_use_id=call_id, tool_input=action
            )
            yield msg(thread, call_id, ASSISTANT, line, [block], SOURCE_AGENT, ts, model)
        # ghost_snapshot (undo checkpoints) and unknown item types carry no conversation.

    def _event(self, line: int, ts, p: dict, st: dict) -> Iterator[Record]:
        thread = st["thread"]
        t = p.get("type")
        if t == "token_count":
            info = p.get("info")
            if isinstance(info, dict) and not st.get("review"):
                usage = _token_delta(info, st)
                if usage is not None:
                    key, vec = usage
                    yield Usage(
                        thread,
                        key,
                        model=st.get("model"),
                        input_tokens=vec[0] - vec[1],
                        cache_read_tokens=vec[1],
                        output_tokens=vec[2],
                        reasoning_tokens=vec[3],
                        timestamp=ts,
                    )
        elif t == "user_message":
            # Normally a copy of the response_item user message just before it. In review mode
            # (/review) the prompt exists only here.
            text = p.get("message") or ""
            digest = _digest(text)
            if digest != st.get("last_user"):
                st["last_user"] = digest
                source = SOURCE_COMMAND if st.get("review") else _user_source(text)
                blocks = [Block("text", text=text)] + [
                    Block("image") for _ in p.get("images") or []
                ]
                yield msg(thread, f"L{line}", USER, line, blocks, source, ts)
        elif t == "turn_aborted":
            reason = p.get("reason") or "aborted"
            yield msg(
                thread,
                f"L{line}",
                SYSTEM,
                line,
                [Block("text", text=f"[turn aborted: {reason}]")],
                SOURCE_INTERRUPT,
                ts,
            )
        elif t == "entered_review_mode":
            # The /review sub-agent is a session of its own, with its own rollout file (session
            # source {"subagent": "review"}) holding its messages and the same token events; they
            # are not counted here a second time. Its counter interleaves with the main one,
            # which the main counter's state (left untouched) survives.
            st["review"] = True
        elif t == "exited_review_mode":
            st.pop("review", None)
        elif t == "error":
            text = p.get("message") or "error"
            yield msg(
                thread, f"L{line}", SYSTEM, line, [Block("text", text=text)], SOURCE_ERROR, ts
            )
        # agent_message / agent_reasoning duplicate response items; the rest is UI state.


_TOKEN_FIELDS = (
    "input_tokens",
    "cached_input_tokens",
    "output_tokens",
    "reasoning_output_tokens",
    "total_tokens",
)


def _token_delta(info: dict, st: dict) -> tuple[str, list[int]] | None:
    """Turn a cumulative `total_token_usage` into the tokens of the calls since the last one.

    Codex repeats `token_count` events with unchanged totals, and its cumulative counter starts
    again from zero when the CLI process restarts (a resumed session). So: skip an unchanged
    total; a total below the previous one starts a new counter (segment). Summing the deltas
    gives the tokens of every call once. Review-mode events never get here (see `_event`).
    """
    total = info.get("total_token_usage")
    if not isinstance(total, dict):
        return None
    vec = [int(total.get(k) or 0) for k in _TOKEN_FIELDS]
    tok = st.setdefault("tok", {"seg": 0, "n": 0, "prev": None})
    prev = tok["prev"]
    if prev == vec:
        return None
    if prev is None or any(a < b for a, b in zip(vec, prev)):
        if prev is not None:
            tok["n"] += 1
            tok["seg"] = tok["n"]
        delta = vec
    else:
        delta = [a - b for a, b in zip(vec, prev)]
    tok["prev"] = vec
    key = f"total:{vec[4]}" if tok["seg"] == 0 else f"total:{tok['seg']}:{vec[4]}"
    return key, delta


def _digest(text: str) -> str:
    return hashlib.sha1(text.strip().encode("utf-8", "replace")).hexdigest()[:16]


def _call_edits(name: str | None, tool_input: Any) -> tuple[bool, list[str] | None]:
    """Whether a Codex tool call edits files, and which."""
    if name == "apply_patch":
        patch = tool_input
        if isinstance(tool_input, dict):
            patch = tool_input.get("input") or tool_input.get("patch")
        paths = patch_paths(patch) if isinstance(patch, str) else []
        return True, paths or None
    if name in ("shell", "shell_command", "local_shell", "exec_command", "container.exec"):
        command = tool_input.get("command") if isinstance(tool_input, dict) else tool_input
        if command is None and isinstance(tool_input, dict):
            command = tool_input.get("cmd")
        if isinstance(command, (str, list)):
            return shell_edits(command)
    return False, None
