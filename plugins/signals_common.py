"""What the built-in signals share: the current turn, tool calls with their results, failures."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from auditor.api import SOURCE_COURSE_CORRECTION, is_typed_user, text_cache

# Tools that run a command; their input names it under one of these keys.
COMMAND_TOOLS = {
    "bash",
    "shell",
    "shell_command",
    "exec_command",
    "local_shell",
    "run_terminal_cmd",
    "execute_command",
    "terminal",
    "run_command",
    "command",
}
_COMMAND_KEYS = ("command", "cmd", "script")


@dataclass
class Call:
    """A tool call of the turn and its result, when the result is in the thread yet."""

    message_id: str  # native id of the assistant message that made the call
    index: int  # position of that message in the thread
    name: str
    input: Any
    is_edit: bool
    paths: list[str]
    result_id: str | None = None  # native id of the message holding the result
    result_index: int | None = None
    result: str | None = None
    is_error: bool | None = None

    @property
    def command(self) -> str | None:
        return command_of(self.name, self.input)


def opens_turn(m) -> bool:
    return is_typed_user(m) or m.source_type == SOURCE_COURSE_CORRECTION


def turn_start(messages: list) -> int:
    """Return the index of the user message that opened the current turn, or -1."""
    for i in range(len(messages) - 1, -1, -1):
        if opens_turn(messages[i]):
            return i
    return -1


def goal_message(messages: list):
    """Return the first message a person typed in the thread with words in it (its goal), or None."""
    return next((m for m in messages if is_typed_user(m) and prose(m.text)), None)


def command_of(name: str | None, tool_input: Any) -> str | None:
    """Return the shell command of a command-running tool call, as one string."""
    if not name or name.lower() not in COMMAND_TOOLS:
        return None
    value = tool_input
    if isinstance(tool_input, dict):
        value = next((tool_input[k] for k in _COMMAND_KEYS if k in tool_input), None)
    if isinstance(value, list):
        parts = [str(p) for p in value]
        # ["bash", "-lc", "pytest -q"]: the script is the last part.
        if len(parts) >= 3 and parts[1] in ("-c", "-lc", "-ic"):
            return parts[-1]
        return " ".join(parts)
    return value if isinstance(value, str) else None


def calls_since(messages: list, start: int) -> list[Call]:
    """Return the tool calls made after message `start`, paired with their results, in order."""
    calls: list[Call] = []
    by_id: dict[str, Call] = {}
    for i in range(start + 1, len(messages)):
        m = messages[i]
        for b in m.blocks:
            if b.kind == "tool_use":
                paths = list(b.edited_paths or [])
                if not paths and isinstance(b.tool_input, dict):
                    p = b.tool_input.get("file_path") or b.tool_input.get("path")
                    if isinstance(p, str):
                        paths = [p]
                call = Call(
                    m.native_id, i, b.tool_name or "?", b.tool_input, bool(b.is_file_edit), paths
                )
                calls.append(call)
                if b.tool_use_id:
                    by_id[b.tool_use_id] = call
            elif b.kind == "tool_result" and b.tool_use_id in by_id:
                call = by_id[b.tool_use_id]
                call.result_id, call.result_index = m.native_id, i
                call.result, call.is_error = b.text or "", b.is_error
    return calls


# -- failures -------------------------------------------------------------------------------

# Results the user or the harness caused (a rejected call, a missing permission): not failures.
_NOT_A_FAILURE = re.compile(
    r"^(?:The user doesn't want to|Permission for this tool use was denied|patch rejected by user"
    r"|Claude requested permissions|This command requires approval|This Bash command contains multiple"
    r"|\[Request interrupted by user|<tool_use_error>(?:Cancelled: parallel tool call|Sibling tool call errored))"
)
_EXIT = re.compile(r"^(?:Exit code:?|Process exited with code) (-?\d+)", re.MULTILINE)
_FAILURE_TEXT = re.compile(
    r"Traceback \(most recent call last\)|^<tool_use_error>|\b[1-9]\d* (?:failed|failing|errors?)\b"
    r"|^FAILED\b|\bFAILED \(|\bTests? (?:run )?failed\b|Failed Tests \d|command not found"
    r"|^(?:npm ERR!|error(?:\[\w+\])?:|fatal:|ERROR:)|\berror TS\d+|panicked at|Segmentation fault",
    re.MULTILINE | re.IGNORECASE,
)
# A non-zero exit of a search or comparison command only means "nothing found" or "differs".
_QUIET_EXIT_ONE = re.compile(
    r"^\s*(?:grep|egrep|rg|ag|find|ls|test|\[|which|diff|cmp|git (?:diff|grep)|command -v)\b"
)


def failure(call: Call) -> str | None:
    """Return why a call's result counts as a failure (a short phrase), or None."""
    if call.result is None:
        return None
    return _failure(call.command, call.result, call.is_error)


