"""A thread's cached aggregates (message and tool-call counts, first and last timestamps,
models) after a transcript grows a few lines at a time, as a live session's hooks ingest it:
brought up to date from the new rows alone, they equal a recount over every row."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from auditor.ingest.bulk_rows import refresh_threads
from auditor.ingest.ingester import ingest
from auditor.plugins import get_plugin_manager
from auditor.store import schema as s
from auditor.store.db import open_db

pytestmark = [pytest.mark.both_stores, pytest.mark.corpus]

SESSION = "claude-code/marot-spotter/4d5611e5-241a-462a-8d15-5122611a9569.jsonl"
SUBAGENT = "claude-code/marot-spotter/subagent.jsonl"


def columns() -> tuple:
    """A thread's native id and the aggregates ingest keeps for it."""
    t = s.Thread.__table__
    return (
        t.c.native_id,
        t.c.message_count,
        t.c.tool_call_count,
        t.c.file_edit_count,
        t.c.started_at,
        t.c.ended_at,
        t.c.models,
    )


def aggregates(engine) -> dict:
    with engine.connect() as conn:
        return {row[0]: tuple(row[1:]) for row in conn.execute(select(*columns()))}


def recounted(engine) -> dict:
    """The aggregates a full recount of every thread gives (rolled back after reading)."""
    with engine.connect() as conn:
        ids = [i for (i,) in conn.execute(select(s.Thread.id))]
        if ids:
            refresh_threads(conn, ids)
        rows = conn.execute(select(*columns()))
        found = {row[0]: tuple(row[1:]) for row in rows}
        conn.rollback()
    return found


def test_appended_lines_update_aggregates_as_a_recount_would(corpus, tmp_path, store_url):
    engine, plugins = open_db(store_url), get_plugin_manager()
    sources = {
        name: (corpus / name).read_bytes().splitlines(keepends=True) for name in (SESSION, SUBAGENT)
    }
    grown = {name: tmp_path / name.rsplit("/", 1)[1] for name in sources}
    for path in grown.values():
        path.write_bytes(b"")
    # Uneven steps, as hook events come: a line or two, then a long tool round.
    steps = [1, 2, 5, 40, 3, 300, 1, 900, 7]
    at = dict.fromkeys(sources, 0)
    history = []
    for n, step in enumerate(steps + [None]):
        for name, lines in sources.items():
            # The two files grow out of step with each other, both within one ingest.
            upto = len(lines) if step is None else min(len(lines), at[name] + step * (1 + n % 2))
            with open(grown[name], "ab") as f:
                f.write(b"".join(lines[at[name] : upto]))
            at[name] = upto
        ingest(engine, plugins, list(grown.values()))
        now = aggregates(engine)
        assert now == recounted(engine), f"after step {n}"
        history.append(now)
    # The threads grew step by step (the incremental update was exercised), up to the whole.
    session = next(k for k in history[-1] if k in SESSION)
    counts = [h[session][0] for h in history if session in h]
    assert counts == sorted(counts) and len(set(counts)) >= 4
    assert history[-1][session][1] > 0 and history[-1][session][3] < history[-1][session][4]


def test_a_threads_models_are_its_distinct_named_models_in_order(store_url):
    """The models a thread lists are those of its usage rows, each once, sorted, without the
    client's own `<synthetic>` or rows with no model; found model by model through the index,
    they are what grouping every row gives, for a thread with many rows and several models."""
    engine = open_db(store_url)
    threads = s.Thread.__table__
    usage = s.TokenUsage.__table__
    billed = [None, "claude-opus-4-6", "<synthetic>", "", "claude-haiku-4-5", "claude-opus-4-6"]
    with engine.begin() as conn:
        ids = [
            conn.execute(
                threads.insert()
                .values(agent="claude-code", native_id=f"t{n}")
                .returning(threads.c.id)
            ).scalar_one()
            for n in range(3)
        ]
        rows = [
            {"thread_id": ids[0], "key": f"k{i}", "model": billed[i % len(billed)]}
            for i in range(300)
        ]
        rows += [{"thread_id": ids[1], "key": "only", "model": "<synthetic>"}]
        conn.execute(usage.insert(), rows)
        refresh_threads(conn, ids)
    with engine.connect() as conn:
        found = dict(conn.execute(select(threads.c.id, threads.c.models)).all())
        grouped = conn.execute(
            select(usage.c.thread_id, usage.c.model)
            .where(usage.c.model.is_not(None), usage.c.model != "<synthetic>", usage.c.model != "")
            .group_by(usage.c.thread_id, usage.c.model)
            .order_by(usage.c.thread_id, usage.c.model)
        ).all()
    assert found == {ids[0]: "claude-haiku-4-5,claude-opus-4-6", ids[1]: None, ids[2]: None}
    assert found[ids[0]] == ",".join(m for t, m in grouped if t == ids[0])
