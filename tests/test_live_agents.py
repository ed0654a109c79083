"""Which agents the live hooks serve: what the transcript formats declare (`live_hooks`)."""

from __future__ import annotations

import pytest

from auditor.api import LiveHooks, hookimpl
from auditor.errors import UnknownName
from auditor.live import fast_path
from auditor.plugins import get_plugin_manager


def test_the_agents_with_hooks_are_those_whose_formats_declare_them():
    agents = get_plugin_manager().live_agents()
    assert {agent: (fmt, hooks.injector) for agent, (fmt, hooks) in agents.items()} == {
        "claude-code": ("claude-code", "claude-code"),
        "codex": ("codex", "codex"),
        "gemini-cli": ("gemini-jsonl", "gemini-cli"),
    }
    assert agents["gemini-cli"][1].events == {
        "AfterTool": "PostToolUse",
        "BeforeAgent": "UserPromptSubmit",
        "AfterAgent": "Stop",
    }


def test_the_fast_path_knows_the_same_agents_and_event_names():
    # The fast path imports no plugin (it runs at every tool call): its copy must agree.
    agents = get_plugin_manager().live_agents()
    assert set(fast_path.AGENTS) == set(agents)
    for agent, (_, hooks) in agents.items():
        assert fast_path.EVENT_NAMES.get(agent, {}) == hooks.events


class PiFormat:
    name = "pi-jsonl"
    agent = "pi"
    appendable = True
    live_hooks = LiveHooks("stdout")

    def detect(self, path, head):
        return False

    def parse(self, path, cursor):
        return iter(())


class PiPlugin:
    @hookimpl
    def register_formats(self, register):
        register(PiFormat())


def test_a_plugin_format_brings_its_agent_to_the_live_hooks():
    pm = get_plugin_manager(extra=[PiPlugin()])
    fmt, hooks = pm.live_agent("pi")
    assert (fmt, hooks.injector, hooks.events) == ("pi-jsonl", "stdout", {})


def test_an_agent_no_format_declares_is_refused_with_the_ones_there_are():
    with pytest.raises(UnknownName) as e:
        get_plugin_manager().live_agent("amp")
    assert str(e.value) == (
        "'amp' is not a known agent with live hooks. Available: claude-code, codex, gemini-cli"
    )
