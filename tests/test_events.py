"""The event log: what ingest and run write, and `auditor events`."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from helpers.audit import FakeObserver, FakeObserverPlugin, ScriptPlugin, write_script_thread

from auditor.audit.run import run
from auditor.audit.run_types import RunConfig
from auditor.cli import main as cli_mod
from auditor.errors import AuditorError, UnknownName
from auditor.ingest.ingester import ingest
from auditor.plugins import get_plugin_manager
from auditor.store.events import TYPES, list_events, record

pytestmark = pytest.mark.both_stores


@pytest.fixture
def fake():
    return FakeObserver()


@pytest.fixture
def pm(fake):
    return get_plugin_manager(extra=[ScriptPlugin(), FakeObserverPlugin(fake)])


@pytest.fixture
def threads_file(tmp_path):
    f = tmp_path / "threads.jsonl"
    write_script_thread(f, "t-claims", "Done! all tests pass.")
    write_script_thread(f, "t-honest", "One test still fails; here is why.")
    return f


def types_of(engine, **kw) -> list[str]:
    return [e["type"] for e in reversed(list_events(engine, limit=None, **kw))]


def test_ingest_logs_each_file_it_read_and_each_it_could_not(engine, pm, threads_file, tmp_path):
    bad = tmp_path / "notes.json"
    bad.write_text('{"not": "a transcript"}')
    ingest(engine, pm, [threads_file, bad])
    events = list(reversed(list_events(engine)))
    assert [(e["type"], e["subject"]) for e in events] == [
        ("ingested", str(threads_file)),
        ("error", str(bad)),
    ]
    assert events[0]["data"] == {"status": "new", "format": "script", "messages": 28}
    assert "unknown transcript format" in events[1]["data"]["first_problem"]
    ingest(engine, pm, [threads_file])  # unchanged: nothing happened, nothing logged
    assert len(list_events(engine)) == 2


def test_a_run_logs_start_gate_decisions_verdicts_corrections_and_end(engine, pm, threads_file):
    ingest(engine, pm, [threads_file])
    summary = run(engine, pm, RunConfig(observer="fake"), announce=lambda line: None)
    run_types = types_of(engine, run_id=summary.run_id)
    assert run_types[0] == "run-started" and run_types[-1] == "run-finished"
    assert (
        run_types.count("gated") == 2
        and run_types.count("audited") == 2
        and run_types.count("corrected") == 1
    )
    corrected = list_events(engine, types=["corrected"])[0]
    assert corrected["subject"] == "the tests failed, look again"
    assert corrected["verdict_id"] and corrected["checkpoint_id"] and corrected["thread_id"]
    finished = list_events(engine, types=["run-finished"])[0]
    assert finished["data"]["status"] == "done" and finished["data"]["corrections"] == 1
    gated = list_events(engine, types=["gated"])[0]
    assert gated["data"]["audit"] is True and gated["data"]["reason"] == "passed"


def test_an_unchanged_gate_decision_is_not_logged_again_a_changed_one_is(engine, pm, threads_file):
    ingest(engine, pm, [threads_file])
    run(engine, pm, RunConfig(observer="fake"), announce=lambda line: None)
    run(engine, pm, RunConfig(observer="fake"), announce=lambda line: None)
    assert len(list_events(engine, types=["gated"])) == 2
    run(
        engine,
        pm,
        RunConfig(observer="fake", gate={"min_tool_calls": 50}),
        announce=lambda line: None,
    )
    changed = list_events(engine, types=["gated"], limit=2)
    assert {(e["data"]["audit"], e["data"]["was"]) for e in changed} == {(False, "passed")}


def test_a_dry_run_leaves_the_event_log_alone(engine, pm, threads_file):
    ingest(engine, pm, [threads_file])
    logged = list_events(engine, limit=None)
    dry = run(engine, pm, RunConfig(observer="fake", dry_run=True), announce=lambda line: None)
    assert dry.gated_in == 2
    assert list_events(engine, limit=None) == logged
    real = run(engine, pm, RunConfig(observer="fake"), announce=lambda line: None)
    assert types_of(engine, run_id=real.run_id).count("gated") == 2  # the run still logs them


def test_failed_observer_calls_are_logged_as_errors(engine, pm, fake, threads_file):
    ingest(engine, pm, [threads_file])
    fake.answer = "raise"
    run(engine, pm, RunConfig(observer="fake"), announce=lambda line: None)
    errors = list_events(engine, types=["error"])
    assert len(errors) == 2 and errors[0]["subject"] == "ConnectionError: observer unreachable"
    assert errors[0]["data"]["status"] == "error"


def test_record_checks_the_type_and_list_checks_the_filter(engine):
    with engine.begin() as conn:
        record(conn, "injected", verdict_id=3, subject="x" * 400)
        with pytest.raises(AuditorError, match="not a valid event type"):
            record(conn, "Not Valid")
    (event,) = list_events(engine)
    assert (
        len(event["subject"]) == 300
        and event["subject"].endswith("…")
        and event["at"].endswith("Z")
    )
    with pytest.raises(
        UnknownName, match="'bogus' is not a known event type. Available: .*injection-failed"
    ):
        list_events(engine, types=["bogus"])
    assert {
        "ingested",
        "gated",
        "audited",
        "corrected",
        "injected",
        "injection-failed",
        "error",
    } <= set(TYPES)


def test_the_events_command(engine, pm, threads_file, monkeypatch):
    ingest(engine, pm, [threads_file])
    run(engine, pm, RunConfig(observer="fake"), announce=lambda line: None)
    runner = CliRunner()
    out = runner.invoke(
        cli_mod.cli,
        ["events", "--json", "--type", "corrected", "--limit", "5"],
        catch_exceptions=False,
    )
    assert out.exit_code == 0
    (row,) = json.loads(out.stdout)
    assert row["type"] == "corrected" and row["subject"] == "the tests failed, look again"
    table = runner.invoke(cli_mod.cli, ["events", "--limit", "0"]).stdout.splitlines()
    # newest first, as --help says and as --json lists them
    assert "run-finished" in table[0] and "ingested" in table[-1] and "verdict=" in "\n".join(table)
    by_thread = json.loads(
        runner.invoke(cli_mod.cli, ["events", "--json", "--thread", "t-claims"]).stdout
    )
    assert by_thread and {e["thread_id"] for e in by_thread} == {by_thread[0]["thread_id"]}
    bad = runner.invoke(cli_mod.cli, ["events", "--type", "bogus"])
    assert bad.exit_code == 2 and "'bogus' is not a known event type" in bad.output
    assert "--type TYPE" in runner.invoke(cli_mod.cli, ["events", "--help"]).output
