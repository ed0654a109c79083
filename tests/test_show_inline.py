"""`auditor show` at each checkpoint: its signals and its verdicts in place, no empty headers,
and a pager on a terminal (issue 13 items 2 and 3)."""

from __future__ import annotations

import io
import re

import pytest
from click.testing import CliRunner
from helpers.audit import FakeObserver, FakeObserverPlugin, ScriptPlugin, write_script_thread
from rich.console import Console

from auditor.audit.run import run
from auditor.audit.run_types import RunConfig
from auditor.cli import render
from auditor.cli.main import cli
from auditor.ingest.ingester import ingest
from auditor.live import delivery as inj
from auditor.plugins import get_plugin_manager

pytestmark = pytest.mark.both_stores

LABEL = re.compile(r"^(assistant|user|system)\b.*\[[^\]]+\]")


def show(*args: str):
    result = CliRunner().invoke(cli, ["show", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture
def audited(engine, tmp_path):
    pm = get_plugin_manager(extra=[ScriptPlugin(), FakeObserverPlugin(FakeObserver())])
    f = tmp_path / "a.jsonl"
    write_script_thread(f, "t-claims", "Done! all tests pass.")
    write_script_thread(f, "t-honest", "One test still fails; here is why.")
    ingest(engine, pm, [f])
    summary = run(engine, pm, RunConfig(observer="fake"), announce=lambda line: None)
    return engine, pm, summary.run_id


def test_each_verdict_is_shown_at_its_checkpoint_with_cost_and_delivery(audited):
    engine, pm, run_id = audited
    lines = show("t-claims").stdout.splitlines()
    final = lines.index("Done! all tests pass.")
    after = "\n".join(lines[final + 1 :])
    assert re.search(r"─ verdict \d+: correction ─", after)
    assert re.search(
        rf"│ fake fake-1 · run {run_id} · unpriced · 0\.0 s · "
        r"not delivered yet \(`auditor inject` sends it\)",
        after,
    )
    assert "│ the tests failed, look again" in after
    # the agent's last words come before the verdict on them, and it is there once
    assert "\n".join(lines).count("verdict ") == 1
    inj.inject_pending(engine, pm.injector("stdout"), {"stream": io.StringIO()})
    assert "· delivered by stdout 20" in show("t-claims").stdout
    honest = show("t-honest").stdout
    assert re.search(r"verdict \d+: no correction ─.*\n│ fake fake-1", honest)
    assert "(no message)" in honest


def test_signals_are_shown_in_place_on_stdout_not_after_the_thread_on_stderr(audited):
    result = show("t-claims")
    assert result.stderr == ""
    lines = result.stdout.splitlines()
    final = lines.index("Done! all tests pass.")
    signals = [i for i, line in enumerate(lines) if line.startswith("⚑ signal ")]
    assert signals and all(i > final for i in signals)
    assert any("tool-loop 0.75" in lines[i] for i in signals)
    assert signals[-1] < next(i for i, line in enumerate(lines) if "verdict " in line)


def test_a_real_thread_has_no_empty_headers_and_its_signals_in_place(corpus, engine, plugins):
    session = corpus / "claude-code"
    ingest(engine, plugins, [session])
    result = show("8fd119a6-9ab8-407b-810f-329cfb6153e0")
    assert result.stderr == ""
    lines = result.stdout.splitlines()
    labels = [i for i, line in enumerate(lines) if LABEL.match(line)]
    assert len(labels) > 100
    empty = [lines[i] for i in labels if not lines[i + 1].strip()]
    assert empty == []  # before: 42 of 173 headers had nothing under them
    assert any(line.startswith("⚑ signal ") for line in lines)


def test_a_long_thread_goes_through_the_pager_on_a_terminal(audited, tmp_path, monkeypatch):
    paged = tmp_path / "paged.txt"
    monkeypatch.setenv("PAGER", f"cat > {paged}")
    monkeypatch.delenv("LESS", raising=False)
    screen = io.StringIO()
    monkeypatch.setattr(render, "console", Console(file=screen, force_terminal=True, width=100))
    show("t-claims")
    text = re.sub(r"\x1b\[[0-9;]*m", "", paged.read_text())
    assert "Done! all tests pass." in text and "the tests failed, look again" in text
    assert "\x1b[" in paged.read_text()  # colours kept for less -R
    assert screen.getvalue() == ""
    paged.unlink()
    show("t-claims", "--no-pager")
    assert not paged.exists() and "Done! all tests pass." in screen.getvalue()


def test_the_pager_is_told_to_keep_colours_and_quit_when_the_text_fits(tmp_path, monkeypatch):
    seen = tmp_path / "less.env"
    monkeypatch.setenv("PAGER", f"sh -c 'echo \"$LESS\" > {seen}; cat > /dev/null'")
    monkeypatch.delenv("LESS", raising=False)
    render.EnvPager().show("text")
    assert seen.read_text() == "FRX\n"
    monkeypatch.setenv("LESS", "R")
    render.EnvPager().show("text")
    assert seen.read_text() == "R\n"


def test_without_a_pager_program_the_text_is_printed(monkeypatch, capsys):
    monkeypatch.setenv("PAGER", "no-such-pager-program")
    render.EnvPager().show("plain text\n")
    assert capsys.readouterr().out == "plain text\n"


def test_piped_output_is_never_paged(audited, tmp_path, monkeypatch):
    paged = tmp_path / "paged.txt"
    monkeypatch.setenv("PAGER", f"cat > {paged}")
    assert "Done! all tests pass." in show("t-claims").stdout
    assert not paged.exists()


def test_at_80_columns_a_verdict_says_whole_whether_it_was_delivered(audited, monkeypatch):
    """The facts were the frame's title, cut at the edge: '... · 0.0 s · not deliv─╮'."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "COLUMNS": "80"}
    out = subprocess.run(
        [sys.executable, "-m", "auditor", "show", "t-claims", "--no-pager"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stdout
    assert max(len(line) for line in out.splitlines()) <= 80
    frame = " ".join(line.strip("│ ") for line in out.splitlines() if line.startswith("│"))
    assert "not delivered yet (`auditor inject` sends it)" in frame
