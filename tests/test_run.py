"""`auditor run` end to end with a fake observer registered through the real hook."""

from __future__ import annotations

import re

import pytest
from helpers.audit import FakeObserver, FakeObserverPlugin, ScriptPlugin, quiet, write_script_thread
from sqlalchemy import select

from auditor.audit.run import run
from auditor.audit.run_types import RunConfig
from auditor.ingest.ingester import ingest
from auditor.plugins import get_plugin_manager
from auditor.store import schema as s

pytestmark = pytest.mark.both_stores


@pytest.fixture
def fake():
    return FakeObserver()


@pytest.fixture
def pm(fake):
    return get_plugin_manager(extra=[ScriptPlugin(), FakeObserverPlugin(fake)])


@pytest.fixture
def store(engine, pm, tmp_path):
    f = tmp_path / "threads.jsonl"
    write_script_thread(f, "t-claims", "Done! all tests pass.")
    write_script_thread(f, "t-honest", "One test still fails; here is why.")
    write_script_thread(f, "t-short", "Done.", n_tools=2)
    ingest(engine, pm, [f])
    return engine


def verdicts(engine):
    with engine.connect() as conn:
        return conn.execute(select(s.Verdict.__table__).order_by(s.Verdict.id)).all()


def test_run_gates_observes_and_records(store, pm, fake):
    summary = run(store, pm, RunConfig(observer="fake"), announce=quiet)
    assert (summary.checkpoints, summary.gated_in, summary.audited, summary.corrections) == (
        3,
        2,
        2,
        1,
    )
    assert summary.gated_out == {"too-few-tool-calls": 1}
    rows = verdicts(store)
    assert [(v.status, v.needs_correction) for v in rows] == [("ok", True), ("ok", False)]
    assert rows[0].message == "the tests failed, look again"
    assert rows[0].input_tokens > 0 and rows[0].output_tokens == 20 and rows[0].thinking_tokens == 5
    assert rows[0].prompt_hash and rows[0].input_hash and rows[0].raw == {"fake": True}
    with store.connect() as conn:
        reasons = sorted(conn.scalars(select(s.Checkpoint.gate_reason)))
        run_row = conn.execute(select(s.Run.__table__)).one()
    assert reasons == ["passed", "passed", "too-few-tool-calls (2 < 5)"]
    assert (run_row.status, run_row.audited, run_row.corrections) == ("done", 2, 1)


def test_a_second_run_never_pays_twice(store, pm, fake):
    run(store, pm, RunConfig(observer="fake"), announce=quiet)
    again = run(store, pm, RunConfig(observer="fake"), announce=quiet)
    assert (again.audited, again.reused, fake.calls) == (0, 2, 2)
    assert len(verdicts(store)) == 2


def test_another_model_is_a_new_audit(store, pm, fake):
    run(store, pm, RunConfig(observer="fake"), announce=quiet)
    other = run(store, pm, RunConfig(observer="fake", model="fake-2"), announce=quiet)
    assert other.audited == 2


@pytest.mark.parametrize(
    "answer, problem",
    [
        ("none", "the model answered without calling course_correct"),
        ("wrong-tool", "the model called 'other_tool' instead of 'course_correct'"),
        ("bad-args", "needsCorrection is missing or not a boolean"),
    ],
)
def test_answers_that_break_the_contract_are_recorded_as_invalid(store, pm, fake, answer, problem):
    fake.answer = answer
    summary = run(store, pm, RunConfig(observer="fake"), announce=quiet)
    assert (summary.invalid, summary.audited) == (2, 0)
    assert {(v.status, v.problem, v.needs_correction) for v in verdicts(store)} == {
        ("invalid", problem, None)
    }


def test_failed_calls_are_recorded_and_retried_by_the_next_run(store, pm, fake):
    fake.answer = "raise"
    summary = run(store, pm, RunConfig(observer="fake"), announce=quiet)
    assert summary.errors == 2
    assert {v.problem for v in verdicts(store)} == {"ConnectionError: observer unreachable"}
    fake.answer = "tool"
    again = run(store, pm, RunConfig(observer="fake"), announce=quiet)
    assert again.audited == 2


def test_dry_run_calls_no_model(store, pm, fake):
    summary = run(store, pm, RunConfig(observer="fake", dry_run=True), announce=quiet)
    assert fake.calls == 0
    assert summary.audited == 2 and summary.est_input_tokens > 100
    assert verdicts(store) == []


def test_limit_and_concurrency(store, pm, fake):
    fake.delay = 0.05
    summary = run(store, pm, RunConfig(observer="fake", limit=1, concurrency=8), announce=quiet)
    assert summary.audited == 1 and fake.calls == 1


