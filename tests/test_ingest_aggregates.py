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
