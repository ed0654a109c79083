"""Signals: the core type and its storage, the hook facade, `--signal` options, the gate rules."""

from __future__ import annotations

import pytest
from auditor_plugins.gate import decide
from helpers.audit import (
    FakeObserver,
    FakeObserverPlugin,
    ScriptPlugin,
    agent,
    numbered,
    result,
    user,
    write_script_thread,
)
from sqlalchemy import select

from auditor.audit.checkpoint_plan import CheckpointPlanner
from auditor.audit.checkpoints import find_checkpoints
from auditor.audit.run import run
from auditor.audit.run_types import RunConfig
from auditor.errors import AuditorError, PluginError
from auditor.hookspecs import hookimpl
from auditor.ingest.ingester import ingest
from auditor.plugins import get_plugin_manager
from auditor.store import schema as s
from auditor.store.signal_rows import (
    Evidence,
    Signal,
    format_signals,
    parse_options,
    signal_counts,
    thread_signals,
)
from auditor.store.threads import StoredThread

pytestmark = pytest.mark.both_stores

SECRET = "sk-ant-api03-" + "Q" * 40
THREAD = StoredThread(1, "claude-code", "t-1")


def test_a_signal_clamps_its_score_and_redacts_and_shortens_its_excerpts():
    sig = Signal(
        "x",
        1.7,
        [
            ("m1", f"ANTHROPIC_API_KEY={SECRET} " + "word " * 100),
            {"message_id": 2, "excerpt": "ok"},
        ],
    )
    assert sig.score == 1.0 and Signal("y", -3).score == 0.0
    first, second = sig.evidence
    assert SECRET not in first.excerpt and "[REDACTED:" in first.excerpt
    assert len(first.excerpt) <= 160 and first.excerpt.endswith("…")
    assert (second.message_id, second.excerpt) == ("2", "ok")
    assert len(Signal("z", 0.5, [("m", "e")] * 9).evidence) == 5


def test_format_signals_names_each_with_score_and_first_evidence():
    lines = format_signals([Signal("tool-loop", 0.5, [Evidence("m7", "Bash make")])])
    assert lines == ['tool-loop 0.50 [m7] "Bash make"']
    assert format_signals([]) == ["none fired"]


def test_signal_options_from_the_command_line():
    config = parse_options(
        [
            "tool-loop.min_repeats=4",
            'tool-loop.ignore=["Read"]',
            "goal-drift=off",
            "sensitive-data.min_level=SECRET",
        ]
    )
    assert config == {
        "tool-loop": {"min_repeats": 4, "ignore": ["Read"]},
        "disabled": ["goal-drift"],
        "sensitive-data": {"min_level": "SECRET"},
    }
    with pytest.raises(AuditorError, match="use NAME.KEY=VALUE"):
        parse_options(["tool-loop"])
    with pytest.raises(AuditorError, match="can only be turned off"):
        parse_options(["tool-loop=4"])


class Planted:
    """A signal plugin that fires `name` on every checkpoint (and a secret in its evidence)."""

    def __init__(self, name="planted", score=0.9):
        self.name, self.score, self.seen = name, score, []

    @hookimpl
    def compute_signals(self, checkpoint, thread, messages, config):
        self.seen.append(config)
        return [Signal(self.name, self.score, [(messages[-1].native_id, f"token {SECRET}")])]


def test_the_planner_concatenates_every_plugins_signals_strongest_first():
    pm = get_plugin_manager(extra=[Planted("weak", 0.2), Planted("strong", 0.9)])
    messages = numbered([user("fix it"), agent("done")])
    (cp,) = find_checkpoints(1, messages)
    names = [x.name for x in CheckpointPlanner(pm).signals(cp, THREAD, messages)]
    assert names[:2] == ["strong", "weak"]


def test_a_plugin_returning_something_else_is_named():
    class Bad:
        @hookimpl
        def compute_signals(self, checkpoint, thread, messages, config):
            return ["tool-loop"]

    pm = get_plugin_manager(extra=[Bad()])
    messages = numbered([user("fix it"), agent("done")])
    with pytest.raises(PluginError, match="return auditor.api.Signal objects"):
        CheckpointPlanner(pm).signals(find_checkpoints(1, messages)[0], THREAD, messages)


# -- storage through a run -------------------------------------------------------------------


@pytest.fixture
def store(engine, tmp_path):
    f = tmp_path / "threads.jsonl"
    write_script_thread(f, "t-claims", "Done! all tests pass.")
    write_script_thread(f, "t-short", "Stopping here.", n_tools=2)
    ingest(engine, get_plugin_manager(extra=[ScriptPlugin()]), [f])
    return engine


def test_a_run_stores_signals_per_checkpoint_redacted_and_passes_options(store):
    planted = Planted()
    pm = get_plugin_manager(extra=[ScriptPlugin(), FakeObserverPlugin(FakeObserver()), planted])
    run(
        store,
        pm,
        RunConfig(observer="fake", signals={"planted": {"level": 3}}),
        announce=lambda line: None,
    )
    assert planted.seen[0] == {"planted": {"level": 3}}
    with store.connect() as conn:
        rows = conn.execute(select(s.Signal.__table__)).all()
        dump = " ".join(str(tuple(r)) for r in rows)
    planted_rows = [r for r in rows if r.name == "planted"]
    assert len(planted_rows) == 2 and planted_rows[0].score == 0.9
    assert SECRET not in dump and "[REDACTED:anthropic-key]" in dump
    by_message = thread_signals(store, planted_rows[0].thread_id)
    assert "planted" in [x.name for x in next(iter(by_message.values()))]