def test_usage_is_recorded_even_when_the_observer_stays_silent(store, pm, fake):
    fake.trigger = "never in the prompt"
    run(store, pm, RunConfig(observer="fake"), announce=quiet)
    assert all(v.needs_correction is False and v.input_tokens > 0 for v in verdicts(store))


def test_the_observer_is_named_on_stderr(store, pm):
    lines = []
    run(store, pm, RunConfig(observer="fake", dry_run=True), announce=lines.append)
    assert lines == ["observer: fake (chosen with --observer), model fake-1"]


def test_only_its_own_module_touches_a_part_of_the_runs_private_names():
    """Callers (hook, live worker, eval, batch, schedule, benchmarks) use the parts' public
    methods: the planner, caller, recorder and work sharing keep their insides to themselves."""
    import ast
    from pathlib import Path

    from auditor.audit.caller import Caller
    from auditor.audit.observer_audit import Auditor
    from auditor.audit.planner import Planner
    from auditor.audit.recorder import Recorder
    from auditor.audit.sharing import LeasedSharing

    parts = (Auditor, Planner, Caller, Recorder, LeasedSharing)
    private = {
        n
        for part in parts
        for c in part.__mro__
        for n in vars(c)
        if n.startswith("_") and not n.startswith("__")
    }
    own = {"observer_audit.py", "planner.py", "caller.py", "recorder.py", "sharing.py"}
    root = Path(__file__).resolve().parent.parent
    found = [
        f"{path.relative_to(root)}:{node.lineno}: {node.attr}"
        for folder in ("auditor", "plugins", "benchmarks", "examples")
        for path in sorted((root / folder).rglob("*.py"))
        if path.name not in own or path.parent.name != "audit"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute) and node.attr in private
    ]
    assert private and found == []


def test_a_failure_without_words_says_what_failed_and_after_how_long(store, pm, fake, monkeypatch):
    async def mute(request, options):
        raise TimeoutError()  # what asyncio.wait_for raises: no text at all

    monkeypatch.setattr(fake, "observe", mute)
    summary = run(store, pm, RunConfig(observer="fake", timeout=7), announce=quiet)
    assert summary.errors == 2
    for v in verdicts(store):
        assert re.fullmatch(
            r"TimeoutError: the fake call timed out after \d+\.\ds \(--timeout 7s\), "
            r"saying nothing more",
            v.problem,
        )


def test_calls_in_flight_are_the_observers_own_unless_given(store, pm, fake, monkeypatch):
    from auditor.audit.observer_audit import Auditor

    assert Auditor(store, pm, RunConfig(observer="fake")).concurrency == 4
    assert Auditor(store, pm, RunConfig(observer="fake", concurrency=3)).concurrency == 3
    fake.concurrency = 1  # a CPU model: one call at a time
    assert Auditor(store, pm, RunConfig(observer="fake", concurrency=3)).concurrency == 3
    inflight, most = 0, 0
    observe = fake.observe

    async def counted(request, options):
        nonlocal inflight, most
        inflight += 1
        most = max(most, inflight)
        try:
            return await observe(request, options)
        finally:
            inflight -= 1

    monkeypatch.setattr(fake, "observe", counted)
    fake.delay = 0.1
    summary = run(store, pm, RunConfig(observer="fake"), announce=quiet)
    assert summary.audited == 2 and most == 1


def test_the_timeout_is_the_observers_own_unless_given(store, pm, fake, monkeypatch):
    """README's main job on a busy 2-core machine: the embedded model's first call took 143 s,
    past the 120 s every observer got, and the run ended in errors. A backend may say its own."""
    from auditor.audit.observer_audit import Auditor
    from auditor.plugins import get_plugin_manager as plugins

    seen = []
    observe = fake.observe

    async def noted(request, options):
        seen.append(request.timeout)
        return await observe(request, options)

    monkeypatch.setattr(fake, "observe", noted)
    run(store, pm, RunConfig(observer="fake", model="m1"), announce=quiet)
    fake.timeout = 600.0
    run(store, pm, RunConfig(observer="fake", model="m2"), announce=quiet)
    run(store, pm, RunConfig(observer="fake", model="m3", timeout=30), announce=quiet)
    assert seen == [120.0, 120.0, 600.0, 600.0, 30.0, 30.0]
    assert Auditor(store, pm, RunConfig(observer="fake")).lease == 600 * 4 + 65
    embedded = Auditor(store, plugins(), RunConfig(observer="embedded"))
    assert embedded.caller.timeout == 600.0


