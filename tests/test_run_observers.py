"""A run of several agents' threads: which audits it makes, and its one summary."""

from __future__ import annotations

from test_observer_choice import TOY, Several

from auditor.audit.observer_choice import plan_agents
from auditor.audit.run_observers import merge
from auditor.audit.run_types import RunSummary
from auditor.plugins import get_plugin_manager


def test_agents_that_get_the_same_observer_share_one_audit():
    # Amp declares no vendor, Claude Code does: the why differs, the observer does not.
    plugins = get_plugin_manager(extra=[Several(TOY)])
    groups, refused = plan_agents(plugins, ["amp", "claude-code"], allow_same_vendor=False)
    assert refused == {}
    assert [(c.observer, who) for c, who in groups.items()] == [("toy", ["amp", "claude-code"])]


def test_a_dry_run_of_two_observers_adds_up_estimates_one_of_them_lacks():
    # One observer had nothing to estimate (None), the other's calls take 45 s each.
    empty = RunSummary(None, "alpha", "a-1")
    busy = RunSummary(
        None,
        "beta",
        "b-1",
        gated_in=2,
        est_seconds=90.0,
        est_call_seconds=45.0,
        est_seconds_source="the backend's own figure",
    )
    out = merge([empty, busy], refused={"gemini-cli": "only Google's observer is ready"})
    assert (out.observer, out.gated_in) == ("alpha, beta", 2)
    assert (out.est_seconds, out.est_call_seconds) == (90.0, 45.0)
    assert out.est_seconds_source == "the backend's own figure"
    assert out.refused == {"gemini-cli": "only Google's observer is ready"}


def test_the_embedded_model_is_googles_and_never_audits_gemini_cli_unasked(monkeypatch):
    from dataclasses import replace

    from auditor.api import ObserverNeeds

    # Gemma runs on this machine but comes from Google: offline, yet Google's vendor.
    gemma = replace(TOY, name="gemma", needs=ObserverNeeds(vendor="google", offline=True))
    monkeypatch.setenv("AUDITOR_DISABLE_PLUGINS", "embedded")  # the real one: checked below
    plugins = get_plugin_manager(extra=[Several(gemma)])
    groups, refused = plan_agents(plugins, ["claude-code", "gemini-cli"], allow_same_vendor=False)
    assert [(c.observer, who) for c, who in groups.items()] == [("gemma", ["claude-code"])]
    assert "runs Google's model like the agent" in refused["gemini-cli"]
    monkeypatch.delenv("AUDITOR_DISABLE_PLUGINS")
    assert get_plugin_manager().observers()["embedded"].needs.vendor == "google"
