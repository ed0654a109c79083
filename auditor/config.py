"""The config file: sources to ingest on a schedule, and defaults for the commands' options.

TOML, at `$AUDITOR_CONFIG`, else `config.toml` in the per-user config directory
(`platformdirs.user_config_dir("auditor")`). Every key is optional; a command-line option
always wins over the file. `auditor config` shows where the file is and what it says.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import AuditorError

ENV_VAR = "AUDITOR_CONFIG"
EVENT_COMMANDS = "AGENT"  # the defaults of every `auditor hook AGENT` event command

NUMBER = (int, float)
# section -> key -> accepted type(s). Sections other than these (and [injectors.NAME]) are errors.
KEYS: dict[str, dict[str, Any]] = {
    "observer": {
        "observer": str,
        "allow_same_vendor": bool,
        "model": str,
        "base_url": str,
        "max_retries": int,
        "timeout": NUMBER,
    },
    "gate": {
        "mode": str,
        "min_tool_calls": int,
        "require_edit": bool,
        "include_sidechains": bool,
        "projects": list,
        "agents": list,
        "min_prompt_tokens": int,
        "max_prompt_tokens": int,
    },
    "run": {
        "every": str,
        "concurrency": int,
        "limit": int,
        "since": str,
        "budget_per_day": NUMBER,
        "allow_unpriced": bool,
    },
    "hook": {"deadline": NUMBER, "max_corrections": int, "lag_wait": NUMBER},
    "inject": {"injector": str, "max_corrections": int},
}
TOP_KEYS = {"sources": list}
INJECTOR_KEYS = {
    "url": str,
    "timeout": NUMBER,
    "retries": int,
    "backoff": NUMBER,
    "headers": dict,
    "path": str,
}

EXAMPLE = """\
# auditor's config file. Every key is optional; command-line options win over it.

# What `auditor run --every 15m` ingests on each tick.
sources = ["~/.claude/projects", "~/.codex/sessions"]

[observer]              # for every command that calls an observer (run, hook)
observer = "gemini"     # unset: per agent, a ready observer of another vendor
# allow_same_vendor = false  # true: the agent's own vendor audits it when no other is ready
# model = "gemini-3.1-pro-preview"
# timeout = 120

[gate]
# mode = "end-turn"     # "every-inference": also after each round of tool results
# The busy-turn policy: audit only turns with this many tool calls and a file edit since the
# user wrote. Unset, it holds in end-turn mode (5 and an edit); every-inference mode then looks
# after every round. Set here, it holds in both modes.
# min_tool_calls = 5
# require_edit = true

[run]
every = "15m"
# concurrency = 4       # calls in flight; unset: what the observer suits (embedded model 1)
# budget_per_day = 5.0  # USD; no observer call starts that would cross it (UTC days)

[hook]                  # auditor hook claude-code / codex / gemini-cli
deadline = 30           # seconds; past it the agent stops normally
max_corrections = 2     # corrections in a row between two messages the user typed

[inject]
injector = "stdout"

[injectors.webhook]
url = "http://127.0.0.1:8080/steer"
timeout = 10
retries = 3
"""


def config_path() -> Path:
    """Return the config file's location: `$AUDITOR_CONFIG`, else the per-user default."""
    value = os.environ.get(ENV_VAR)
    if value:
        return Path(value).expanduser()
    import platformdirs

    return Path(platformdirs.user_config_dir("auditor", appauthor=False)) / "config.toml"


class ConfigError(AuditorError):
    """The config file cannot be read or says something auditor does not understand."""


@dataclass
class Config:
    path: Path
    exists: bool
    data: dict[str, Any] = field(default_factory=dict)

    def section(self, name: str) -> dict[str, Any]:
        return dict(self.data.get(name) or {})

    @property
    def sources(self) -> list[str]:
        return [str(Path(p).expanduser()) for p in self.data.get("sources") or []]

    def injector_options(self, name: str) -> dict[str, Any]:
        return dict((self.data.get("injectors") or {}).get(name) or {})

    def default_map(self) -> dict[str, Any]:
        """Return click's `default_map`: the file's values as defaults of the commands' options."""
        observer, gate = self.section("observer"), self.section("gate")
        hook = {**observer, **gate, **self.section("hook")}
        out: dict[str, Any] = {
            "run": {**observer, **gate, **self.section("run")},
            # Every agent's event command (`auditor hook AGENT`, one for each agent a format
            # declares live hooks for: the hook group hands these to it), and the worker the
            # event commands start, which audits.
            "hook": {EVENT_COMMANDS: hook, "worker": dict(hook)},
            "inject": {
                ("via" if k == "injector" else k): v for k, v in self.section("inject").items()
            },
        }
        return {k: v for k, v in out.items() if v}


def _type_name(expected) -> str:
    names = {
        str: "a string",
        int: "an integer",
        bool: "true or false",
        list: "a list",
        dict: "a table",
        NUMBER: "a number",
    }
    return names.get(expected, str(expected))


def _check(path: Path, where: str, table: dict, keys: dict[str, Any]) -> None:
    for key, value in table.items():
        if key not in keys:
            raise ConfigError(
                f"{path}: {key!r} is not a known key of {where}. Valid: {', '.join(sorted(keys))}"
            )
        expected = keys[key]
        ok = isinstance(value, expected) and not (
            expected in (int, NUMBER) and isinstance(value, bool)
        )
        if not ok:
            raise ConfigError(
                f"{path}: {key} in {where} must be {_type_name(expected)}, not {value!r}"
            )


def validate(path: Path, data: dict[str, Any]) -> None:
    """Raise ConfigError naming the first key or value auditor does not understand."""
    for key, value in data.items():
        if key in TOP_KEYS:
            _check(path, "the top level", {key: value}, TOP_KEYS)
        elif key in KEYS:
            if not isinstance(value, dict):
                raise ConfigError(f"{path}: [{key}] must be a table")
            _check(path, f"[{key}]", value, KEYS[key])
        elif key == "injectors":
            if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
                raise ConfigError(f"{path}: injectors must hold tables, e.g. [injectors.webhook]")
            for name, table in value.items():
                _check(path, f"[injectors.{name}]", table, INJECTOR_KEYS)
        else:
            valid = sorted([*TOP_KEYS, *KEYS, "injectors"])
            raise ConfigError(f"{path}: {key!r} is not a known setting. Valid: {', '.join(valid)}")


def load(path: Path | None = None) -> Config:
    """Read and check the config file; a missing file is an empty config."""
    path = path or config_path()
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return Config(path, False)
    except OSError as exc:
        raise ConfigError(f"cannot read the config file {path}: {exc.strerror or exc}") from None
    import tomllib

    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from None
    validate(path, data)
    return Config(path, True, data)