@pytest.mark.corpus
@pytest.mark.sqlite_only  # rendering only
def test_a_small_window_is_filled_by_the_formatter_not_cut_by_the_backend(corpus, engine):
    """An observer that says how many tokens its prompt may take gets each checkpoint rendered to
    fit beside the system prompt; --max-prompt-tokens still wins."""
    from auditor_plugins.formatter_text import estimate_tokens
    from helpers.live import CC_SESSION

    from auditor.audit.checkpoint_plan import TOKENIZER_MARGIN
    from auditor.audit.observer_audit import Auditor

    observer = FakeObserver()
    pm = get_plugin_manager(extra=[FakeObserverPlugin(observer)])
    ingest(engine, pm, [corpus / CC_SESSION])
    every = {"mode": "every-inference", "min_tool_calls": 1, "require_edit": False}

    def rendered(**formatter) -> tuple[dict, list[int]]:
        a = Auditor(engine, pm, RunConfig(observer="fake", gate=every, formatter=formatter))
        return a.planner.checkpoints.formatter, [estimate_tokens(j.user) for j in a.jobs()]

    _, wide = rendered()
    system = estimate_tokens(Auditor(engine, pm, RunConfig(observer="fake")).observing.prompt.text)
    # A window with room, beside the system prompt, for all but ~200 tokens of the largest
    # checkpoint as rendered without a limit (taken from the render, so that a leaner formatter
    # does not make every checkpoint fit and the window say nothing).
    window = system + int((max(wide) - 200) * TOKENIZER_MARGIN)
    observer.context_tokens = window  # type: ignore[attr-defined]
    options, narrow = rendered()
    assert options == {"max_tokens": int((window - system) / TOKENIZER_MARGIN)}
    assert len(narrow) == len(wide) >= 5 and max(wide) > options["max_tokens"]
    assert max(narrow) <= options["max_tokens"]
    given, _ = rendered(max_tokens=20000)
    assert given == {"max_tokens": 20000}


def test_a_dry_run_says_how_long_the_calls_would_take(store, pm, fake):
    fake.seconds_per_call = 45.0  # what a backend declares (the embedded model does)
    one = run(store, pm, RunConfig(observer="fake", dry_run=True, concurrency=1), announce=quiet)
    assert one.audited == 2
    assert (one.est_seconds, one.est_seconds_source) == (90.0, "the backend's own figure")
    two = run(store, pm, RunConfig(observer="fake", dry_run=True, concurrency=2), announce=quiet)
    assert two.est_seconds == 45.0


def test_a_dry_run_times_the_calls_by_the_answers_recorded(store, pm, fake, tmp_path):
    f = tmp_path / "more.jsonl"
    for i in range(6):
        write_script_thread(f, f"t-more-{i}", f"Done {i}! all tests pass.")
    ingest(store, pm, [f])
    fake.delay = 0.2
    more = [f"t-more-{i}" for i in range(6)]
    run(store, pm, RunConfig(observer="fake", threads=more), announce=quiet)
    with store.connect() as conn:
        latencies = sorted(conn.scalars(select(s.Verdict.latency_ms)))
    dry = run(store, pm, RunConfig(observer="fake", dry_run=True, concurrency=1), announce=quiet)
    median = latencies[2] / 1000  # the 3rd of 6 (nearest rank)
    assert dry.audited == 2 and dry.est_seconds == pytest.approx(2 * median)
    assert dry.est_seconds_source == "the median of its 6 answers recorded in this store"


def test_ctrl_c_during_an_embedded_call_abandons_it_and_says_so(store, pm, monkeypatch):
    import signal
    import threading

    from auditor_plugins import embedded

    from auditor.audit.run_types import RunInterrupted
    from auditor.cli.render import interrupted_lines

    started, release, finished = threading.Event(), threading.Event(), threading.Event()

    def busy(request, options, cancelled):
        started.set()
        release.wait(60)  # llama.cpp reading a long prompt does not look at `cancelled`
        finished.set()
        return {}

    monkeypatch.setattr(embedded, "complete", busy)
    monkeypatch.setattr(embedded.EmbeddedObserver, "check", lambda self, options: None)

    def ctrl_c() -> None:
        started.wait(30)
        # As the terminal's Ctrl-C: a real SIGINT to the main thread, which wakes the run's event
        # loop from its wait (_thread.interrupt_main only sets Python's flag, and a loop asleep
        # with nothing scheduled saw it when the call ended, a minute later).
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    threading.Thread(target=ctrl_c, daemon=True).start()
    with pytest.raises(RunInterrupted) as stopped:
        run(store, pm, RunConfig(observer="embedded"), announce=quiet)
    in_flight = not finished.is_set()  # the run answered the Ctrl-C before the call ended
    release.set()
    summary = stopped.value.summary
    assert summary.abandoned == 1 and in_flight
    assert "; the call in flight abandoned (sent again on resume)." in interrupted_lines(
        summary, "auditor run"
    )
