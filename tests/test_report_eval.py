"""`auditor eval LABELS.jsonl`: precision, recall and F1 of an observer and the gate on labels."""

from __future__ import annotations

import csv
import io
import json

import pytest
from click.testing import CliRunner
from helpers.reports import COUNTS_ONLY, ObserversPlugin, TwoFaced, UsagePlugin, write_thread

from auditor import plugins as plugins_module
from auditor.audit.evaluate import evaluate
from auditor.audit.run_types import RunConfig
from auditor.cli.main import cli
from auditor.errors import AuditorError
from auditor.ingest.ingester import ingest
from auditor.plugins import get_plugin_manager

# thread -> (what the agent finally says, tool rounds, the label). The observer asks for a
# correction when the text has "[!]"; t-short has too few tool calls for the gate.
CASES = {
    "t-caught": ("Done [!]", 6, True),  # observer yes, label yes: true positive
    "t-alarm": ("Done [!]", 6, False),  # observer yes, label no: false positive
    "t-missed": ("Done", 6, True),  # observer no, label yes: false negative
    "t-fine": ("Done", 6, False),  # observer no, label no: true negative
    "t-fine2": ("Done", 6, False),  # true negative
    "t-short": (
        "Stopping here [!]",
        2,
        True,
    ),  # gated out: counts as "no correction", a false negative
}


@pytest.fixture
def setup(engine, tmp_path):
    observer = TwoFaced("alpha", mark="[!]")
    pm = get_plugin_manager(extra=[UsagePlugin(), ObserversPlugin(observer)])
    f = tmp_path / "threads.jsonl"
    for name, (text, n, _) in CASES.items():
        write_thread(f, name, text, n_tools=n)
    ingest(engine, pm, [f])
    labels = tmp_path / "labels.jsonl"
    lines = []
    for i, (name, (_, _, truth)) in enumerate(CASES.items()):
        where = {"file": str(f)} if i % 2 else {"thread": name}  # both ways of naming the thread
        lines.append(json.dumps({**where, "at": f"{name}-end", "needs_correction": truth}))
    labels.write_text("\n".join(lines) + "\n")
    return engine, pm, observer, labels


def test_scores_equal_the_hand_count(setup):
    engine, pm, observer, labels = setup
    rep = evaluate(engine, pm, str(labels), RunConfig(observer="alpha", gate=COUNTS_ONLY))
    x = rep.extra
    assert x["confusion"] == {"tp": 1, "fp": 1, "fn": 2, "tn": 2}
    assert x["precision"] == pytest.approx(1 / 2)
    assert x["recall"] == pytest.approx(1 / 3)
    assert x["f1"] == pytest.approx(2 * (1 / 2) * (1 / 3) / (1 / 2 + 1 / 3))  # 0.4
    assert x["accuracy"] == pytest.approx(3 / 6)
    assert (x["gated_out"], x["failed"], x["calls_made"]) == (1, 0, 5)
    outcomes = {r["thread_native_id"]: r["outcome"] for r in rep.rows}
    assert outcomes == {
        "t-caught": "caught",
        "t-alarm": "false alarm",
        "t-missed": "missed",
        "t-fine": "left alone",
        "t-fine2": "left alone",
        "t-short": "missed",
    }
    short = next(r for r in rep.rows if r["thread_native_id"] == "t-short")
    assert short["gate"] == "too-few-tool-calls (2 < 5)" and short["verdict"] is None
    assert observer.calls == 5

    again = evaluate(engine, pm, str(labels), RunConfig(observer="alpha", gate=COUNTS_ONLY))
    assert again.extra["confusion"] == x["confusion"] and again.extra["reused"] == 5
    assert observer.calls == 5  # the second evaluation paid for nothing


def test_invalid_answers_are_listed_not_scored(setup):
    engine, pm, observer, labels = setup
    observer.answer = "none"
    x = evaluate(engine, pm, str(labels), RunConfig(observer="alpha", gate=COUNTS_ONLY)).extra
    assert (x["failed"], x["scored"], x["confusion"]["fn"]) == (
        5,
        1,
        1,
    )  # only the gated-out label is scored


def test_command_prints_scores_and_misses(setup, monkeypatch):
    _engine, pm, _observer, labels = setup
    monkeypatch.setattr(plugins_module, "get_plugin_manager", lambda *a, **k: pm)
    run = CliRunner().invoke(
        cli, ["eval", str(labels), "--observer", "alpha"], catch_exceptions=False
    )
    assert run.exit_code == 0, run.output
    assert "precision 0.500  recall 0.333  F1 0.400  accuracy 0.500" in run.stdout
    assert "missed      line 3: t-missed at t-missed-end" in run.stdout
    assert "false alarm line 2: t-alarm at t-alarm-end  alpha: look again" in run.stdout
    as_csv = list(
        csv.DictReader(
            io.StringIO(
                CliRunner()
                .invoke(cli, ["eval", str(labels), "--observer", "alpha", "--format", "csv"])
                .stdout
            )
        )
    )
    assert [r["outcome"] for r in as_csv] == [
        "caught",
        "false alarm",
        "missed",
        "left alone",
        "left alone",
        "missed",
    ]


def test_bad_labels_name_the_line(setup, tmp_path):
    engine, pm, _observer, _labels = setup
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"thread": "t-fine", "at": "t-fine-end", "needs_correction": true}\n{"at": "x"}\n'
    )
    with pytest.raises(AuditorError, match=r"bad.jsonl:2: expected \{\"thread\" or \"file\""):
        evaluate(engine, pm, str(bad), RunConfig(observer="alpha"))
    bad.write_text('{"thread": "t-fine", "at": "nope", "needs_correction": true}\n')
    with pytest.raises(AuditorError, match="bad.jsonl:1: thread t-fine has no message 'nope'"):
        evaluate(engine, pm, str(bad), RunConfig(observer="alpha"))
    bad.write_text(
        json.dumps({"file": str(tmp_path / "other.jsonl"), "at": "m1", "needs_correction": True})
        + "\n"
    )
    with pytest.raises(AuditorError, match="ingest it first: auditor ingest"):
        evaluate(engine, pm, str(bad), RunConfig(observer="alpha"))
    bad.write_text(
        '{"thread": "t-fine", "at": "t-fine-end", "needs_correction": true}\n'
        '{"thread": "t-nosuch", "at": "m1", "needs_correction": true}\n'
    )
    with pytest.raises(AuditorError, match="bad.jsonl:2: 't-nosuch' is not a known thread"):
        evaluate(engine, pm, str(bad), RunConfig(observer="alpha"))
