"""`auditor report verdicts`: per observer, model and project, checked against the raw tables."""

from __future__ import annotations

import csv
import io
import json
import math

import pytest
from click.testing import CliRunner
from helpers.audit import quiet
from helpers.reports import (
    COUNTS_ONLY,
    ObserversPlugin,
    TwoFaced,
    UsagePlugin,
    price_file,
    write_thread,
)
from sqlalchemy import select, update

from auditor.audit.run import run
from auditor.audit.run_types import RunConfig
from auditor.cli.main import cli
from auditor.ingest.ingester import ingest
from auditor.plugins import get_plugin_manager
from auditor.store import schema as s

pytestmark = pytest.mark.both_stores

CALL_USD = (800 * 1 + 200 * 0.1 + 50 * 2) / 1e6  # TwoFaced's usage at fake-1's rates


@pytest.fixture
def store(engine, tmp_path, monkeypatch):
    """Five threads; alpha audits all, beta (answers without the tool) one, gamma (fails) another."""
    price_file(tmp_path, monkeypatch, {"fake-1": {"input": 1, "output": 2, "cache_read": 0.1}})
    alpha = TwoFaced("alpha", mark="all tests pass")
    beta = TwoFaced("beta", mark="all tests pass", answer="none")
    gamma = TwoFaced("gamma", mark="all tests pass", answer="raise")
    pm = get_plugin_manager(extra=[UsagePlugin(), ObserversPlugin(alpha, beta, gamma)])
    f = tmp_path / "threads.jsonl"
    write_thread(f, "t-claims", "Done! all tests pass.")
    write_thread(f, "t-honest", "One test still fails.")
    write_thread(f, "t-short", "Done! all tests pass.", n_tools=2)
    write_thread(f, "t-noedit", "Looked around; all tests pass.", edit=False)
    write_thread(f, "t-other", "Shipped, all tests pass.", cwd="/work/other")
    ingest(engine, pm, [f])
    run(engine, pm, RunConfig(observer="alpha", gate=COUNTS_ONLY), announce=quiet)
    run(
        engine,
        pm,
        RunConfig(observer="beta", gate=COUNTS_ONLY, threads=["t-honest"]),
        announce=quiet,
    )
    run(
        engine,
        pm,
        RunConfig(observer="gamma", gate=COUNTS_ONLY, threads=["t-claims"]),
        announce=quiet,
    )
    # known latencies for alpha, to check the percentiles
    with engine.begin() as conn:
        ids = conn.scalars(
            select(s.Verdict.id).where(s.Verdict.observer == "alpha").order_by(s.Verdict.id)
        ).all()
        for vid, ms in zip(ids, (300, 100, 200)):
            conn.execute(update(s.Verdict).where(s.Verdict.id == vid).values(latency_ms=ms))
    return engine


def report(*args: str, fmt: str = "json"):
    result = CliRunner().invoke(
        cli, ["report", "verdicts", *args, "--format", fmt], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout) if fmt == "json" else result.stdout


def nearest_rank(values: list[int], p: float) -> int:
    values = sorted(values)
    return values[math.ceil(p / 100 * len(values)) - 1]


def test_per_observer_and_model(store):
    with store.connect() as conn:
        v = conn.execute(select(s.Verdict.__table__)).all()
        cps = conn.execute(select(s.Checkpoint.__table__)).all()
    rows = {(r["observer"], r["model"]): r for r in report()["rows"]}
    assert set(rows) == {("alpha", "fake-1"), ("beta", "fake-1"), ("gamma", "fake-1")}

    alpha = rows["alpha", "fake-1"]
    mine = [x for x in v if x.observer == "alpha"]
    assert (alpha["calls"], alpha["audited"], alpha["invalid"], alpha["errors"]) == (3, 3, 0, 0)
    assert alpha["corrections"] == sum(x.needs_correction for x in mine) == 2
    assert alpha["correction_rate"] == pytest.approx(2 / 3)
    # every checkpoint of the five threads; the two held back by the gate, with their reasons
    assert alpha["seen"] == len(cps) == 5
    assert alpha["gated_out_by_reason"] == {"too-few-tool-calls": 1, "no-file-edit": 1}
    assert (alpha["gated_out"], alpha["gated_in"]) == (2, 3)
    lat = [x.latency_ms for x in mine]
    assert (
        (alpha["latency_p50_ms"], alpha["latency_p95_ms"])
        == (nearest_rank(lat, 50), nearest_rank(lat, 95))
        == (200, 300)
    )
    assert (
        alpha["usd"] == pytest.approx(sum(x.cost_usd for x in mine)) == pytest.approx(3 * CALL_USD)
    )
    assert alpha["usd_per_audit"] == pytest.approx(CALL_USD)
    assert alpha["usd_per_correction"] == pytest.approx(3 * CALL_USD / 2)

    beta = rows["beta", "fake-1"]
    assert (beta["seen"], beta["calls"], beta["audited"], beta["invalid"], beta["corrections"]) == (
        1,
        1,
        0,
        1,
        0,
    )
    assert beta["correction_rate"] is None and beta["usd_per_correction"] is None
    gamma = rows["gamma", "fake-1"]
    assert (gamma["seen"], gamma["calls"], gamma["errors"], gamma["usd"]) == (1, 1, 1, None)
    assert gamma["latency_p50_ms"] is None  # failed calls are not answers

    total = report()["total"]
    assert (
        total["calls"],
        total["audited"],
        total["corrections"],
        total["invalid"],
        total["errors"],
    ) == (5, 3, 2, 1, 1)


def test_per_project(store):
    rows = {(r["observer"], r["project"]): r for r in report("--by", "observer,project")["rows"]}
    assert (
        rows["alpha", "/work/other"]["audited"] == 1
        and rows["alpha", "/work/other"]["corrections"] == 1
    )
    assert rows["alpha", "/work/other"]["seen"] == 1
    demo = rows["alpha", "/work/demo"]
    assert (demo["seen"], demo["gated_out"], demo["audited"], demo["corrections"]) == (4, 2, 2, 1)


def test_csv_parses_back_to_the_json(store):
    as_json = report("--by", "observer")["rows"]
    as_csv = list(csv.DictReader(io.StringIO(report("--by", "observer", fmt="csv"))))
    assert [r["observer"] for r in as_csv] == [r["observer"] for r in as_json]
    for c, j in zip(as_csv, as_json):
        assert int(c["audited"]) == j["audited"] and int(c["seen"]) == j["seen"]
        assert json.loads(c["gated_out_by_reason"]) == j["gated_out_by_reason"]
        assert (float(c["usd"]) if c["usd"] else None) == pytest.approx(j["usd"])


def test_table_shows_each_observer(store):
    result = CliRunner().invoke(cli, ["report", "verdicts"], catch_exceptions=False)
    assert result.exit_code == 0
    lines = [line for line in result.stdout.splitlines() if "alpha" in line]
    assert len(lines) == 1 and "66.7%" in lines[0] and "too-few-tool-calls 1" in lines[0]


def test_since_excludes_older_answers(store):
    assert report("--since", "2999-01-01")["rows"] == []


def test_empty_store_says_how_to_start():
    result = CliRunner().invoke(cli, ["report", "verdicts"], catch_exceptions=False)
    assert result.exit_code == 0
    assert "no observer has been run on this store yet" in result.stderr
