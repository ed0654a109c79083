"""`auditor forget`: threads removed, and kept out of later ingests unless asked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.audit import ScriptPlugin, write_script_thread
from helpers.cli import invoke
from sqlalchemy import func, select

from auditor.ingest.ingester import ingest
from auditor.plugins import get_plugin_manager
from auditor.store import schema as s

pytestmark = pytest.mark.both_stores

SAMPLES = Path(__file__).resolve().parent.parent / "data" / "samples"


def names() -> list[str]:
    return sorted(r["native_id"] for r in json.loads(invoke("threads", "--json").stdout))


def messages(engine) -> int:
    with engine.connect() as conn:
        return conn.scalar(select(func.count()).select_from(s.Message))


def test_a_forgotten_thread_is_gone_and_stays_gone(engine, tmp_path):
    pm = get_plugin_manager(extra=[ScriptPlugin()])
    f = tmp_path / "threads.jsonl"
    write_script_thread(f, "t-keep", "Done.")
    write_script_thread(f, "t-secret", "Done! all tests pass.")
    ingest(engine, pm, [f])
    before = messages(engine)
    said = invoke("forget", "t-secret", ok=True).stdout
    assert said.startswith("forgot 1 thread (14 messages)")
    assert names() == ["t-keep"] and messages(engine) == before - 14
    write_script_thread(f, "t-secret", "More.")  # the file grows: the thread is not back
    summary = ingest(engine, pm, [f])
    assert summary.grown == 1 and names() == ["t-keep"]
    back = ingest(engine, pm, [f], include_forgotten=True)  # unless asked
    assert back.messages > 0 and "t-secret" in names()


def test_forget_the_samples_leaves_the_rest(engine, tmp_path):
    chat = tmp_path / "mine.json"
    chat.write_text(json.dumps({"id": "mine", "messages": [{"role": "user", "content": "hi"}]}))
    invoke("ingest", "-q", str(SAMPLES), str(chat), ok=True)
    assert len(names()) > 2
    said = invoke("forget", "--samples", ok=True).stdout
    assert said.startswith("forgot ")
    assert names() == ["mine"]
    invoke("ingest", "-q", str(SAMPLES), ok=True)
    assert names() == ["mine"]


def test_forget_by_project_or_agent_and_nothing_matching(engine, tmp_path):
    invoke("ingest", "-q", str(SAMPLES), ok=True)
    invoke("forget", "--agent", "amp", ok=True)
    assert not any(n.startswith("T-") for n in names())
    invoke("forget", "--project", "invoicer", ok=True)
    assert "5a3f2c1e-7b8d-4e9f-a0b1-c2d3e4f5a6b7" not in names()
    nothing = invoke("forget", "--project", "no-such-project")
    assert nothing.exit_code == 0 and nothing.stderr == "No thread matches: nothing forgotten.\n"
    refused = invoke("forget")
    assert (
        refused.exit_code == 2 and "give THREAD, --project, --agent or --samples" in refused.output
    )
