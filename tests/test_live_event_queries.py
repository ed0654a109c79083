"""What a live event asks of tables that grow with the session (one run per audit, the thread's
tool calls and billed model calls) is read through indexes, never by reading their rows one by
one: each hook event of a long session otherwise costs more than the one before."""

from __future__ import annotations

from auditor.ingest.bulk_rows import refresh_threads
from auditor.store import schema as s
from auditor.store.db import open_db, utcnow
from auditor.store.run_rows import mark_interrupted

GROWING = ("runs", "tool_calls", "token_usage")


def plans(engine, work) -> list[str]:
    """SQLite's plan of each statement `work(conn)` runs (as SQLite ran it, its parameters in
    place), one line per step, each with the start of its statement."""
    seen: list[str] = []

    def keep(statement: str) -> None:
        if statement.lstrip().upper().startswith(("SELECT", "UPDATE", "WITH")):
            seen.append(statement)

    with engine.begin() as conn:
        raw = conn.connection.dbapi_connection
        raw.set_trace_callback(keep)
        work(conn)
        raw.set_trace_callback(None)
        out = []
        for statement in seen:
            for row in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}").all():
                out.append(f"{row[-1]}  <- {' '.join(statement.split())}")
    return out


def test_a_live_events_recounts_and_run_start_read_indexes_only(tmp_path):
    engine = open_db(f"sqlite:///{tmp_path / 'a.db'}")
    threads = s.Thread.__table__
    with engine.begin() as conn:
        tid = conn.execute(
            threads.insert().values(agent="claude-code", native_id="t").returning(threads.c.id)
        ).scalar_one()
        conn.execute(
            s.ToolCall.__table__.insert(),
            [{"thread_id": tid, "call_id": f"c{i}", "is_file_edit": i % 3 == 0} for i in range(50)],
        )
        conn.execute(
            s.TokenUsage.__table__.insert(),
            [{"thread_id": tid, "key": f"k{i}", "model": f"m{i % 2}"} for i in range(50)],
        )
    steps = plans(engine, lambda conn: (mark_interrupted(conn), refresh_threads(conn, [tid], 0)))
    on_growing = [p for p in steps if any(f"FROM {t}" in p or f"UPDATE {t}" in p for t in GROWING)]
    # The statements were seen: the run start's, the calls' and the models' recounts.
    for table in GROWING:
        assert any(f"FROM {table}" in p for p in on_growing), (table, steps)
    # No table read whole (the models' recursive query reads its own few rows, `found` as `f`).
    scans = [p for p in steps if p.startswith("SCAN") and " USING " not in p]
    assert [p for p in scans if p.split()[1] not in ("f", "found")] == [], steps
    # Rows of a growing table are read only through an index that holds what is asked (the
    # running runs' partial index: the few runs under way).
    reads = [p for p in steps if p.startswith(("SEARCH", "SCAN")) and " USING " in p]
    rows_read = [p for p in reads if "COVERING INDEX" not in p and "PRIMARY KEY" not in p]
    assert rows_read and all("ix_runs_running" in p for p in rows_read), rows_read
    with engine.begin() as conn:
        assert conn.exec_driver_sql("SELECT models, file_edit_count FROM threads").one() == (
            "m0,m1",
            17,
        )


def steps_taken(engine, work) -> int:
    """The virtual machine steps SQLite takes to run `work(conn)` (rolled back)."""
    taken = 0

    def count() -> int:
        nonlocal taken
        taken += 1
        return 0  # go on

    with engine.connect() as conn:
        raw = conn.connection.dbapi_connection
        raw.set_progress_handler(count, 1)
        work(conn)
        raw.set_progress_handler(None, 1)
        conn.rollback()
    return taken


def test_a_run_start_and_the_models_recount_take_the_same_work_however_long_the_session(
    tmp_path,
):
    """A live worker starts a run at each audit and its thread bills a model call at each
    answer: looking for runs left running, and listing the thread's models, take the same
    steps with 20 finished runs and usage rows as with 2,000."""
    engine = open_db(f"sqlite:///{tmp_path / 'a.db'}")
    threads, runs, usage = s.Thread.__table__, s.Run.__table__, s.TokenUsage.__table__
    with engine.begin() as conn:
        tid = conn.execute(
            threads.insert().values(agent="claude-code", native_id="t").returning(threads.c.id)
        ).scalar_one()
    taken = []
    for n in (20, 2000):
        with engine.begin() as conn:
            conn.execute(runs.delete())
            conn.execute(usage.delete())
            when = utcnow()
            conn.execute(
                runs.insert(),
                [
                    {"status": "done", "observer": "gemini", "model": "m", "started_at": when}
                    for _ in range(n)
                ],
            )
            conn.execute(
                usage.insert(),
                [{"thread_id": tid, "key": f"k{i}", "model": f"m{i % 3}"} for i in range(n)],
            )
        taken.append(
            (
                steps_taken(engine, mark_interrupted),
                steps_taken(engine, lambda conn: refresh_threads(conn, [tid], 0)),
            )
        )
    (runs_few, models_few), (runs_many, models_many) = taken
    assert (runs_many, models_many) == (runs_few, models_few)