# Every checkpoint of a turn looks at the same results again: remember the answers.
@text_cache(16384, text_at=1)
def _failure(command: str | None, text: str, is_error: bool | None) -> str | None:
    head = text.lstrip()[:200]
    if _NOT_A_FAILURE.match(head):
        return None
    if command is None:
        # Only the tool's own error flag counts: a Read of a log full of "FAILED" did not fail.
        return "error result" if is_error else None
    m = _EXIT.search(text[:400])
    if m:
        code = int(m.group(1))
        if code == 0:
            return "test failures" if _has_test_failures(text) else None
        if code == 1 and _QUIET_EXIT_ONE.match(command) and len(text) < 400:
            return None
        return f"exit code {code}"
    if is_error:
        return "error result"
    if _FAILURE_TEXT.search(text[:20000]):
        return "error output" if not _has_test_failures(text) else "test failures"
    return None


def _has_test_failures(text: str) -> bool:
    return re.search(r"\b[1-9]\d* (?:failed|failing)\b|^FAILED\b", text, re.MULTILINE) is not None


_SAYS_FAILURE = re.compile(
    r"\b(?:error|errors|failed|failure|fatal|traceback|exception|denied|not found)\b", re.IGNORECASE
)
_NOISE = re.compile(r"^\s*(?:npm warn|warning:|Wall time|Output:$|Exit code)", re.IGNORECASE)


def first_line(text: str | None) -> str:
    """Return the line of `text` that best says what happened: a failure line, else the first."""
    lines = [
        line.strip()
        for line in (text or "").splitlines()
        if line.strip() and not _NOISE.match(line)
    ]
    for pattern in (_FAILURE_TEXT, _SAYS_FAILURE):
        for line in lines:
            if pattern.search(line):
                return line
    return lines[0] if lines else ""


# Commands that check work: tests, builds, type checks, linters.
VERIFY = re.compile(
    r"\b(?:pytest|py\.test|unittest|tox|nox|jest|vitest|mocha|playwright|cypress|rspec|phpunit|ctest"
    r"|go (?:test|build|vet)|cargo (?:test|build|check|clippy)|(?:npm|pnpm|yarn|bun)(?: run)? "
    r"(?:test|build|lint|check|typecheck|type-check|tsc|e2e)[\w:-]*|make\b|tsc\b|mypy|pyright|ruff"
    r"|flake8|pylint|eslint|mvn|gradle|dotnet (?:test|build)|mix (?:test|compile|credo|dialyzer)"
    r"|swift (?:test|build)|deno test|rake|bundle exec|python3? -m (?:pytest|unittest|mypy|compileall)"
    r"|uv run (?:pytest|python|mypy|ruff)|npx (?:tsc|jest|vitest|eslint|playwright))",
)


def is_verification(call: Call) -> bool:
    cmd = call.command
    return bool(cmd and VERIFY.search(cmd))


# -- what a person wrote, without what they pasted -------------------------------------------

_CODEX_IDE_CONTEXT = re.compile(
    r"\A\s*# Context from my IDE setup:.*?^## My request for Codex:[ \t]*\n?",
    re.DOTALL | re.MULTILINE,
)
_TAGGED = re.compile(
    r"<(ide_[a-z_]+|system-reminder|command-[a-z-]+|local-command-[a-z-]+|bash-[a-z]+)>.*?</\1>",
    re.DOTALL,
)
_FENCED = re.compile(r"```.*?(?:```|\Z)", re.DOTALL)
# Lines of logs, code or shell output pasted into a message.
_PASTED = re.compile(
    r"^\s{2,}\S|^\s*(?:\d{1,2}:\d{2}|\d{4}-\d{2}-\d{2}|[$>]\s|at \S+[(:]|File \"|\w*(?:Error|Exception):|[-+]{3} |@@ )"
    r"|&&|\|\||[{};]\s*$|^\s*(?:import|from|def|class|const|let|var|function|return)\b"
)


def prose(text: str) -> str:
    """Return the words a person typed: IDE context, tags, code blocks and pasted logs removed."""
    text = _CODEX_IDE_CONTEXT.sub("", text)
    text = _TAGGED.sub(" ", text)
    text = _FENCED.sub(" ", text)
    return "\n".join(line for line in text.splitlines() if not _PASTED.search(line)).strip()


def options(config: dict, name: str, defaults: dict[str, Any]) -> dict[str, Any] | None:
    """Return a signal's options (defaults overlaid with `config[name]`), or None when disabled."""
    if name in (config.get("disabled") or ()):
        return None
    own = config.get(name) or {}
    if own.get("enabled") is False:
        return None
    return {**defaults, **{k: v for k, v in own.items() if v is not None}}
