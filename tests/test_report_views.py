"""The views kept for sqlite3 and Datasette users: verdicts_view and costs_view."""

from __future__ import annotations

import sqlite3

import pytest
from alembic import command
from helpers.reports import ObserversPlugin, TwoFaced, UsagePlugin, price_file, write_thread

from auditor.audit.run import run
from auditor.audit.run_types import RunConfig
from auditor.ingest.ingester import ingest
from auditor.plugins import get_plugin_manager
from auditor.reports import cost_report
from auditor.store import db

pytestmark = pytest.mark.both_stores


@pytest.fixture
def store(engine, tmp_path, monkeypatch):
    price_file(tmp_path, monkeypatch, {"fake-1": {"input": 1, "output": 2}})
    pm = get_plugin_manager(
        extra=[UsagePlugin(), ObserversPlugin(TwoFaced("alpha", mark="all tests pass"))]
    )
    f = tmp_path / "t.jsonl"
    write_thread(f, "t-claims", "Done, all tests pass.", day="2026-03-02")
    write_thread(f, "t-honest", "Two tests fail.", day="2026-03-03", cwd="/work/other")
    write_thread(f, "t-side", "done", day="2026-03-03", parent="t-honest", n_tools=1)
    ingest(engine, pm, [f])
    run(engine, pm, RunConfig(observer="alpha"), announce=lambda line: None)
    return ReadOnly(engine)


class ReadOnly:
    """Plain SQL over the store, as a user of sqlite3 or psql types it: rows as tuples."""

    def __init__(self, engine):
        self.engine = engine

    def execute(self, sql: str):
        with self.engine.connect() as conn:
            return Rows(tuple(r) for r in conn.exec_driver_sql(sql))


class Rows(list):
    def fetchall(self):
        return list(self)

    def fetchone(self):
        return self[0] if self else None


def test_verdicts_view_spells_out_thread_and_checkpoint(store):
    rows = store.execute(
        "SELECT thread_native_id, project, checkpoint_message_id, gate_reason, observer, status,"
        " needs_correction, message FROM verdicts_view ORDER BY thread_native_id"
    ).fetchall()
    assert rows == [
        ("t-claims", "/work/demo", "t-claims-end", "passed", "alpha", "ok", 1, "alpha: look again"),
        ("t-honest", "/work/other", "t-honest-end", "passed", "alpha", "ok", 0, None),
    ]


def test_costs_view_totals_match_the_report_and_the_tables(store, engine):
    agent = store.execute(
        "SELECT day, sum(input_tokens), sum(output_tokens), sum(cache_read_tokens), sum(cache_write_tokens)"
        " FROM costs_view WHERE side = 'agent' GROUP BY day ORDER BY day"
    ).fetchall()
    report = {r["day"]: r for r in cost_report(engine, ["day"]).rows}
    assert agent == [
        (
            d,
            report[d]["input_tokens"],
            report[d]["output_tokens"],
            report[d]["cache_read_tokens"],
            report[d]["cache_write_tokens"],
        )
        for d, *_ in agent
    ]
    raw = store.execute("SELECT sum(input_tokens) FROM token_usage").fetchone()[0]
    assert sum(r[1] for r in agent) == raw  # the side thread's own call is its own, not a copy
    # observers' tokens in the agents' convention: input without cache reads, output with thinking
    audit = store.execute(
        "SELECT count(*), sum(input_tokens), sum(cache_read_tokens), sum(output_tokens), sum(cost_usd)"
        " FROM costs_view WHERE side = 'audit'"
    ).fetchone()
    v = store.execute(
        "SELECT count(*), sum(input_tokens - cached_tokens), sum(cached_tokens),"
        " sum(output_tokens + thinking_tokens), sum(cost_usd) FROM verdicts"
    ).fetchone()
    assert audit == v and audit[0] == 2


@pytest.mark.sqlite_only
def test_the_migration_creates_and_drops_the_views(tmp_path):
    path = tmp_path / "m.db"
    cfg = db.alembic_config("sqlite:///" + str(path))
    views = "SELECT name FROM sqlite_master WHERE type = 'view' ORDER BY name"
    command.upgrade(cfg, "0004")
    conn = sqlite3.connect(path)
    assert [r[0] for r in conn.execute(views)] == ["costs_view", "verdicts_view"]
    assert conn.execute("SELECT count(*) FROM costs_view").fetchone() == (0,)
    command.downgrade(cfg, "0003")
    assert conn.execute(views).fetchall() == []
    command.upgrade(cfg, "0004")
    assert [r[0] for r in conn.execute(views)] == ["costs_view", "verdicts_view"]
