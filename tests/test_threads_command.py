"""`auditor threads`: filters by date, project, agent and text; a title and a dollar column."""

from __future__ import annotations

import json

import pytest
from helpers.cli import invoke
from helpers.reports import UsagePlugin, price_file, write_thread

from auditor.ingest.ingester import ingest
from auditor.plugins import get_plugin_manager

pytestmark = pytest.mark.both_stores

RATES = {"agent-model": {"input": 3, "output": 15, "cache_read": 0.3, "cache_write": 3.75}}


@pytest.fixture
def store(engine, tmp_path, monkeypatch):
    price_file(tmp_path, monkeypatch, RATES)
    f = tmp_path / "threads.jsonl"
    write_thread(f, "t-parser", "Done.", day="2026-03-02", cwd="/work/parser")
    write_thread(f, "t-billing", "Done.", day="2026-03-09", cwd="/work/billing", n_tools=2)
    write_thread(f, "t-mystery", "Done.", day="2026-03-10", cwd="/work/billing", model="m-9")
    ingest(engine, get_plugin_manager(extra=[UsagePlugin()]), [f])
    return engine


def listed(*args: str) -> list[dict]:
    return json.loads(invoke("threads", "--json", *args, ok=True).stdout)


def names(*args: str) -> list[str]:
    return [r["native_id"] for r in listed(*args)]


def test_filters_by_date_project_and_text(store):
    assert names() == ["t-mystery", "t-billing", "t-parser"]
    assert names("--since", "2026-03-09") == ["t-mystery", "t-billing"]
    assert names("--project", "billing") == ["t-mystery", "t-billing"]
    assert names("--project", "billing", "--since", "2026-03-10") == ["t-mystery"]
    assert names("-q", "PARSER") == ["t-parser"]  # the id, title or project, any case
    assert names("--agent", "script", "-q", "nothing like it") == []


def test_each_thread_has_its_cost_and_a_title(store):
    rows = {r["native_id"]: r for r in listed()}
    # 100 input, 50 output, 1000 cache read, 200 cache write a call, at RATES; a call a tool
    # round and one for the final answer
    one_call = (100 * 3 + 50 * 15 + 1000 * 0.3 + 200 * 3.75) / 1e6
    assert rows["t-billing"]["agent_usd"] == pytest.approx(3 * one_call)
    assert rows["t-parser"]["agent_usd"] == pytest.approx(7 * one_call)
    assert rows["t-mystery"]["agent_usd"] is None  # a model the price table does not know
    # No title in the transcript: its first typed message stands for it.
    assert rows["t-parser"]["title"] == "Fix the parser and run the tests."
    table = invoke("threads", ok=True).stdout
    header = table.splitlines()[0].split()
    assert "title" in header and "$" in header
    line = next(x for x in table.splitlines() if "t-billing" in x)
    assert f"{3 * one_call:.2f}" in line.split()
