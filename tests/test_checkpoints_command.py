"""`auditor checkpoints THREAD`: what `prompt --at` takes, with gate decisions and verdicts."""

from __future__ import annotations

import json

import pytest
from helpers.audit import FakeObserver, FakeObserverPlugin, ScriptPlugin, quiet, write_script_thread
from helpers.cli import invoke

from auditor.audit.run import run
from auditor.audit.run_types import RunConfig
from auditor.ingest.ingester import ingest
from auditor.plugins import get_plugin_manager


@pytest.fixture
def store(engine, tmp_path):
    f = tmp_path / "threads.jsonl"
    write_script_thread(f, "t-claims", "Done! all tests pass.")
    write_script_thread(f, "t-short", "Done.", n_tools=2)
    pm = get_plugin_manager(extra=[ScriptPlugin(), FakeObserverPlugin(FakeObserver())])
    ingest(engine, pm, [f])
    return engine, pm


def test_lists_each_checkpoint_with_its_gate_decision_and_verdicts(store):
    engine, pm = store
    before = json.loads(invoke("checkpoints", "t-claims", "--json", ok=True).stdout)
    assert [(c["at"], c["kind"], c["gate"]["audit"], c["verdicts"]) for c in before] == [
        ("t-claims-end", "end-turn", True, [])
    ]
    assert before[0]["gate"]["stored"] is False  # decided now: no run gated it yet
    run(engine, pm, RunConfig(observer="fake"), announce=quiet)
    (after,) = json.loads(invoke("checkpoints", "t-claims", "--json", ok=True).stdout)
    assert after["gate"] == {"audit": True, "reason": "passed", "stored": True}
    (verdict,) = after["verdicts"]
    assert (verdict["observer"], verdict["status"], verdict["needs_correction"]) == (
        "fake",
        "ok",
        True,
    )
    table = invoke("checkpoints", "t-claims", ok=True).stdout
    assert "t-claims-end" in table and "passed" in table and "fake: correction" in table
    # What the table lists is what `prompt --at` takes.
    assert invoke("prompt", "t-claims", "--at", after["at"], ok=True).stdout


def test_the_gate_keeps_out_a_short_turn_and_says_why(store):
    (cp,) = json.loads(invoke("checkpoints", "t-short", "--json", ok=True).stdout)
    assert cp["gate"]["audit"] is False and cp["gate"]["reason"].startswith("too-few-tool-calls")
