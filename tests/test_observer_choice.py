"""Which observer a run takes when none is named: each observer declares what it needs
(`Observer.needs`: its vendor, the variables that hold its key, whether it runs offline), and
the core chooses from those declarations, knowing no backend by name."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from helpers.audit import FakeObserver, FakeObserverPlugin

from auditor.api import ObserverNeeds, hookimpl
from auditor.audit.run_types import choose_observer
from auditor.plugins import get_plugin_manager


@dataclass
class Declared(FakeObserver):
    needs: ObserverNeeds | None = None


class Several:
    def __init__(self, *observers):
        self.observers = observers

    @hookimpl
    def register_observers(self, register):
        for observer in self.observers:
            register(observer)


ALPHA = Declared(name="alpha", needs=ObserverNeeds(vendor="a-lab", key_env=("ALPHA_KEY",), rank=5))
BETA = Declared(
    name="beta", needs=ObserverNeeds(vendor="b-lab", key_env=("BETA_KEY", "BETA_TOKEN"), rank=1)
)
TOY = Declared(
    name="toy", needs=ObserverNeeds(vendor="local", offline=True, caveat="toy verdicts", rank=50)
)


@pytest.fixture
def plugins():
    return get_plugin_manager(extra=[Several(ALPHA, BETA, TOY)])


def test_with_no_key_set_the_offline_observer_of_lowest_rank_is_taken_with_its_caveat(plugins):
    assert choose_observer(plugins, None) == ("toy", "no API key is set; toy verdicts")


def test_an_observer_whose_key_is_set_is_taken_and_the_variable_named(plugins, monkeypatch):
    monkeypatch.setenv("ALPHA_KEY", "k")
    assert choose_observer(plugins, None) == ("alpha", "ALPHA_KEY is set")
    monkeypatch.setenv("BETA_TOKEN", "k")  # any of its variables; the lower rank wins
    assert choose_observer(plugins, None) == ("beta", "BETA_TOKEN is set")


def test_a_name_or_auditor_observer_still_wins_over_every_declaration(plugins, monkeypatch):
    monkeypatch.setenv("BETA_KEY", "k")
    assert choose_observer(plugins, "toy") == ("toy", "chosen with --observer")
    monkeypatch.setenv("AUDITOR_OBSERVER", "alpha")
    assert choose_observer(plugins, None) == ("alpha", "from AUDITOR_OBSERVER")


def test_an_observer_that_declares_nothing_is_taken_only_by_name_or_as_the_only_one(monkeypatch):
    monkeypatch.setenv(
        "AUDITOR_DISABLE_PLUGINS",
        "gemini,claude,local,embedded,claude_cli,codex_cli,gemini_cli_observer",
    )
    silent = FakeObserver(name="silent")
    alone = get_plugin_manager(extra=[FakeObserverPlugin(silent)])
    assert choose_observer(alone, None) == ("silent", "the only installed observer")
    beside = get_plugin_manager(extra=[Several(silent, TOY)])
    assert choose_observer(beside, None)[0] == "toy"


@pytest.mark.parametrize(
    "keys, chosen",
    [
        ({"GOOGLE_API_KEY": "k"}, ("gemini", "GOOGLE_API_KEY is set")),
        ({"ANTHROPIC_API_KEY": "k"}, ("claude", "ANTHROPIC_API_KEY is set")),
        ({"ANTHROPIC_API_KEY": "k", "GEMINI_API_KEY": "k"}, ("gemini", "GEMINI_API_KEY is set")),
    ],
)
def test_the_built_in_observers_declare_their_keys(monkeypatch, keys, chosen):
    for key, value in keys.items():
        monkeypatch.setenv(key, value)
    assert choose_observer(get_plugin_manager(), None) == chosen


def test_the_built_in_observers_declare_their_vendors():
    observers = get_plugin_manager().observers()
    built_in = ("gemini", "claude", "local", "embedded")
    vendors = {name: observers[name].needs.vendor for name in built_in}
    assert vendors == {
        "gemini": "google",
        "claude": "anthropic",
        "local": "local",
        "embedded": "google",  # Gemma: run offline, but Google's model
    }
