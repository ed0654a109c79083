"""The spend cap (`run --budget`, `budget_per_day`) and `auditor reprice`, with the real Gemini
SDK against a stand-in server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import re
import threading

import pytest
from helpers.audit import ScriptPlugin, quiet, write_script_thread
from helpers.cli import invoke
from helpers.wire import Reply, Stub, gemini_response
from sqlalchemy import func, select

from auditor.audit.budget import Budget, estimate_usd
from auditor.audit.observe import MAX_OUTPUT_TOKENS, ObserverUsage
from auditor.audit.prompt import load_prompt
from auditor.audit.run import run
from auditor.audit.run_types import RunConfig
from auditor.errors import AuditorError
from auditor.ingest.ingester import ingest
from auditor.plugins import get_plugin_manager
from auditor.pricing.model_prices import cost
from auditor.store import schema as s

pytest.importorskip("google.genai")

MODEL = "gemini-3.1-pro-preview"
THREADS = 8


@pytest.fixture
def stub():
    server = Stub(Reply(body=gemini_response(), delay=0.15))
    yield server
    server.close()


@pytest.fixture
def pm():
    return get_plugin_manager(extra=[ScriptPlugin()])


@pytest.fixture
def store(engine, pm, tmp_path):
    f = tmp_path / "threads.jsonl"
    for i in range(THREADS):
        write_script_thread(f, f"t{i}", f"Done {i}! all tests pass.")
    ingest(engine, pm, [f])
    return engine


def config(stub, model: str = MODEL, **kw) -> RunConfig:
    options = {"api_key": "k", "base_url": stub.url, "max_retries": 0}
    return RunConfig(observer="gemini", model=model, observer_options=options, **kw)


def verdict_costs(engine) -> list:
    with engine.connect() as conn:
        return list(conn.scalars(select(s.Verdict.cost_usd).order_by(s.Verdict.id)))


def one_call_usd() -> float:
    """What one answer of the stand-in costs (its usageMetadata at the model's price)."""
    usage = ObserverUsage(input=5321, output=38, cached=4096, thinking=112)
    return float(cost(MODEL, usage, "gemini").usd)


def test_a_dry_run_counts_only_the_calls_the_budget_lets_start(store, pm, stub):
    # A call's worst case (prompt and a full answer) is over $0.001: the run starts none.
    tiny = run(store, pm, config(stub, budget=0.001, dry_run=True), announce=quiet)
    assert (tiny.audited, tiny.over_budget) == (0, THREADS)
    ample = run(store, pm, config(stub, budget=10.0, dry_run=True), announce=quiet)
    assert (ample.audited, ample.over_budget) == (THREADS, 0)
    assert stub.log == []
    out = invoke("run", "--dry-run", "--observer", "gemini", "--budget", "0.001").output
    assert "0 observer calls would be made" in out
    assert f"{THREADS} left out: each call's worst case would cross --budget $0.0010" in out


def planned(engine) -> int:
    """The checkpoints a run planned (gated, and formatted when they passed)."""
    with engine.connect() as conn:
        return conn.scalar(select(func.count()).select_from(s.Checkpoint))


def test_a_budget_no_call_fits_ends_the_run_at_once_in_one_line(store, pm, stub, monkeypatch):
    # $0.001 cannot pay for the observer's prompt alone with a full answer: before, the run
    # planned every checkpoint (minutes on a large store) only to refuse each call.
    with pytest.raises(AuditorError) as said:
        run(store, pm, config(stub, budget=0.001), announce=quiet)
    least = float(estimate_usd(MODEL, "gemini", load_prompt().text, MAX_OUTPUT_TOKENS))
    assert str(said.value) == (
        "No call fits in the budget: --budget leaves $0.0010, and the smallest call to "
        f"{MODEL} (the observer's prompt alone and a full answer) can cost ${least:.4f}; "
        f"nothing was planned or called: raise --budget to at least ${least:.4f}"
    )
    assert (planned(store), stub.log) == (0, [])
    monkeypatch.setenv("GEMINI_API_KEY", "k")
    argv = ["run", "--observer", "gemini", "--base-url", stub.url, "--budget", "0.001"]
    done = invoke(*argv)
    assert done.exit_code != 0
    assert done.output.splitlines()[-1].endswith(f"raise --budget to at least ${least:.4f}")
    assert (planned(store), stub.log) == (0, [])


def test_a_run_stops_planning_once_no_call_can_fit_any_more(store, pm, stub):
    # Room for one call, not two: once it is paid, what is left is under the least any call
    # can cost, and the checkpoints after are not planned (before: all 8, each refused).
    least = float(estimate_usd(MODEL, "gemini", load_prompt().text, MAX_OUTPUT_TOKENS))
    budget = one_call_usd() + least * 0.95
    summary = run(store, pm, config(stub, budget=budget, concurrency=1), announce=quiet)
    assert summary.audited == 1 and len(stub.log) == 1
    assert planned(store) < THREADS
    assert "the checkpoints after were not planned" in summary.budget_note


def test_no_call_starts_that_would_cross_the_budget(store, pm, stub):
    per_call = one_call_usd()
    budget = 0.05
    summary = run(store, pm, config(stub, budget=budget, concurrency=8), announce=quiet)
    costs = verdict_costs(store)
    assert summary.gated_in == THREADS
    # Every call that started fitted: what was spent stays under the cap...
    assert sum(costs) <= budget
    assert len(stub.log) == len(costs) == summary.audited
    # ...and the rest were left unaudited because the next estimate did not fit.
    assert summary.over_budget == THREADS - summary.audited > 0
    # Any call's estimate is at least that of the system prompt alone with a full answer.
    least = float(estimate_usd(MODEL, "gemini", load_prompt().text, MAX_OUTPUT_TOKENS))
    assert sum(costs) + least > budget
    assert summary.cost_usd == pytest.approx(per_call * summary.audited)
    assert "spent $" in summary.budget_note and f"{summary.over_budget} checkpoints" in (
        summary.budget_note
    )
    # The estimates were reserved before the calls: 8 workers never had more in flight than
    # the budget holds estimates.
    assert stub.max_in_flight <= int(budget // least)

    # A second run with a fresh budget carries on where the first stopped, paying nothing twice.
    again = run(store, pm, config(stub, budget=1.0, concurrency=8), announce=quiet)
    assert (again.audited, again.reused, again.over_budget) == (
        THREADS - summary.audited,
        summary.audited,
        0,
    )
    assert len(stub.log) == THREADS


def test_concurrent_reservations_never_overrun():
    """8 calls at once, each estimated and costing $1, under a $3 cap: exactly 3 start."""
    spent = [0.0]
    started = []
    b = Budget(limit=3.0, spent=lambda: spent[0])

    async def call(i: int) -> None:
        if (reservation := await b.reserve(1.0)) is None:
            return
        started.append(i)
        await asyncio.sleep(0.01)
        spent[0] += 1.0
        await b.release(reservation)

    async def main():
        await asyncio.gather(*(call(i) for i in range(8)))

    asyncio.run(main())
    assert (len(started), b.refused, spent[0]) == (3, 5, 3.0)


def test_a_budget_per_day_counts_what_earlier_runs_spent_today(store, pm, stub):
    run(store, pm, config(stub, limit=3), announce=quiet)
    earlier = sum(verdict_costs(store))
    assert len(stub.log) == 3
    # Enough left today for about one more answer, not for an estimate: nothing starts.
    with pytest.raises(AuditorError, match=r"budget_per_day \$[0-9.]+, \$[0-9.]+ spent earlier"):
        run(store, pm, config(stub, budget_per_day=earlier + one_call_usd()), announce=quiet)
    assert len(stub.log) == 3
    # A larger daily budget lets the rest through.
    summary = run(store, pm, config(stub, budget_per_day=earlier + 1.0), announce=quiet)
    assert (summary.audited, summary.over_budget) == (THREADS - 3, 0)


@pytest.mark.both_stores
def test_runs_at_once_share_one_budget_per_day(engine, pm, stub, tmp_path):
    """Two runs started together (workers on two machines) under one budget_per_day: each
    alone would spend up to the cap; together they stay under it, and never have more calls
    in flight than the cap holds estimates."""
    f = tmp_path / "many.jsonl"
    for i in range(16):
        write_script_thread(f, f"m{i}", f"Done {i}! all tests pass.")
    ingest(engine, pm, [f])
    per_day = 0.05
    summaries = []

    def worker():
        c = config(stub, budget_per_day=per_day, concurrency=8)
        summaries.append(run(engine, pm, c, announce=quiet))

    workers = [threading.Thread(target=worker) for _ in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
    costs = verdict_costs(engine)
    least = float(estimate_usd(MODEL, "gemini", load_prompt().text, MAX_OUTPUT_TOKENS))
    assert len(summaries) == 2 and len(stub.log) == len(costs) > 0
    assert sum(costs) <= per_day
    assert stub.max_in_flight <= int(per_day // least)
    assert sum(s.over_budget for s in summaries) > 0  # the cap, not the work, ended them
    for summary in summaries:  # what each says was left is what the day had, all runs counted
        said = re.search(
            r"estimate, \$([0-9.]+), did not fit in the \$([0-9.]+) left", summary.budget_note
        )
        if summary.over_budget:
            assert said, summary.budget_note
            assert float(said[1]) > float(said[2]), summary.budget_note
    with engine.connect() as conn:  # every reservation was given back
        assert conn.scalar(select(func.count()).select_from(s.SpendReservation)) == 0


def test_an_unpriced_model_is_refused_under_a_budget_unless_allowed(store, pm, stub):
    with pytest.raises(AuditorError, match="--allow-unpriced"):
        run(store, pm, config(stub, budget=1.0, model="gemini-x-unknown"), announce=quiet)
    assert stub.log == []
    summary = run(
        store,
        pm,
        config(stub, budget=1.0, allow_unpriced=True, model="gemini-x-unknown"),
        announce=quiet,
    )
    assert (summary.audited, summary.unpriced, summary.cost_usd) == (THREADS, THREADS, 0.0)
    assert f"{THREADS} calls of unknown cost" in summary.budget_note


def test_reprice_after_a_price_is_added(store, pm, stub, tmp_path, monkeypatch):
    run(store, pm, config(stub, limit=3, model="gemini-x-unknown"), announce=quiet)
    assert verdict_costs(store) == [None] * 3
    shown = json.loads(invoke("verdicts", "--json").output)
    assert [v["cost_usd"] for v in shown] == [None] * 3
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"gemini-x-unknown": {"input": 2.0, "output": 12.0}}))
    monkeypatch.setenv("AUDITOR_PRICES", str(prices))
    # Before: the cost report prices the calls with today's table, `verdicts` says unpriced.
    report = json.loads(invoke("report", "costs", "--format", "json").output)
    assert report["total"]["audit_usd"] > 0
    out = invoke("reprice")
    assert out.exit_code == 0 and out.output.startswith("re-priced 3 verdicts: $")
    shown = json.loads(invoke("verdicts", "--json").output)
    each = (1225 * 2.0 + 4096 * 2.0 + 150 * 12.0) / 1e6  # no cache_read rate: the input rate
    assert [v["cost_usd"] for v in shown] == [pytest.approx(each)] * 3
    report = json.loads(invoke("report", "costs", "--format", "json").output)
    assert report["total"]["audit_usd"] == pytest.approx(sum(v["cost_usd"] for v in shown))
    assert report["total"]["audit_unpriced_calls"] == 0
    with store.connect() as conn:
        assert conn.scalar(select(s.Run.cost_usd)) == pytest.approx(3 * each)
    assert invoke("reprice").output.startswith("re-priced 0 verdicts")
