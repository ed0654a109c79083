"""Prices kept in the store for reports: refreshed when their sources change, read otherwise."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers.reports import UsagePlugin, price_file, write_thread
from sqlalchemy import text

from auditor.ingest.ingester import ingest
from auditor.plugins import get_plugin_manager
from auditor.reports import cost_report

RATES = {"agent-model": {"input": 3, "output": 15, "cache_read": 0.3, "cache_write": 3.75}}
# 7 calls (6 tool rounds and the final claim) of 100 input, 50 output, 1000 cache read, 200 write.
USD = 7 * (100 * 3 + 50 * 15 + 1000 * 0.3 + 200 * 3.75) / 1e6


@pytest.fixture
def store(engine, tmp_path, monkeypatch):
    price_file(tmp_path, monkeypatch, RATES)
    log = tmp_path / "usage.jsonl"
    write_thread(log, "one", "Done.", day="2026-03-02")
    ingest(engine, get_plugin_manager(extra=[UsagePlugin()]), [log])
    return tmp_path / "prices.json"


def stored_rates(engine) -> dict[str, str]:
    with engine.connect() as conn:
        return dict(conn.execute(text("SELECT model, input FROM price_rates WHERE band = 0")).all())


def test_a_changed_override_file_is_picked_up_by_the_next_report(store, engine):
    assert cost_report(engine, ["day"]).total["agent_usd"] == pytest.approx(USD)
    assert stored_rates(engine) == {"agent-model": "0.000003"}
    # Same size, and likely the same mtime: only the content tells the change.
    store.write_text(json.dumps({"agent-model": {**RATES["agent-model"], "input": 6}}))
    assert cost_report(engine, ["day"]).total["agent_usd"] == pytest.approx(USD + 7 * 100 * 3 / 1e6)
    assert stored_rates(engine) == {"agent-model": "0.000006"}
    store.unlink()  # AUDITOR_PRICES still names it
    with pytest.raises(Exception, match="which does not exist"):
        cost_report(engine, ["day"])


def test_a_model_the_override_file_stops_pricing_is_priced_again(store, engine):
    assert cost_report(engine, ["day"]).total["agent_usd"] == pytest.approx(USD)
    store.write_text(json.dumps({"other-model": {"input": 1, "output": 1}}))
    report = cost_report(engine, ["day"])
    assert report.total["agent_usd"] is None
    assert [u["model"] for u in report.extra["unknown_models"]] == ["agent-model"]
    assert stored_rates(engine) == {"agent-model": None}


def test_a_warm_report_imports_no_price_table(store, tmp_path):
    """The first report works the prices out from genai-prices; the next one reads the store."""

    def imported(*args: str) -> set[str]:
        proc = subprocess.run(
            [sys.executable, "-X", "importtime", "-m", "auditor", *args],
            capture_output=True,
            text=True,
            check=True,
        )
        return {line.split("|")[-1].strip() for line in proc.stderr.splitlines()}

    argv = ("--db", str(tmp_path / "auditor.db"), "report", "costs", "--format", "json")
    first = imported(*argv)
    assert "genai_prices.data_snapshot" in first
    warm = imported(*argv)
    assert not {m for m in warm if m.split(".")[0] in ("genai_prices", "alembic", "pydantic")}
