"""The plugin manager: entry points, disabling, broken plugins, the facade."""

from __future__ import annotations

import importlib.metadata
import sys
import types

import pytest

from auditor import plugins as plugins_mod
from auditor.errors import UnknownName
from auditor.hookspecs import hookimpl


def _with_extra_entry_point(monkeypatch, name: str, value: str) -> None:
    real = importlib.metadata.entry_points

    def fake(**kwargs):
        eps = list(real(**kwargs))
        if kwargs.get("group") == "auditor":
            eps.append(importlib.metadata.EntryPoint(name=name, value=value, group="auditor"))
        return eps

    monkeypatch.setattr(plugins_mod.importlib.metadata, "entry_points", fake)


def test_builtin_plugins_come_from_entry_points():
    pm = plugins_mod.get_plugin_manager()
    names = {info.name for info in pm.describe()}
    assert {"claude_code", "codex", "amp", "openai_chat"} <= names
    assert all(info.dist == "auditor" for info in pm.describe() if info.name in names)


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
