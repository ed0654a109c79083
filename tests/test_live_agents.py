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
    assert fast_path.AGENT_EVENTS == {agent: hooks.events for agent, (_, hooks) in agents.items()}


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


def test_a_plugin_agent_is_installed_where_and_as_its_format_declares(tmp_path, monkeypatch):
    import json

    from auditor.errors import AuditorError
    from auditor.live.install import install, settings_path

    hooks = LiveHooks(
        "stdout",
        {"turn_end": "Stop"},
        hook_events=("tool_done", "turn_end"),
        settings={"project": ".pi/hooks.json", "user": "${PI_HOME:-~/.pi}/hooks.json"},
    )
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("PI_HOME", raising=False)
    assert settings_path("pi", hooks, "user", tmp_path) == tmp_path / "home" / ".pi" / "hooks.json"
    monkeypatch.setenv("PI_HOME", str(tmp_path / "elsewhere"))
    assert settings_path("pi", hooks, "user", tmp_path) == tmp_path / "elsewhere" / "hooks.json"
    with pytest.raises(
        AuditorError, match="pi has no local settings file for hooks; use --project"
    ):
        settings_path("pi", hooks, "local", tmp_path)

    path = settings_path("pi", hooks, "project", tmp_path)
    assert install(path, "pi", hooks, "auditor hook pi", 45)
    installed = json.loads(path.read_text())["hooks"]
    assert {e: [h["command"] for g in gs for h in g["hooks"]] for e, gs in installed.items()} == {
        "tool_done": ["auditor hook pi"],
        "turn_end": ["auditor hook pi --wait"],  # it cannot be woken: its end of a turn waits
    }
    assert not install(path, "pi", hooks, "auditor hook pi", 45)  # twice changes nothing
    assert install(path, "pi", hooks, "auditor hook pi", 45, sync=True)
    assert list(json.loads(path.read_text())["hooks"]) == ["turn_end"]  # only its stop


def test_a_plugin_agents_events_are_spooled_under_the_names_its_format_declares(
    tmp_path, monkeypatch
):
    import json

    # The console script's fast path knows only the shipped agents: another takes the full
    # command line, which hands the fast path the declared event names.
    assert fast_path.split_argv(["hook", "pi"]) is None
    declared = {"pi": {"all_done": "SessionEnd"}}
    assert fast_path.split_argv(["hook", "pi", "-v"], declared) == ([], "pi", ["-v"])

    monkeypatch.setenv(fast_path.STATE_ENV, str(tmp_path))
    raw = json.dumps({"session_id": "s-1", "hook_event_name": "all_done"})
    printed, did = fast_path.handle("pi", raw, [], [], declared["pi"])
    assert (printed, did) == ("", "SessionEnd: recorded")
    spool = fast_path.session_dir(fast_path.state_root(), "pi", "s-1")
    (line,) = open(f"{spool}/{fast_path.EVENTS}").read().splitlines()
    assert json.loads(line)["hook_event_name"] == "SessionEnd"
    assert json.loads(line)["agent_event"] == "all_done"
