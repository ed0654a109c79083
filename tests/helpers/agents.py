"""The real agent CLIs, installed by .ci/agents from npm at pinned versions.

The live-hook tests run these programs offline against model servers of our own on 127.0.0.1:
what the hooks are proven against is the client a user runs, not a stand-in written from its
documentation. Under CI a missing client fails the test; elsewhere it is skipped with the
command that installs it.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

AGENTS_DIR = Path(os.environ.get("AUDITOR_AGENTS_DIR", Path.home() / ".cache" / "auditor-agents"))


@dataclass(frozen=True)
class Agent:
    folder: str  # as in .ci/agents
    package: str
    version: str
    binary: str

    @property
    def path(self) -> Path:
        return AGENTS_DIR / self.folder / "node_modules" / ".bin" / self.binary


CLAUDE_CODE = Agent("claude-code-2.1.328", "@anthropic-ai/claude-code", "2.1.328", "claude")
CODEX = Agent("codex-0.169.0", "@openai/codex", "0.169.0", "codex")
GEMINI_CLI = Agent("gemini-cli-0.61.0", "@google/gemini-cli", "0.61.0", "gemini")


def require(agent: Agent) -> Path:
    """The agent's executable; skips (fails under CI) when it is not installed."""
    reason = None
    if shutil.which("node") is None:
        reason = "Node.js is not installed"
    elif not agent.path.exists():
        reason = (
            f"{agent.package} {agent.version} is not installed under {AGENTS_DIR} (bash .ci/agents)"
        )
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"CI runs the real-agent tests and {reason}")
        pytest.skip(reason)
    return agent.path