def test_signals_are_replaced_when_the_checkpoint_is_gated_again(store):
    pm = get_plugin_manager(extra=[ScriptPlugin(), FakeObserverPlugin(FakeObserver()), Planted()])
    run(store, pm, RunConfig(observer="fake"), announce=lambda line: None)
    run(store, pm, RunConfig(observer="fake"), announce=lambda line: None)
    with store.connect() as conn:
        assert len(conn.execute(select(s.Signal.id).where(s.Signal.name == "planted")).all()) == 2


def test_signal_counts_for_reports(store):
    pm = get_plugin_manager(extra=[ScriptPlugin(), FakeObserverPlugin(FakeObserver()), Planted()])
    run(store, pm, RunConfig(observer="fake"), announce=lambda line: None)
    (row,) = [r for r in signal_counts(store) if r["signal"] == "planted"]
    # Two checkpoints fired; the short one was gated out; the fake observer corrects the claim.
    assert row == {
        "signal": "planted",
        "checkpoints": 2,
        "audited": 1,
        "corrections": 1,
        "critiques": 0,
        "critique_corrections": 0,
    }
    assert signal_counts(store, run_id=999)[0]["audited"] == 0


# -- the gate --------------------------------------------------------------------------------

thread = StoredThread(1, "claude-code", "t-1", cwd="/p")
CLAIM = Signal("claimed-success-after-failure", 0.7)


def short_turn():
    messages = numbered(
        [
            user("fix it"),
            agent(tools=[("Edit", True)]),
            result("1 failed", error=True),
            agent("Done."),
        ]
    )
    return find_checkpoints(1, messages)[0]


def busy_turn(edits: int):
    messages = [user("fix it")]
    for i in range(6):
        messages += [
            agent(tools=[("Edit", i < edits) if i < edits else ("Read", False)]),
            result(f"r{i}"),
        ]
    return find_checkpoints(1, numbered(messages + [agent("Done")]))[0]


def test_claimed_success_after_failure_is_audited_under_the_tool_call_threshold():
    cp = short_turn()
    assert decide(cp, thread, {}).reason == "too-few-tool-calls (1 < 5)"
    assert decide(cp, thread, {}, [CLAIM]).reason == "signal (claimed-success-after-failure)"
    assert (
        decide(cp, thread, {"audit_on_signals": []}, [CLAIM]).reason == "too-few-tool-calls (1 < 5)"
    )
    assert decide(cp, thread, {"audit_on_signals": ["tool-loop"]}, [Signal("tool-loop", 0.5)]).audit


def test_the_forcing_rule_never_overrides_loop_prevention_or_allow_lists():
    cp = short_turn()
    cp.after_correction = True
    # Checked by the core before any gate, the built-in one included.
    assert (
        CheckpointPlanner(get_plugin_manager()).gate(cp, thread, [], [CLAIM]).reason
        == "after-correction"
    )
    assert (
        decide(short_turn(), thread, {"agents": ["codex"]}, [CLAIM]).reason
        == "agent-not-allowed (claude-code)"
    )


def test_quiet_checkpoints_with_few_edits_are_skipped_only_when_asked():
    one_edit, three_edits = busy_turn(1), busy_turn(3)
    assert decide(one_edit, thread, {}).reason == "passed"  # off by default
    assert (
        decide(one_edit, thread, {"skip_quiet_below_edits": 2}).reason
        == "quiet (1 < 2 edits, no signal)"
    )
    assert decide(one_edit, thread, {"skip_quiet_below_edits": 2}, [Signal("tool-loop", 0.5)]).audit
    assert decide(three_edits, thread, {"skip_quiet_below_edits": 2}).audit


def test_the_gate_hook_receives_the_signals(store):
    seen = []

    class Gate:
        @hookimpl
        def gate_checkpoint(self, checkpoint, thread, messages, config, signals):
            seen.append([x.name for x in signals])

    pm = get_plugin_manager(
        extra=[ScriptPlugin(), FakeObserverPlugin(FakeObserver()), Planted(), Gate()]
    )
    run(store, pm, RunConfig(observer="fake", dry_run=True), announce=lambda line: None)
    assert seen and all("planted" in names for names in seen)


def test_prompt_and_show_print_the_signals(store, monkeypatch):
    from click.testing import CliRunner

    from auditor.cli import main as cli_mod

    pm = get_plugin_manager(extra=[ScriptPlugin(), Planted()])
    monkeypatch.setattr(cli_mod.Context, "plugins", property(lambda self: pm))
    runner = CliRunner()
    out = runner.invoke(
        cli_mod.cli, ["prompt", "t-claims", "--at", "t-claims-end"], catch_exceptions=False
    )
    assert out.exit_code == 0
    header = [line for line in out.stderr.splitlines() if line.startswith("<!-- signals:")]
    assert (
        header
        and '[t-claims-end] "token [REDACTED:anthropic-key]"' in header[0]
        and SECRET not in out.stderr
    )
    shown = runner.invoke(cli_mod.cli, ["show", "t-claims"], catch_exceptions=False)
    # in place, right after the checkpoint's message, on stdout (issue 13 item 3)
    assert "⚑ signal planted 0.90" in shown.stdout and shown.stderr == ""
    lines = shown.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if "[t-claims-end]" in line)
    assert next(line for line in lines[at:] if line.startswith("⚑ ")).startswith("⚑ signal planted")


def test_the_built_in_signals_load_their_checks_only_when_one_is_computed():
    """Every command loads every plugin; the signal checks (their patterns compiled at import)
    are loaded at the first checkpoint, and each signal the plugin names has one."""
    import subprocess
    import sys

    probe = (
        "import sys, auditor_plugins.signals as s\n"
        "print(sorted(m for m in sys.modules if m.startswith('auditor_plugins.signals_')))\n"
        "print(list(s._checks()) == s.NAMES)"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.split("\n")
    assert out[:2] == ["[]", "True"]
