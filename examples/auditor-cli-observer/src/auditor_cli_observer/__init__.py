"""An auditor observer that asks any command-line model tool and reads the JSON it prints.

Point `AUDITOR_CLI_COMMAND` at a command that reads a prompt on stdin and prints the model's
answer on stdout, for instance:

    AUDITOR_CLI_COMMAND='llm -m gpt-4o-mini'      # simonw/llm, any of its models
    AUDITOR_CLI_COMMAND='ollama run {model}'      # a local model; {model} is --model

then `auditor run --observer cli --model llama3.2`. The command gets the observer's system
prompt, an instruction to answer with one JSON object, and the rendered thread; the first JSON
object in its output that has a `needsCorrection` key is taken as the `course_correct` call.
Anything else is returned as "no tool call", which auditor records as an invalid answer.

A command-line tool reports no token counts, so usage is an estimate (characters / 4) and says
so in `usage.details`.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import shutil
import time
from typing import Any

from auditor.api import TOOL_NAME, ObserveRequest, ObserveResult, ObserverUsage, hookimpl

COMMAND_ENV = "AUDITOR_CLI_COMMAND"
MODEL_ENV = "AUDITOR_CLI_MODEL"
DEFAULT_MODEL = "default"
CHARS_PER_TOKEN = 4

INSTRUCTION = """\
# How to answer

You cannot call tools here. Answer with exactly one JSON object and nothing else, in this shape:

{"needsCorrection": false, "message": null}

or, when the agent needs a correction:

{"needsCorrection": true, "message": "what the user would say to the agent"}
"""

_FENCED = re.compile(r"```(?:json)?\s*(\{.*?\})\s*```", re.DOTALL)


def find_answer(text: str) -> dict[str, Any] | None:
    """Return the first JSON object in `text` that has a `needsCorrection` key, or None.

    Fenced ```json blocks are tried first, then every `{` in the text is tried as the start of
    an object (models often write a sentence before or after the JSON).
    """
    candidates = [m.group(1) for m in _FENCED.finditer(text)]
    decoder = json.JSONDecoder()
    for chunk in candidates:
        try:
            obj = json.loads(chunk)
        except ValueError:
            continue
        if isinstance(obj, dict) and "needsCorrection" in obj:
            return obj
    for start in (i for i, ch in enumerate(text) if ch == "{"):
        try:
            obj, _end = decoder.raw_decode(text, start)
        except ValueError:
            continue
        if isinstance(obj, dict) and "needsCorrection" in obj:
            return obj
    return None


class CommandObserver:
    """The `cli` observer: one run of the configured command per checkpoint."""

    name = "cli"

    @property
    def default_model(self) -> str:
        return os.environ.get(MODEL_ENV) or DEFAULT_MODEL

    def command(self, options: dict[str, Any]) -> list[str] | None:
        """Return the command line as argv, with `{model}` filled in, or None when unset."""
        template = options.get("command") or os.environ.get(COMMAND_ENV)
        if not template:
            return None
        model = options.get("model") or self.default_model
        return [part.replace("{model}", model) for part in shlex.split(template)]

    def check(self, options: dict[str, Any]) -> str | None:
        argv = self.command(options)
        if argv is None:
            return (
                f"set {COMMAND_ENV} to a command that reads a prompt on stdin and prints the answer, "
                f"e.g. {COMMAND_ENV}='llm -m gpt-4o-mini' or {COMMAND_ENV}='ollama run {{model}}'"
            )
        if shutil.which(argv[0]) is None:
            return (
                f"{argv[0]!r} (from {COMMAND_ENV}) is not on PATH: install it or fix {COMMAND_ENV}"
            )
        return None

    async def observe(self, request: ObserveRequest, options: dict[str, Any]) -> ObserveResult:
        argv = self.command(options)
        problem = self.check(options)
        if problem or argv is None:
            raise RuntimeError(problem)
        prompt = f"{request.system.rstrip()}\n\n{INSTRUCTION}\n{request.user}"
        started = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            out, err = await asyncio.wait_for(
                proc.communicate(prompt.encode()), timeout=request.timeout
            )
        except (TimeoutError, asyncio.CancelledError):
            proc.kill()
            await proc.wait()
            raise
        latency = time.monotonic() - started
        text = out.decode("utf-8", "replace")
        if proc.returncode != 0:
            tail = err.decode("utf-8", "replace").strip()[-300:]
            raise RuntimeError(
                f"{argv[0]} exited with status {proc.returncode}: {tail or '(no stderr)'}"
            )
        answer = find_answer(text)
        usage = ObserverUsage(
            input=len(prompt) // CHARS_PER_TOKEN,
            output=len(text) // CHARS_PER_TOKEN,
            details={
                "estimated": "characters / 4: the command reports no token counts",
                "command": argv[0],
            },
        )
        model = options.get("model") or self.default_model
        return ObserveResult(
            TOOL_NAME if answer is not None else None,
            answer,
            usage,
            model,
            latency,
            raw={"stdout": text[-4000:]},
        )


@hookimpl
def register_observers(register):
    register(CommandObserver())
