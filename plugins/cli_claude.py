"""The claude-cli observer: Claude Code's `claude -p`, for people logged in to Claude Code.

One run per checkpoint, verified with Claude Code 2.1.328:

    claude -p --output-format json --json-schema SCHEMA --tools "" --permission-mode dontAsk
           --setting-sources "" --strict-mcp-config --disable-slash-commands
           --no-session-persistence --system-prompt SYSTEM --model MODEL --effort low

with the rendered thread on stdin. `--json-schema` makes Claude Code give the model one tool,
`StructuredOutput`, whose input schema is the decision's; the answer's `structured_output` is
the decision. `--tools ""` leaves the model no other tool (nothing can read or change a file),
`--setting-sources ""` loads none of the user's settings (their hooks, an auditor hook among
them, do not fire), and `--no-session-persistence` writes no transcript that auditor would
later ingest as a Claude Code thread. The JSON result reports `total_cost_usd` (recorded as the
call's cost) and `modelUsage` per model (the tokens).

Readiness: `claude auth status` (JSON, `loggedIn`), which makes no model call. Options:
`command` (else $AUDITOR_CLAUDE_CLI, else `claude` on PATH), `base_url` (the child's
ANTHROPIC_BASE_URL).
"""

from __future__ import annotations

import json
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


class ClaudeCli:
    name = "claude-cli"
    program = "claude"
    product = "Claude Code"
    install = "npm install -g @anthropic-ai/claude-code, then `claude` once to log in"
    vendor = "anthropic"
    rank = 20
    default_model = "claude-sonnet-4-6"

    def invocation(
        self, exe: str, request: ObserveRequest, workdir: Path, options: dict[str, Any]
    ) -> Invocation:
        argv = [
            exe,
            "-p",
            "--output-format",
            "json",
            "--json-schema",
            json.dumps(DECISION_SCHEMA),
            "--tools",
            "",
            "--permission-mode",
            "dontAsk",
            "--setting-sources",
            "",
            "--strict-mcp-config",
            "--disable-slash-commands",
            "--no-session-persistence",
            "--system-prompt",
            request.system,
            "--model",
            request.model,
            "--effort",
            "low",
        ]
        env = {"ANTHROPIC_BASE_URL": options["base_url"]} if options.get("base_url") else {}
        return Invocation(argv, env, stdin=request.user)

    def read(self, done: Finished, request: ObserveRequest) -> Answer:
        try:
            data = json.loads(done.stdout)
        except ValueError:
            data = None
        if not isinstance(data, dict):
            why = (
                last_line(done.stderr) or last_line(done.stdout) or f"exit status {done.returncode}"
            )
            return Answer(None, ObserverUsage(), request.model, done.stdout[:2000], error=why)
        usage, model = _usage(data, request.model)
        decision = data.get("structured_output")
        if not isinstance(decision, dict):
            decision = decision_in(
                data.get("result") if isinstance(data.get("result"), str) else None
            )
        error = None
        if data.get("is_error"):
            error = str(data.get("result") or data.get("subtype") or "is_error")[:300]
        return Answer(decision, usage, model, data, error=error)

    def login_problem(self, exe: str) -> str | None:
        done = status_output([exe, "auth", "status", "--json"])
        if isinstance(done, str):
            return f"Claude Code's login could not be checked: {done}."
        try:
            status = json.loads(done.stdout)
        except ValueError:
            status = {}
        if isinstance(status, dict) and status.get("loggedIn"):
            return None
        return (
            "Claude Code is installed but not logged in: run `claude` once and log in (a "
            "Claude subscription or Console account), or `claude setup-token`."
        )


def _usage(data: dict[str, Any], model: str) -> tuple[ObserverUsage, str]:
    """Tokens summed over the models the run used, with the reported cost."""
    per_model = data["modelUsage"] if isinstance(data.get("modelUsage"), dict) else {}
    u = ObserverUsage()
    top = None
    for name, m in per_model.items():
        if not isinstance(m, dict):
            continue
        read, write = (
            int(m.get("cacheReadInputTokens") or 0),
            int(m.get("cacheCreationInputTokens") or 0),
        )
        thinking = int(m.get("thinkingTokens") or 0)
        u.input += int(m.get("inputTokens") or 0) + read + write
        u.cached += read
        u.cache_write += write
        u.thinking += thinking
        u.output += int(m.get("outputTokens") or 0) - thinking
        if top is None or int(m.get("outputTokens") or 0) > top[1]:
            top = (name, int(m.get("outputTokens") or 0))
    cost = data.get("total_cost_usd")
    if isinstance(cost, (int, float)) and not isinstance(cost, bool):
        u.cost_usd = float(cost)
    if not per_model:
        u.details["missing_usage"] = True
    return u, top[0] if top else model


@hookimpl(trylast=True)
def register_observers(register):
    register(CliObserver(ClaudeCli()))
