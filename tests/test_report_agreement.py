"""`auditor report agreement`: 2x2 table, percent agreement and Cohen's kappa of two observers."""

from __future__ import annotations

import csv
import io
import json

import pytest
from click.testing import CliRunner
from helpers.reports import ObserversPlugin, TwoFaced, UsagePlugin, write_thread

from auditor.audit.run import run
from auditor.audit.run_types import RunConfig
from auditor.cli.main import cli
from auditor.ingest.ingester import ingest
from auditor.plugins import get_plugin_manager
from auditor.reports import agreement_report, cohen_kappa, parse_observer

pytestmark = pytest.mark.both_stores

# A hand-worked example: 50 items; A and B both say "correct" on 20, A alone on 5, B alone on 10,
# neither on 15. Observed agreement po = (20 + 15) / 50 = 0.7. A says "correct" 25/50 = 0.5 of
# the time, B 30/50 = 0.6, so chance agreement pe = 0.5 * 0.6 + 0.5 * 0.4 = 0.5, and
# kappa = (po - pe) / (1 - pe) = (0.7 - 0.5) / 0.5 = 0.4.
HAND = {"AB": 20, "A": 5, "B": 10, "": 15}


def test_kappa_of_the_hand_worked_example():
    assert cohen_kappa([[20, 5], [10, 15]]) == pytest.approx(0.4)
    assert cohen_kappa([[7, 0], [0, 3]]) == pytest.approx(1.0)  # perfect agreement
    assert cohen_kappa([[0, 5], [5, 0]]) == pytest.approx(-1.0)  # perfect disagreement, balanced
    assert cohen_kappa([[9, 0], [0, 0]]) is None  # one answer only: chance agreement is 1
    assert cohen_kappa([[0, 0], [0, 0]]) is None


def test_observer_names_with_models():
    assert parse_observer("gemini") == ("gemini", None)
    assert parse_observer("local:gemma3:270m") == ("local", "gemma3:270m")


@pytest.fixture
def store(engine, tmp_path):
    """50 threads whose final words make alpha and/or beta ask for a correction, as in HAND."""
    alpha, beta = TwoFaced("alpha", mark="[A]"), TwoFaced("beta", mark="[B]")
    pm = get_plugin_manager(extra=[UsagePlugin(), ObserversPlugin(alpha, beta)])
    f = tmp_path / "threads.jsonl"
    for marks, count in HAND.items():
        for i in range(count):
            text = "Done." + (" [A]" if "A" in marks else "") + (" [B]" if "B" in marks else "")
            write_thread(f, f"t-{marks or 'none'}-{i}", text)
    ingest(engine, pm, [f])
    run(engine, pm, RunConfig(observer="alpha"), announce=lambda line: None)
    run(engine, pm, RunConfig(observer="beta"), announce=lambda line: None)
    return engine


def agreement(*args: str, fmt: str = "json"):
    result = CliRunner().invoke(
        cli, ["report", "agreement", *args, "--format", fmt], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    return result.stdout


def test_the_store_gives_the_hand_worked_figures(store):
    out = json.loads(agreement("--observers", "alpha,beta"))
    assert out["checkpoints"] == 50
    assert out["table"] == [[20, 5], [10, 15]]
    assert out["agreement"] == pytest.approx(0.7)
    assert out["kappa"] == pytest.approx(0.4)
    rows = out["rows"]
    assert len(rows) == 15
    alone_a = [r for r in rows if r["a_needs_correction"]]
    assert {r["thread_native_id"] for r in alone_a} == {f"t-A-{i}" for i in range(5)}
    assert all(r["a_message"] == "alpha: look again" and r["b_message"] is None for r in alone_a)
    assert all(
        r["message_id"] == f"{r['thread_native_id']}-end" for r in rows
    )  # the checkpoint's message
    swapped = json.loads(agreement("--observers", "beta:fake-1,alpha:fake-1"))
    assert swapped["table"] == [[20, 10], [5, 15]] and swapped["kappa"] == pytest.approx(0.4)


def test_csv_lists_the_disagreements(store):
    rows = list(csv.DictReader(io.StringIO(agreement("--observers", "alpha,beta", fmt="csv"))))
    assert len(rows) == 15
    assert sum(r["b_needs_correction"] == "True" for r in rows) == 10


def test_table_names_both_messages(store):
    out = agreement("--observers", "alpha,beta", fmt="table")
    assert "agreement 70.0%, Cohen's kappa 0.400" in out
    assert out.count("alpha: look again") == 5 and out.count("beta: look again") == 10


def test_only_valid_answers_count(store, engine, tmp_path):
    gamma = TwoFaced("gamma", mark="[A]", answer="none")  # answers without calling the tool
    pm = get_plugin_manager(extra=[UsagePlugin(), ObserversPlugin(gamma)])
    run(engine, pm, RunConfig(observer="gamma"), announce=lambda line: None)
    rep = agreement_report(engine, "alpha", "gamma")
    assert rep.extra["checkpoints"] == 0 and rep.extra["kappa"] is None
    assert rep.notes == ["no checkpoint has a valid answer from both alpha and gamma"]


def test_unknown_observer_is_named(store):
    result = CliRunner().invoke(cli, ["report", "agreement", "--observers", "alpha,gemni"])
    assert result.exit_code == 2
    assert (
        result.output
        == "Error: 'gemni' is not a known observer with verdicts in this store. Available: alpha, beta\n"
    )
    result = CliRunner().invoke(cli, ["report", "agreement", "--observers", "alpha"])
    assert result.output == "Error: --observers takes two observers, A,B; got 'alpha'\n"


def test_ids_of_disagreements_stay_whole_in_a_narrow_terminal(store):
    import os
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "auditor", "report", "agreement", "--observers", "alpha,beta"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "COLUMNS": "16"},
    ).stdout
    lines = out.splitlines()
    for d in json.loads(agreement("--observers", "alpha,beta"))["rows"]:
        assert f"  at message {d['message_id']}" in lines
