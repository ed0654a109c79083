"""`auditor run --critique`: a second, more critical pass where the first observer stayed silent."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from helpers.audit import FakeObserver, FakeObserverPlugin, ScriptPlugin, quiet, write_script_thread
from sqlalchemy import select

from auditor.audit.critique import critique_summary, load_critique_prompt, render
from auditor.audit.prompt import load_prompt
from auditor.audit.run import run
from auditor.audit.run_types import RunConfig
from auditor.hookspecs import hookimpl
from auditor.ingest.ingester import ingest
from auditor.plugins import get_plugin_manager
from auditor.store import schema as s
from auditor.store.signal_rows import Signal, signal_counts

pytestmark = pytest.mark.both_stores

SECRET = "ghp_" + "A1b2" * 10


class Planted:
    """Fires one signal of `score` on every checkpoint, with a secret in its evidence."""

    def __init__(self, score: float = 0.9):
        self.score = score

    @hookimpl
    def compute_signals(self, checkpoint, thread, messages, config):
        return [
            Signal(
                "planted", self.score, [(messages[-1].native_id, f"claims done; token {SECRET}")]
            )
        ]


class Recording(FakeObserver):
    """The fake observer, keeping the system prompts it was sent."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.systems: list[str] = []

    async def observe(self, request, options):
        self.systems.append(request.system)
        return await super().observe(request, options)


@pytest.fixture(autouse=True)
def only_planted_signals(monkeypatch):
    """The built-in signals would fire on the script threads too; keep the planted one alone."""
    monkeypatch.setenv("AUDITOR_DISABLE_PLUGINS", "signals")


@pytest.fixture
def fake():
    # Silent on the thread itself; asks for a correction once the signals are appended.
    return Recording(trigger="# Local signals")


@pytest.fixture
def store(engine, tmp_path):
    f = tmp_path / "threads.jsonl"
    write_script_thread(f, "t-one", "Done! all tests pass.")
    ingest(engine, get_plugin_manager(extra=[ScriptPlugin()]), [f])
    return engine


def pm_with(fake, score=0.9):
    return get_plugin_manager(extra=[ScriptPlugin(), FakeObserverPlugin(fake), Planted(score)])


def verdicts(engine):
    with engine.connect() as conn:
        return conn.execute(select(s.Verdict.__table__).order_by(s.Verdict.id)).all()


def test_a_silent_first_pass_on_strong_signals_gets_a_linked_second_verdict(store, fake):
    summary = run(store, pm_with(fake), RunConfig(observer="fake", critique=True), announce=quiet)
    first, second = verdicts(store)
    assert (first.needs_correction, first.critique_of, first.prompt_version) == (
        False,
        None,
        load_prompt().version,
    )
    assert second.critique_of == first.id and second.checkpoint_id == first.checkpoint_id
    assert (
        second.prompt_version == "critique-v2"
        and second.prompt_hash == load_critique_prompt().sha256
    )
    assert second.needs_correction is True and second.input_tokens > first.input_tokens
    assert fake.systems == [load_prompt().text, load_critique_prompt().text]
    assert (
        summary.audited,
        summary.corrections,
        summary.critiques,
        summary.critique_corrections,
    ) == (1, 0, 1, 1)
    assert summary.critique_candidates == 1


def test_the_second_pass_reads_the_thread_and_the_signals_redacted():
    user = render("## the thread\n", [Signal("planted", 0.9, [("m1", f"token {SECRET}")])])
    assert user.startswith("## the thread\n") and "# Local signals" in user
    assert "**planted** (score 0.90)" in user and "message `m1`" in user
    assert SECRET not in user and "[REDACTED:github-token]" in user


def test_no_second_pass_without_the_flag_below_the_score_or_after_a_correction(store, fake):
    run(store, pm_with(fake), RunConfig(observer="fake"), announce=quiet)
    assert len(verdicts(store)) == 1
    run(store, pm_with(fake, score=0.5), RunConfig(observer="fake", critique=True), announce=quiet)
    assert len(verdicts(store)) == 1
    loud = Recording(trigger="all tests pass")  # the first pass itself asks for a correction
    run(
        store,
        pm_with(loud),
        RunConfig(observer="fake", model="other", critique=True),
        announce=quiet,
    )
    assert [v.critique_of for v in verdicts(store)] == [None, None]
    summary = run(
        store,
        pm_with(fake, score=0.5),
        RunConfig(observer="fake", model="m3", critique=True, critique_min_score=0.4),
        announce=quiet,
    )
    assert summary.critiques == 1


def test_an_earlier_silent_verdict_is_critiqued_by_a_later_run_once(store, fake):
    run(store, pm_with(fake), RunConfig(observer="fake"), announce=quiet)
    later = run(store, pm_with(fake), RunConfig(observer="fake", critique=True), announce=quiet)
    assert (later.reused, later.audited, later.critiques) == (1, 0, 1)
    again = run(store, pm_with(fake), RunConfig(observer="fake", critique=True), announce=quiet)
    assert (again.reused, again.critiques) == (1, 0)
    assert fake.calls == 2 and [v.critique_of is not None for v in verdicts(store)] == [False, True]


def test_a_failed_second_pass_is_an_error_and_is_retried(store, fake):
    class FailsOnCritique(Recording):
        async def observe(self, request, options):
            if "# Local signals" in request.user and self.answer == "tool":
                raise ConnectionError("observer unreachable")
            return await super().observe(request, options)

    flaky = FailsOnCritique(trigger="# Local signals")
    summary = run(store, pm_with(flaky), RunConfig(observer="fake", critique=True), announce=quiet)
    assert (
        summary.errors == 1
        and verdicts(store)[-1].status == "error"
        and verdicts(store)[-1].critique_of
    )
    later = run(store, pm_with(fake), RunConfig(observer="fake", critique=True), announce=quiet)
    assert later.critiques == 1


def test_reports_can_tell_what_the_second_pass_added(store, fake):
    run(store, pm_with(fake), RunConfig(observer="fake", critique=True), announce=quiet)
    assert critique_summary(store) == {
        "critiques": 1,
        "corrections": 1,
        "failed": 0,
        "cost_usd": 0.0,
    }
    row = next(r for r in signal_counts(store) if r["signal"] == "planted")
    assert (row["audited"], row["corrections"], row["critiques"], row["critique_corrections"]) == (
        1,
        0,
        1,
        1,
    )


def test_the_command_line_flag(store, fake, monkeypatch):
    from auditor.cli import main as cli_mod

    monkeypatch.setattr(cli_mod.Context, "plugins", property(lambda self: pm_with(fake)))
    result = CliRunner().invoke(
        cli_mod.cli, ["run", "--observer", "fake", "--critique"], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    assert (
        "critique: 1 checkpoints with strong signals; 1 second passes, 1 corrections"
        in result.output
    )
    help_text = CliRunner().invoke(cli_mod.cli, ["run", "--help"]).output
    assert "--critique" in help_text and "--critique-min-score" in help_text
