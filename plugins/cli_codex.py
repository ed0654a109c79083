"""The codex-cli observer: `codex exec`, for people logged in to Codex.

One run per checkpoint, verified with Codex 0.169.0:

    codex exec --json --output-schema SCHEMA.json --sandbox read-only --ephemeral
               --ignore-user-config --ignore-rules --skip-git-repo-check -C EMPTY_DIR
               -c model_instructions_file="SYSTEM.md" -c approval_policy="never"
               -c web_search="disabled" -c include_environment_context=false
               --disable shell_tool --disable unified_exec ... -m MODEL -

with the rendered thread on stdin (`-`). auditor's system prompt replaces Codex's own
instructions (`model_instructions_file`); `--output-schema` makes the model's final message a
JSON object of the decision's strict schema (the request's `text.format`). The shell and the
other optional tools are turned off; what is left (`view_image`, `request_user_input`) reads
nothing of the user's, and the sandbox is read-only in any case. `--ignore-user-config` keeps
the user's config.toml (hooks, MCP servers) out while the login in CODEX_HOME still applies;
`--ephemeral` writes no rollout that auditor would ingest as a Codex thread.

`--json` prints events, one a line: the final `agent_message` is the decision; `turn.completed`
carries the tokens as the server reported them (`input_tokens` with `cached_input_tokens`
among them, `output_tokens` with `reasoning_output_tokens` among them). Codex reports no cost:
the core prices the tokens (an estimate).

Readiness: `codex login status` (no model call), or CODEX_API_KEY set. Options: `command` (else
$AUDITOR_CODEX_CLI, else `codex` on PATH), `base_url` (a Responses API endpoint, e.g.
http://127.0.0.1:8080/v1, configured as a model provider that uses the login's key).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from auditor.api import ObserveRequest, ObserverUsage, hookimpl

from .agent_cli import (
    DECISION_SCHEMA,
    Answer,
    CliObserver,
    Finished,
    Invocation,
    decision_in,
    last_line,
    status_output,
)

# Optional tools and features an observer has no use for (`codex features list`).
DISABLED = (
    "shell_tool",
    "unified_exec",
    "multi_agent",
    "goals",
    "hooks",
    "plugins",
    "apps",
    "image_generation",
    "browser_use",
    "computer_use",
    "tool_suggest",
    "sleep_tool",
    "memories",
)
PROVIDER = "auditor-observer"  # the model provider named when `base_url` is given


def _toml(value: str) -> str:
    return json.dumps(value)  # a JSON string is a TOML basic string


class CodexCli:
    name = "codex-cli"
    program = "codex"
    product = "Codex"
    install = "npm install -g @openai/codex, then `codex login`"
    vendor = "openai"
    rank = 30
    default_model = "gpt-6.1-sol"

    def invocation(
        self, exe: str, request: ObserveRequest, workdir: Path, options: dict[str, Any]
    ) -> Invocation:
        schema = workdir / "decision.schema.json"
        schema.write_text(json.dumps(DECISION_SCHEMA))
        system = workdir / "system.md"
        system.write_text(request.system)
        argv = [
            exe,
            "exec",
            "--json",
            "--output-schema",
            str(schema),
            "--sandbox",
            "read-only",
            "--ephemeral",
            "--ignore-user-config",
            "--ignore-rules",
            "--skip-git-repo-check",
            "--color",
            "never",
            "-C",
            str(workdir / "work"),
            "-c",
            f"model_instructions_file={_toml(str(system))}",
            "-c",
            'approval_policy="never"',
            "-c",
            'web_search="disabled"',
            "-c",
            "include_environment_context=false",
            "-c",
            "include_permissions_instructions=false",
        ]
        for feature in DISABLED:
            argv += ["--disable", feature]
        if options.get("base_url"):
            where = f"model_providers.{PROVIDER}"
            argv += [
                "-c",
                f"model_provider={_toml(PROVIDER)}",
                "-c",
                f"{where}.name={_toml(PROVIDER)}",
                "-c",
                f"{where}.base_url={_toml(options['base_url'])}",
                "-c",
                f'{where}.wire_api="responses"',
                "-c",
                f"{where}.requires_openai_auth=true",
            ]
        argv += ["-m", request.model, "-"]
        return Invocation(argv, stdin=request.user)

    def read(self, done: Finished, request: ObserveRequest) -> Answer:
        events = []
        for line in done.stdout.splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict):
                events.append(event)
        text, usage, error = None, None, None
        for event in events:
            kind = event.get("type")
            item = event["item"] if isinstance(event.get("item"), dict) else {}
            if kind == "item.completed" and item.get("type") == "agent_message":
                text = item.get("text")
            elif kind == "turn.completed" and isinstance(event.get("usage"), dict):
                usage = event["usage"]
            elif kind == "turn.failed":
                error = str((event.get("error") or {}).get("message") or "turn failed")[:300]
            elif kind == "error":
                error = str(event.get("message") or "error")[:300]
        if not events:
            error = last_line(done.stderr) or f"exit status {done.returncode}, no output"
        raw = {"events": [e for e in events if e.get("type") != "item.started"]}
        return Answer(decision_in(text), _usage(usage), request.model, raw, error=error)

    def login_problem(self, exe: str) -> str | None:
        if os.environ.get("CODEX_API_KEY"):
            return None
        done = status_output([exe, "login", "status"])
        if isinstance(done, str):
            return f"Codex's login could not be checked: {done}."
        if done.returncode == 0:
            return None
        return (
            "Codex is installed but not logged in: run `codex login` (a ChatGPT plan), or "
            "`printenv OPENAI_API_KEY | codex login --with-api-key`."
        )


def _usage(usage: dict[str, Any] | None) -> ObserverUsage:
    if not usage:
        return ObserverUsage(details={"missing_usage": True})
    reasoning = int(usage.get("reasoning_output_tokens") or 0)
    return ObserverUsage(
        input=int(usage.get("input_tokens") or 0),
        cached=int(usage.get("cached_input_tokens") or 0),
        cache_write=int(usage.get("cache_write_input_tokens") or 0),
        output=int(usage.get("output_tokens") or 0) - reasoning,
        thinking=reasoning,
    )


@hookimpl(trylast=True)
def register_observers(register):
    register(CliObserver(CodexCli()))
