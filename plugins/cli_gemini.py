"""The gemini-cli observer: Gemini CLI in headless mode, for people logged in with Google.

One run per checkpoint, verified with Gemini CLI 0.61.0:

    gemini --output-format json --skip-trust -m MODEL -p ""

with the rendered thread on stdin (appended to the empty `-p` prompt) and, in the environment:

- GEMINI_CLI_HOME: a private home made for the call, whose `.gemini/settings.json` turns every
  tool off (`tools.core: []`; the request then declares no function at all), and skills,
  agents, hooks and MCP servers with them. The user's own settings (their hooks and extensions)
  are not read. Their login is: the credential files of `~/.gemini` (oauth_creds.json,
  google_accounts.json) are linked into the private home, and the auth type they chose is
  kept. The chat log the CLI writes goes to the private home, deleted after the call, so
  auditor never ingests an observer's run as a Gemini CLI thread.
- GEMINI_SYSTEM_MD: auditor's system prompt, with the rule to answer with one JSON object of
  the decision's schema (Gemini CLI has no structured-output flag).

`--output-format json` prints `{response, stats}`; `stats.models.<model>.tokens` holds the
tokens as the server reported them (`prompt` with `cached` among them, `candidates`,
`thoughts`). No cost is reported: the core prices the tokens (an estimate; a Google login's
free tier costs nothing).

Readiness, without a model call: the Google login's credentials in `~/.gemini`, or an API key
(GEMINI_API_KEY) with `gemini-api-key` chosen in its settings. There is no timeout flag: the
call is bounded from outside. Options: `command` (else $AUDITOR_GEMINI_CLI, else `gemini` on
PATH), `base_url` (the child's GOOGLE_GEMINI_BASE_URL).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from auditor.api import ObserveRequest, ObserverUsage, hookimpl

from .agent_cli import (
    ANSWER_RULE,
    Answer,
    CliObserver,
    Finished,
    Invocation,
    decision_in,
    last_line,
)

CREDENTIALS = ("oauth_creds.json", "google_accounts.json", "gemini-credentials.json")
OFF: dict[str, Any] = {
    "tools": {"core": []},
    "skills": {"enabled": False},
    "experimental": {"enableAgents": False},
    "hooksConfig": {"enabled": False},
    "mcpServers": {},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
}


def user_gemini_dir() -> Path:
    """Where Gemini CLI keeps the user's settings and login: $GEMINI_CLI_HOME/.gemini, else ~."""
    return Path(os.environ.get("GEMINI_CLI_HOME") or Path.home()) / ".gemini"


def chosen_auth(gemini_dir: Path) -> str | None:
    """The auth type in the user's settings (security.auth.selectedType), if any."""
    try:
        settings = json.loads((gemini_dir / "settings.json").read_text())
        value = settings["security"]["auth"]["selectedType"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return value if isinstance(value, str) else None


class GeminiCli:
    name = "gemini-cli"
    program = "gemini"
    product = "Gemini CLI"
    install = "npm install -g @google/gemini-cli, then `gemini` once to sign in with Google"
    vendor = "google"
    rank = 10
    default_model = "gemini-3.1-pro-preview"

    def invocation(
        self, exe: str, request: ObserveRequest, workdir: Path, options: dict[str, Any]
    ) -> Invocation:
        home = workdir / "home"
        private = home / ".gemini"
        private.mkdir(parents=True)
        mine = user_gemini_dir()
        for name in CREDENTIALS:
            if (mine / name).exists():
                (private / name).symlink_to(mine / name)
        settings = dict(OFF)
        auth = chosen_auth(mine) or self._auth_from_env(mine)
        if auth:
            settings["security"] = {"auth": {"selectedType": auth}}
        (private / "settings.json").write_text(json.dumps(settings))
        system = workdir / "system.md"
        system.write_text(f"{request.system}\n\n{ANSWER_RULE}\n")
        env = {"GEMINI_CLI_HOME": str(home), "GEMINI_SYSTEM_MD": str(system)}
        if options.get("base_url"):
            env["GOOGLE_GEMINI_BASE_URL"] = options["base_url"]
        argv = [exe, "--output-format", "json", "--skip-trust", "-m", request.model, "-p", ""]
        return Invocation(argv, env, stdin=request.user)

    @staticmethod
    def _auth_from_env(mine: Path) -> str | None:
        if (mine / "oauth_creds.json").exists():
            return "oauth-personal"
        if os.environ.get("GEMINI_API_KEY"):
            return "gemini-api-key"
        return None

    def read(self, done: Finished, request: ObserveRequest) -> Answer:
        try:
            data = json.loads(done.stdout)
        except ValueError:
            data = None
        if not isinstance(data, dict):
            why = last_line(done.stderr) or f"exit status {done.returncode}, no JSON output"
            return Answer(None, ObserverUsage(), request.model, done.stdout[:2000], error=why)
        usage, model = _usage(data.get("stats"), request.model)
        error = None
        if isinstance(data.get("error"), dict):
            error = str(data["error"].get("message") or data["error"])[:300]
        response = data.get("response") if isinstance(data.get("response"), str) else None
        return Answer(decision_in(response), usage, model, data, error=error)

    def login_problem(self, exe: str) -> str | None:
        mine = user_gemini_dir()
        auth = chosen_auth(mine)
        if (mine / "oauth_creds.json").exists() and auth in (None, "oauth-personal"):
            return None
        if auth == "gemini-api-key" and os.environ.get("GEMINI_API_KEY"):
            return None
        if auth == "vertex-ai" and os.environ.get("GOOGLE_CLOUD_PROJECT"):
            return None
        return (
            "Gemini CLI is installed but not logged in: run `gemini` once and choose "
            "'Sign in with Google' (free tier), or choose 'Use Gemini API key' with "
            "GEMINI_API_KEY set."
        )


def _usage(stats: Any, model: str) -> tuple[ObserverUsage, str]:
    models = stats.get("models") if isinstance(stats, dict) else None
    u = ObserverUsage()
    top = None
    for name, m in (models or {}).items():
        tokens = (m or {}).get("tokens") if isinstance(m, dict) else None
        if not isinstance(tokens, dict):
            continue
        u.input += int(tokens.get("prompt") or 0)
        u.cached += int(tokens.get("cached") or 0)
        u.output += int(tokens.get("candidates") or 0)
        u.thinking += int(tokens.get("thoughts") or 0)
        if top is None or int(tokens.get("candidates") or 0) > top[1]:
            top = (name, int(tokens.get("candidates") or 0))
    if top is None:
        u.details["missing_usage"] = True
    return u, top[0] if top else model


@hookimpl(trylast=True)
def register_observers(register):
    register(CliObserver(GeminiCli()))
