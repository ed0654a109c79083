"""An observer that answers megabytes: the store keeps a capped copy and the original size.

The observer is the `local` backend (the real openai SDK) against a stub on 127.0.0.1 that
pads every chat.completion with MB of text, as a runaway local model would.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import orjson
import pytest
from helpers.audit import FakeObserver, FakeObserverPlugin, ScriptPlugin, write_script_thread
from helpers.wire import Reply, Stub, openai_response
from sqlalchemy import select

from auditor.audit.run import run
from auditor.audit.run_types import RunConfig
from auditor.ingest.ingester import ingest
from auditor.plugins import get_plugin_manager
from auditor.store import schema as s
from auditor.store.raw_answers import RAW_LIMIT

pytest.importorskip("openai")
MB = 1_000_000


@pytest.fixture
def store(engine, tmp_path):
    pm = get_plugin_manager(extra=[ScriptPlugin()])
    f = tmp_path / "threads.jsonl"
    for n in range(4):
        write_script_thread(f, f"t-{n}", "Done! all tests pass.")
    ingest(engine, pm, [f])
    return engine, pm


def audit(store, tmp_path, body) -> tuple[list, int]:
    """Run the local observer against a stub answering `body`; return verdicts, store growth."""
    engine, pm = store
    before = store_size(engine, tmp_path)
    stub = Stub(Reply(200, body))
    try:
        options = {"base_url": stub.url + "/v1", "max_retries": 0}
        run(
            engine,
            pm,
            RunConfig(observer="local", observer_options=options),
            announce=lambda line: None,
        )
    finally:
        stub.close()
    with engine.connect() as conn:
        rows = conn.execute(select(s.Verdict.__table__).order_by(s.Verdict.id)).all()
    return rows, store_size(engine, tmp_path) - before


def store_size(engine, tmp_path) -> int:
    """What the store holds, its log copied into it first: the log's size counts each page a
    run changed, once per commit, and so measures the page size as much as what was kept."""
    with engine.connect() as conn:
        conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    files = [tmp_path / "auditor.db", tmp_path / "auditor.db-wal"]
    return sum(f.stat().st_size for f in files if f.exists())


def test_a_huge_answer_is_kept_capped_with_its_size(store, tmp_path):
    silent = json.dumps({"needsCorrection": False, "message": None})
    body = openai_response(silent, content="thinking out loud " * (8 * MB // 18))
    answer_bytes = len(json.dumps(body))
    rows, growth = audit(store, tmp_path, body)
    assert [(r.status, r.needs_correction) for r in rows] == [("ok", False)] * 4
    for r in rows:
        assert r.raw_bytes >= answer_bytes * 0.99
        assert len(orjson.dumps(r.raw)) <= RAW_LIMIT
        message = r.raw["choices"][0]["message"]
        assert (
            message["tool_calls"][0]["function"]["arguments"] == silent
        )  # the part that matters stays
        assert (
            message["content"].startswith("thinking out loud")
            and "characters in all]" in message["content"]
        )
    assert growth < 1 * MB, (
        f"4 answers of {answer_bytes / MB:.0f} MB grew the store {growth / MB:.1f} MB"
    )


def test_a_correction_megabytes_long_is_an_invalid_answer(store, tmp_path):
    args = json.dumps({"needsCorrection": True, "message": "Stop" + "!" * (2 * MB - 4)})
    rows, growth = audit(store, tmp_path, openai_response(args))
    assert {(r.status, r.message) for r in rows} == {("invalid", None)}
    assert (
        rows[0].problem == "the message is 2,000,000 characters long; a correction is at most 8,000"
    )
    assert growth < 1 * MB


def test_an_answer_nested_too_deep_for_json_is_kept_as_text(store):
    """orjson stops at 255 levels; such an answer is kept as its (capped) text."""
    engine, _ = store
    deep: list = []
    raw = {"debug": deep}
    for _ in range(300):
        deep.append([])
        deep = deep[0]
    observer = DeepObserver(raw=raw)
    pm = get_plugin_manager(extra=[ScriptPlugin(), FakeObserverPlugin(observer)])
    run(engine, pm, RunConfig(observer="fake"), announce=lambda line: None)
    with engine.connect() as conn:
        rows = conn.execute(select(s.Verdict.__table__)).all()
    assert [(r.status, r.problem) for r in rows] == [("ok", None)] * 4
    assert rows[0].raw.startswith("{'debug': [[[[") and rows[0].raw_bytes == len(repr(raw))


@dataclass
class DeepObserver(FakeObserver):
    raw: Any = None

    async def observe(self, request, options):
        result = await super().observe(request, options)
        result.raw = self.raw
        return result
