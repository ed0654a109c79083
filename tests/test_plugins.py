"""The plugin manager: entry points, disabling, broken plugins, the facade."""

from __future__ import annotations

import importlib.metadata
import inspect
import sys
import types

import pytest

from auditor import hookspecs
from auditor import plugins as plugins_mod
from auditor.audit.checkpoint_plan import CheckpointPlanner
from auditor.audit.checkpoints import END_TURN, Checkpoint
from auditor.errors import PluginError, UnknownName
from auditor.hookspecs import hookimpl
from auditor.store.threads import StoredThread


def _with_extra_entry_point(monkeypatch, name: str, value: str) -> None:
    real = importlib.metadata.entry_points

    def fake(**kwargs):
        eps = list(real(**kwargs))
        if kwargs.get("group") == "auditor":
            eps.append(importlib.metadata.EntryPoint(name=name, value=value, group="auditor"))
        return eps

    monkeypatch.setattr(plugins_mod.importlib.metadata, "entry_points", fake)


def test_builtin_plugins_come_from_entry_points():
    builtin = {
        ep.name
        for ep in importlib.metadata.distribution("auditor").entry_points.select(group="auditor")
    }
    assert {"claude_code", "codex", "amp", "openai_chat"} <= builtin
    described = {info.name: info.dist for info in plugins_mod.get_plugin_manager().describe()}
    assert {name: described.get(name) for name in builtin} == dict.fromkeys(builtin, "auditor")


def test_disabled_plugins_are_not_loaded(monkeypatch):
    monkeypatch.setenv("AUDITOR_DISABLE_PLUGINS", "amp, codex")
    names = {info.name for info in plugins_mod.get_plugin_manager().describe()}
    assert "amp" not in names and "codex" not in names and "claude_code" in names


def test_a_plugin_that_fails_to_import_is_skipped_with_a_warning(monkeypatch):
    _with_extra_entry_point(monkeypatch, "broken", "auditor_no_such_module_for_tests")
    with pytest.warns(UserWarning, match="plugin 'broken'.*AUDITOR_DISABLE_PLUGINS=broken"):
        pm = plugins_mod.get_plugin_manager()
    assert [f.name for f in pm.failures] == ["broken"]
    assert "claude_code" in {info.name for info in pm.describe()}


def test_a_misspelled_hook_fails_loudly(monkeypatch):
    module = types.ModuleType("auditor_test_misspelled")

    @hookimpl
    def register_fromats(register):
        pass

    module.register_fromats = register_fromats
    monkeypatch.setitem(sys.modules, "auditor_test_misspelled", module)
    _with_extra_entry_point(monkeypatch, "typo", "auditor_test_misspelled")
    with pytest.raises(Exception, match="register_fromats"):
        plugins_mod.get_plugin_manager()


def test_a_plugin_registers_a_format_by_name():
    class Fmt:
        name, agent, appendable = "toy", "toy", True

        def detect(self, path, head):
            return False

        def parse(self, path, cursor):
            return iter(())

    class Plugin:
        @hookimpl
        def register_formats(self, register):
            register(Fmt())

    pm = plugins_mod.get_plugin_manager(extra=[Plugin()])
    assert pm.format("toy").agent == "toy"
    with pytest.raises(
        UnknownName, match="'nope' is not a known transcript format. Available: .*toy"
    ):
        pm.format("nope")


def _plugin_module(monkeypatch, entry_point: str, **hooks) -> None:
    """Install a module plugin under an entry-point name, as a third-party package would."""
    module = types.ModuleType(f"auditor_test_{entry_point}")
    for name, fn in hooks.items():
        setattr(module, name, hookimpl(fn))
    monkeypatch.setitem(sys.modules, module.__name__, module)
    _with_extra_entry_point(monkeypatch, entry_point, module.__name__)


class HalfObserver:
    name = "half"

    def check(self, options):
        return None


def test_an_object_missing_part_of_its_protocol_is_refused_naming_the_plugin(monkeypatch):
    def register_observers(register):
        register(HalfObserver())

    _plugin_module(monkeypatch, "halfway", register_observers=register_observers)
    pm = plugins_mod.get_plugin_manager()
    with pytest.raises(PluginError) as err:
        pm.observers()
    assert str(err.value) == (
        "Plugin 'halfway' registered an observer (HalfObserver) without default_model, "
        "observe(): an observer needs name, default_model, check(), observe() "
        "(see auditor.api.Observer)."
    )


