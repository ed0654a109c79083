"""`auditor run --batch` at the wire level: the real google-genai and anthropic SDKs against
stand-ins of both batch APIs on 127.0.0.1 (pytest-httpserver): submit, interrupt, resume,
collect, with a partial batch, and nothing sent or billed twice."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from helpers.audit import FakeObserver, FakeObserverPlugin, ScriptPlugin, quiet, write_script_thread
from helpers.batch import AnthropicBatches, GeminiBatches
from sqlalchemy import select

from auditor.audit.budget import estimate_usd
from auditor.audit.observe import ObserverUsage
from auditor.audit.observer_audit import Auditor
from auditor.audit.run import run
from auditor.audit.run_types import RunConfig
from auditor.cli.main import cli
from auditor.errors import AuditorError
from auditor.ingest.ingester import ingest
from auditor.plugins import get_plugin_manager
from auditor.pricing.model_prices import cost
from auditor.store import schema as s

pytestmark = pytest.mark.both_stores

THREADS = 5
BACKENDS = {
    "gemini": (
        "google.genai",
        GeminiBatches,
        "gemini-3.1-pro-preview",
        ObserverUsage(input=5321, output=38, cached=4096, thinking=112),
    ),
    "claude": (
        "anthropic",
        AnthropicBatches,
        "claude-sonnet-4-6",
        ObserverUsage(input=812 + 4096 + 300, output=61, cached=4096, cache_write=300),
    ),
}


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


def verdicts(engine):
    with engine.connect() as conn:
        return conn.execute(select(s.Verdict.__table__).order_by(s.Verdict.id)).all()


@pytest.mark.parametrize("observer", sorted(BACKENDS))
def test_submit_interrupt_resume_collect(store, pm, httpserver, observer):
    module, StandIn, model, usage = BACKENDS[observer]
    pytest.importorskip(module)
    api = StandIn(httpserver)
    base = httpserver.url_for("/").rstrip("/")
    options = {"api_key": "k", "base_url": base, "max_retries": 0}

    def batch_run(**kw):
        config = RunConfig(observer=observer, model=model, observer_options=options, batch_size=2)
        for k, v in kw.items():
            setattr(config, k, v)
        return run(store, pm, config, announce=quiet)

    # A dry run with --batch estimates at the batch price.
    dry = {b: batch_run(dry_run=True, batch=b, threads=["t0"]) for b in (False, True)}
    assert dry[True].batch_price and not dry[False].batch_price
    assert dry[True].est_cost_usd < dry[False].est_cost_usd

    # Submit: 5 checkpoints in batches of 2; the second create is accepted by the provider
    # but the run never hears back (it stops there). The two batches have the same size, so
    # for Anthropic (whose batches carry no name) only the store tells them apart.
    api.fail_create = 0
    first = {"n": 0}
    orig = api._create

    def third_fails(request, batch_id, keys, extra):
        first["n"] += 1
        if first["n"] == 2:
            api.fail_create = 1
        return orig(request, batch_id, keys, extra)

    api._create = third_fails
    with pytest.raises(AuditorError, match="the next run asks"):
        batch_run(batch=True)
    assert len(api.created) == 2 and verdicts(store) == []
    # What the SDKs sent (docs/batch-wire.json has whole exchanges).
    body = api.created[0]["body"]
    if observer == "gemini":
        reqs = body["batch"]["inputConfig"]["requests"]["requests"]
        assert body["batch"]["displayName"].startswith("auditor-")
        assert reqs[0]["request"]["toolConfig"]["functionCallingConfig"]["mode"] == "ANY"
        keys = [r["metadata"]["key"] for r in reqs]
    else:
        reqs = body["requests"]
        assert reqs[0]["params"]["tool_choice"] == {"type": "tool", "name": "course_correct"}
        assert reqs[0]["params"]["max_tokens"] == 1024 and "timeout" not in reqs[0]["params"]
        keys = [r["custom_id"] for r in reqs]
    assert len(keys) == 2 and all(k.startswith("cp") and len(k) <= 64 for k in keys)
    with store.connect() as conn:
        states = sorted(conn.scalars(select(s.Batch.state)))
    assert states == ["pending", "submitting"]

    # Resume while the provider is still working: the stopped submission is found at the
    # provider, nothing is collected yet, no checkpoint is sent again and the fifth goes now.
    again = batch_run(batch=True)
    assert (len(api.created), again.batch.submitted, again.batch.pending) == (3, 1, THREADS)
    assert again.batch.waiting == THREADS - 1
    assert any("the provider has it as" in m for m in again.messages)
    with store.connect() as conn:
        assert sorted(conn.scalars(select(s.Batch.state))) == ["pending"] * 3

    # Collect: the batches are done; one request of the first batch failed (a partial batch).
    failed_key = api.batches[next(iter(api.batches))]["keys"][1]
    api.errored.add(failed_key)
    api.finish()
    got = batch_run(collect=True)
    rows = verdicts(store)
    assert (got.batch.collected, got.batch.submitted, len(rows)) == (THREADS - 1, 0, THREADS)
    assert sorted(r.status for r in rows) == ["error"] + ["ok"] * (THREADS - 1)
    ok = [r for r in rows if r.status == "ok"]
    batch_price = float(cost(model, usage, observer, batch=True).usd)
    one_by_one = float(cost(model, usage, observer).usd)
    assert batch_price < one_by_one
    assert all(r.cost_usd == pytest.approx(batch_price) and r.batch_id for r in ok)
    assert all(r.needs_correction and r.message == api.answer["message"] for r in ok)
    assert (ok[0].input_tokens, ok[0].cached_tokens) == (usage.input, usage.cached)
    assert got.batch.collected_usd == pytest.approx(batch_price * (THREADS - 1))
    assert got.batch.interactive_usd == pytest.approx(one_by_one * (THREADS - 1))

    # The failed request goes again, alone; the answered ones never do.
    api.errored.clear()
    retry = batch_run(batch=True)
    assert (retry.batch.submitted, len(api.created)) == (1, 4)
    assert api.batches[list(api.batches)[-1]]["keys"] == [failed_key]
    api.finish()
    last = batch_run(batch=True)
    assert (last.batch.collected, last.batch.submitted, last.batch.pending) == (1, 0, 0)
    rows = verdicts(store)
    assert sum(r.status == "ok" for r in rows) == THREADS
    sent = [k for b in api.batches.values() for k in b["keys"]]
    assert len(sent) == THREADS + 1 and len(set(sent)) == THREADS
    # Nothing more to do.
    assert batch_run(batch=True).batch.submitted == 0
    # The cost report and `verdicts` agree on what the batches cost.
    total = sum(r.cost_usd for r in rows if r.cost_usd is not None)
    assert total == pytest.approx(batch_price * THREADS)
    report = json.loads(CliRunner().invoke(cli, ["report", "costs", "--format", "json"]).output)
    assert report["total"]["audit_usd"] == pytest.approx(total)
    shown = json.loads(CliRunner().invoke(cli, ["verdicts", "--json", "-n", "0"]).output)
    assert sum(v["cost_usd"] or 0 for v in shown) == pytest.approx(total)


@pytest.mark.slow
@pytest.mark.parametrize("observer", sorted(BACKENDS))
def test_a_run_killed_while_submitting_sends_nothing_twice(store, pm, httpserver, observer):
    """SIGKILL `auditor run --batch` while the provider holds its batch but has not answered:
    the next run finds that batch at the provider and submits nothing again."""
    import signal
    import subprocess
    import sys
    import threading
    import time

    module, StandIn, model, _ = BACKENDS[observer]
    pytest.importorskip(module)
    api = StandIn(httpserver)
    release = threading.Event()
    orig = api._create

    def hold(request, batch_id, keys, extra):
        accepted = orig(request, batch_id, keys, extra)
        release.wait(30)  # the provider has it; its answer comes too late
        return accepted

    api._create = hold
    base = httpserver.url_for("/").rstrip("/")
    db = store.url.render_as_string(hide_password=False)
    cmd = [sys.executable, "-m", "auditor", "--db", db, "run", "--batch", "--observer", observer]
    cmd += ["--model", model, "--base-url", base, "--key", "k", "--max-retries", "0"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not api.created and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert len(api.created) == 1, "the run never submitted"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    release.set()
    with store.connect() as conn:
        assert list(conn.scalars(select(s.Batch.state))) == ["submitting"]

    options = {"api_key": "k", "base_url": base, "max_retries": 0}
    config = RunConfig(observer=observer, model=model, observer_options=options, batch=True)
    resumed = run(store, pm, config, announce=quiet)
    assert (len(api.created), resumed.batch.submitted) == (1, 0)
    assert resumed.batch.waiting == resumed.batch.pending == THREADS
    assert any("the provider has it as" in m for m in resumed.messages)
    api.finish()
    collected = run(store, pm, config, announce=quiet)
    assert (collected.batch.collected, len(api.created)) == (THREADS, 1)
    assert sum(r.status == "ok" for r in verdicts(store)) == THREADS


def gemini_batch_run(store, pm, httpserver) -> tuple[GeminiBatches, RunConfig, list[float]]:
    """A Gemini batch stand-in, the config of a batch run against it, and each checkpoint's worst
    case at the batch price, as the run will reserve it."""
    pytest.importorskip("google.genai")
    api = GeminiBatches(httpserver)
    options = {"api_key": "k", "base_url": httpserver.url_for("/").rstrip("/"), "max_retries": 0}
    model = "gemini-3.1-pro-preview"
    config = RunConfig(observer="gemini", model=model, observer_options=options, batch=True)
    planner = Auditor(store, pm, config)
    worst = [
        float(
            estimate_usd(model, "gemini", planner.observing.prompt.text + j.user, 1024, batch=True)
        )
        for j in planner.jobs()
    ]
    return api, config, worst


def test_a_budget_caps_what_a_batch_may_cost(store, pm, httpserver):
    api, config, worst = gemini_batch_run(store, pm, httpserver)
    config.budget = worst[0] + worst[1] + min(worst) / 2  # room for two checkpoints
    summary = run(store, pm, config, announce=quiet)
    assert (summary.batch.submitted, summary.over_budget) == (2, THREADS - 2)
    assert summary.batch.est_usd == pytest.approx(worst[0] + worst[1])
    assert len(api.created) == 1
    assert f"{summary.over_budget} checkpoints left unaudited" in summary.budget_note


def test_a_batch_under_budget_per_day_counts_the_calls_other_runs_have_in_flight(
    store, pm, httpserver
):
    """A worker elsewhere holds most of today's budget for its calls in flight: the batch takes
    only what is left, and gives back its own reservations once the batch row counts them."""
    from datetime import UTC, datetime, timedelta

    from auditor.store import leases

    api, config, worst = gemini_batch_run(store, pm, httpserver)
    elsewhere = 1.0  # reserved by a live run (this process: never taken for a dead one)
    now = datetime.now(UTC)
    reservations = s.SpendReservation.__table__
    with store.begin() as conn:
        conn.execute(
            reservations.insert().values(
                owner=leases.new_owner(),
                usd=elsewhere,
                created_at=now,
                expires_at=now + timedelta(hours=1),
            )
        )
    config.budget_per_day = elsewhere + worst[0] + worst[1] + min(worst) / 2
    summary = run(store, pm, config, announce=quiet)
    assert (summary.batch.submitted, summary.over_budget) == (2, THREADS - 2)
    assert len(api.created) == 1
    with store.connect() as conn:
        assert list(conn.scalars(select(reservations.c.usd))) == [elsewhere]


def test_a_dry_run_with_batch_is_refused_as_the_run_would_be(store, pm):
    """`run --dry-run --batch` on the embedded model estimated 'at the batch price'; the run
    itself refuses: no batch API. Now both refuse, and so for --critique with --batch."""
    fake = FakeObserver()
    pm = get_plugin_manager(extra=[ScriptPlugin(), FakeObserverPlugin(fake)])
    for dry_run in (False, True):
        config = RunConfig(observer="fake", batch=True, dry_run=dry_run)
        with pytest.raises(AuditorError, match="observer 'fake' has no batch API"):
            run(store, pm, config, announce=quiet)
        config = RunConfig(observer="fake", batch=True, critique=True, dry_run=dry_run)
        with pytest.raises(AuditorError, match="--critique does not combine with --batch"):
            run(store, pm, config, announce=quiet)
    assert run(store, pm, RunConfig(observer="fake", dry_run=True), announce=quiet).audited
    assert fake.calls == 0


def test_a_refused_submission_does_not_break_later_runs(store, pm, httpserver):
    """A submission the provider refused (404) left a batch 'submitting' that every later
    `run --batch` and `--collect` asked the provider about, and died with a traceback."""
    api, config, _ = gemini_batch_run(store, pm, httpserver)
    api.refuse = 404
    with pytest.raises(AuditorError, match=f"submitting {THREADS} requests failed"):
        run(store, pm, config, announce=quiet)
    for collect in (False, True):
        config.collect = collect
        again = run(store, pm, config, announce=quiet)  # one line, no traceback, nothing sent
        assert (again.batch.submitted, again.batch.pending) == (0, THREADS)
        (said,) = [m for m in again.messages if m.startswith("batch auditor-")]
        assert "could not ask gemini whether it has it (ClientError: 404" in said
        assert "`auditor batch drop" in said
    assert len(api.created) == 0

    runner = CliRunner()
    (listed,) = json.loads(runner.invoke(cli, ["batch", "list", "--json"]).output)
    label = listed["label"]
    assert (listed["state"], listed["waiting"]) == ("submitting", THREADS)
    assert listed["error"].startswith("ClientError: 404 NOT_FOUND")
    table = runner.invoke(cli, ["batch", "list"]).output
    assert f"{label}  submitting" in table and f"{label}: ClientError: 404" in table
    dropped = runner.invoke(cli, ["batch", "drop", label])
    assert dropped.exit_code == 0, dropped.output
    assert dropped.output.startswith(f"dropped batch {label}: its {THREADS} checkpoints")
    assert "ERROR" not in runner.invoke(cli, ["batch", "drop", label]).output
    api.refuse = None
    config.collect = False
    retried = run(store, pm, config, announce=quiet)
    assert retried.batch.submitted == THREADS and len(api.created) == 1


def test_a_pending_batch_the_provider_no_longer_answers_for_is_said_and_skipped(
    store, pm, httpserver
):
    api, config, _ = gemini_batch_run(store, pm, httpserver)
    assert run(store, pm, config, announce=quiet).batch.submitted == THREADS
    api.refuse = 404
    config.collect = True
    later = run(store, pm, config, announce=quiet)
    (said,) = [m for m in later.messages if m.startswith("batch batches/stub1")]
    assert "could not poll it (ClientError: 404" in said
    assert later.batch.pending == THREADS
