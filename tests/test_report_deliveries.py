"""`auditor report deliveries` (issue 21 item 7): what became of each correction, and why."""

from __future__ import annotations

import io
import json

import pytest
from helpers.audit import FakeObserver, FakeObserverPlugin, ScriptPlugin, quiet, write_script_thread
from helpers.cli import invoke
from sqlalchemy import insert, select

from auditor.audit.run import run
from auditor.audit.run_types import RunConfig
from auditor.ingest.ingester import ingest
from auditor.live import delivery as inj
from auditor.plugins import get_plugin_manager
from auditor.reports import delivery_report
from auditor.store import schema as s
from auditor.store.threads import load_messages

pytestmark = pytest.mark.both_stores


@pytest.fixture
def fates(engine, tmp_path):
    """Three corrections: one delivered, one a live hook took back, one the user answered
    (held); and one live audit cancelled in flight."""
    pm = get_plugin_manager(extra=[ScriptPlugin(), FakeObserverPlugin(FakeObserver())])
    f = tmp_path / "a.jsonl"
    for thread in ("t-sent", "t-taken", "t-answered"):
        write_script_thread(f, thread, "Done! all tests pass.")
    with open(f, "a") as fh:
        row = {"script": 1, "thread": "t-answered", "id": "t-thanks", "role": "user"}
        fh.write(json.dumps({**row, "text": "thanks"}) + "\n")
    ingest(engine, pm, [f])
    run(engine, pm, RunConfig(observer="fake"), announce=quiet)
    [taken] = [c for c in inj.pending(engine) if c.thread == "t-taken"]
    key, _ = inj.turn_facts(load_messages(engine, taken.thread_id), taken.checkpoint_message)
    with engine.begin() as conn:
        inj.record(
            conn, taken, "claude-code", inj.SKIPPED, key, error=inj.taken_back("UserPromptSubmit")
        )
        v = s.Verdict.__table__
        first = conn.execute(select(v).limit(1)).mappings().one()
        conn.execute(
            insert(v).values(
                {
                    **{k: first[k] for k in first.keys() if k != "id"},
                    "status": "cancelled",
                    "needs_correction": None,
                    "message": None,
                    "problem": inj.cancelled("the user wrote (UserPromptSubmit)", 2.5),
                }
            )
        )
    inj.inject_pending(engine, pm.injector("stdout"), {"stream": io.StringIO()})
    return engine


def test_each_correction_is_counted_once_by_what_became_of_it_and_why(fates):
    report = delivery_report(fates, ["agent", "observer"])
    [row] = report.rows
    assert (row["agent"], row["observer"]) == ("script", "fake")
    counts = {c: row[c] for c in ("corrections", "delivered", "taken_back", "held", "pending")}
    assert counts == {"corrections": 3, "delivered": 1, "taken_back": 1, "held": 1, "pending": 0}
    assert row["cancelled"] == 1 and row["failed"] == 0
    assert row["why"] == {
        "taken back: UserPromptSubmit": 1,
        "held: user-wrote-again": 1,
        "cancelled: the user wrote (UserPromptSubmit)": 1,
    }


def test_the_command_groups_by_agent_observer_and_day(fates):
    out = invoke("report", "deliveries", "--format", "json", ok=True)
    report = json.loads(out.output)
    assert report["by"] == ["agent", "observer", "day"]
    [row] = report["rows"]
    assert len(row["day"]) == 10 and row["delivered"] == 1 and row["taken_back"] == 1
    table = invoke("report", "deliveries", "--by", "observer", ok=True).output
    assert "taken back" in table and "held: user-wrote-again 1" in table
    bad = invoke("report", "deliveries", "--by", "thread")
    assert bad.exit_code != 0 and "'thread' is not a dimension of this report" in bad.output