@pytest.mark.parametrize(
    "hook, kind, bad",
    [
        ("register_formats", "transcript format", types.SimpleNamespace(name="x", agent="x")),
        ("register_injectors", "injector", types.SimpleNamespace(description="no name")),
    ],
)
def test_every_registry_checks_its_protocol(monkeypatch, hook, kind, bad):
    class Plugin:
        pass

    setattr(Plugin, hook, hookimpl(lambda self, register: register(bad)))
    pm = plugins_mod.get_plugin_manager(extra=[Plugin()])
    registry = {"register_formats": pm.formats, "register_injectors": pm.injectors}[hook]
    with pytest.raises(PluginError, match=rf"^Plugin 'test_plugins.Plugin' registered an? {kind} "):
        registry()


def test_two_plugins_registering_one_name_are_both_named(monkeypatch):
    class Stdout:
        name, description, live = "stdout", "another stdout", False

        def deliver(self, correction, options):
            return "stdout"

    def register_injectors(register):
        register(Stdout())

    _plugin_module(monkeypatch, "copycat", register_injectors=register_injectors)
    with pytest.raises(PluginError) as err:
        plugins_mod.get_plugin_manager().injectors()
    assert str(err.value) == (
        "Two plugins register the injector 'stdout': 'copycat' and 'injectors'. "
        "Disable one with AUDITOR_DISABLE_PLUGINS."
    )


def test_two_plugins_sharing_one_hook_function_are_told_apart(monkeypatch):
    """The plugin to blame is the one whose implementation was called, even where two plugins
    share the very same function (a helper package's hook, re-exported by two plugins)."""

    class Dup(HalfObserver):
        name, default_model = "dup", "d-1"

        async def observe(self, request, options):
            raise NotImplementedError

    def register_observers(register):
        register(Dup())

    _plugin_module(monkeypatch, "first", register_observers=register_observers)
    _plugin_module(monkeypatch, "second", register_observers=register_observers)
    with pytest.raises(PluginError) as err:
        plugins_mod.get_plugin_manager().observers()
    assert "'dup': 'second' and 'first'" in str(err.value)


def test_the_built_in_plugins_fill_every_registry():
    pm = plugins_mod.get_plugin_manager()
    assert {"claude-code", "codex", "amp"} <= set(pm.formats())
    assert {"gemini", "claude", "local"} <= set(pm.observers())
    assert {"claude-code", "stdout", "webhook"} <= set(pm.injectors())


def test_the_core_calls_each_decision_hook_with_the_arguments_its_spec_declares():
    # The planner calls the hook relay through the typed `CheckpointHooks`; every hook that
    # is not a registry is a decision hook and is typed there with its spec's own arguments.
    decisions = [n for n in vars(hookspecs) if hasattr(getattr(hookspecs, n), "auditor_spec")]
    decisions = [n for n in decisions if not n.startswith("register_")]
    assert sorted(decisions) == ["compute_signals", "format_checkpoint", "gate_checkpoint"]
    for name in decisions:
        spec = inspect.signature(getattr(hookspecs, name)).parameters
        typed = inspect.signature(getattr(hookspecs.CheckpointHooks, name)).parameters
        assert list(typed)[1:] == list(spec), name
        assert all(p.kind is p.KEYWORD_ONLY for p in list(typed.values())[1:]), name


@pytest.mark.parametrize("plugin", ["gate", "formatter"])
def test_with_a_built_in_decision_plugin_disabled_planning_says_which(monkeypatch, plugin):
    monkeypatch.setenv("AUDITOR_DISABLE_PLUGINS", plugin)
    planner = CheckpointPlanner(plugins_mod.get_plugin_manager())
    cp = Checkpoint(1, 0, "m-1", END_TURN)
    thread = StoredThread(1, "claude-code", "t-1")
    decide = planner.gate if plugin == "gate" else planner.render
    with pytest.raises(PluginError, match=f"is the built-in '{plugin}' plugin disabled"):
        decide(cp, thread, [])
