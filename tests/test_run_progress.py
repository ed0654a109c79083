"""What `auditor run` tells the user: progress with a horizon, the corrections it got, and how to
resume a run stopped by Ctrl-C or SIGTERM.

Real transcripts from the corpus; the observer is the `local` backend (the real openai SDK)
against a stub server on 127.0.0.1 answering in the OpenAI wire format; the runs are real
subprocesses.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time

import pytest
from helpers.wire import CORRECTION, Reply, Stub, openai_response
from rich.console import Console

from auditor.audit.run_types import RunSummary
from auditor.cli import render

SESSION = "claude-code/daaain-claude-code-log/-Users-dain-workspace-claude-code-log-sample/37f83ec9-f2ea-42a9-925e-0d5c105cb6e8.jsonl"
CORRECTING = json.dumps({"needsCorrection": True, "message": CORRECTION + "\nSecond line."})


def auditor(*args: str, db) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "auditor", "--db", str(db), *args],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "COLUMNS": "200"},
    )


def observer(stub: Stub) -> list[str]:
    url = stub.url + "/v1"
    return ["--observer", "local", "--base-url", url, "--min-tool-calls", "1", "--max-retries", "0"]


@pytest.fixture
def store(corpus, tmp_path):
    shutil.copy(corpus / SESSION, tmp_path / os.path.basename(SESSION))
    db = tmp_path / "store.db"
    assert auditor("ingest", "-q", str(tmp_path), db=db).returncode == 0
    return db


def test_the_summary_lists_each_correction_with_its_thread_and_first_line(store):
    stub = Stub(Reply(body=openai_response(CORRECTING)))
    try:
        done = auditor("run", *observer(stub), db=store)
    finally:
        stub.close()
    assert done.returncode == 0, done.stderr
    calls = sum(r["path"].endswith("/chat/completions") for r in stub.log)
    assert calls >= 3
    lines = done.stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("corrections ("))
    assert lines[head].startswith(f"corrections ({calls}; in full: auditor verdicts -c --run 1)")
    listed = lines[head + 1 : head + 1 + calls]
    with sqlite3.connect(store) as conn:
        checkpoints = conn.execute(
            "SELECT c.message_native_id FROM verdicts v JOIN checkpoints c ON c.id = v.checkpoint_id"
        ).fetchall()
    assert len(listed) == len(checkpoints) == calls
    for line in listed:
        assert line.startswith("  37f83ec9 at ")
        assert line.endswith(": " + CORRECTION)  # the first line only
    assert {line.split(" at ")[1][:8] for line in listed} == {m[:8] for (m,) in checkpoints}


def test_json_summary_carries_the_corrections(store):
    stub = Stub(Reply(body=openai_response(CORRECTING)))
    try:
        done = auditor("run", "--json", "--limit", "2", *observer(stub), db=store)
    finally:
        stub.close()
    summary = json.loads(done.stdout)
    assert summary["queued"] == summary["finished"] == 2 and not summary["planning"]
    assert [c["thread"] for c in summary["found"]] == ["37f83ec9-f2ea-42a9-925e-0d5c105cb6e8"] * 2
    assert summary["found"][0]["message"] == CORRECTION + "\nSecond line."


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_run_says_what_it_kept_and_how_to_resume(store, signum):
    stub = Stub(Reply(body=openai_response(CORRECTING), delay=1.0))
    args = ["run", "-j", "1", *observer(stub)]
    try:
        run = subprocess.Popen(
            [sys.executable, "-m", "auditor", "--db", str(store), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and run.poll() is None:
            with sqlite3.connect(store) as conn:
                if conn.execute("SELECT count(*) FROM verdicts").fetchone()[0] >= 1:
                    break
            time.sleep(0.05)
        run.send_signal(signum)
        out, err = run.communicate(timeout=30)
        assert run.returncode == 130, err
        with sqlite3.connect(store) as conn:
            kept = conn.execute("SELECT count(*) FROM verdicts").fetchone()[0]
            status = conn.execute("SELECT status FROM runs").fetchone()[0]
        assert status == "interrupted"
        assert f"corrections ({kept}; in full: auditor verdicts -c --run 1)" in out
        said = err.strip().splitlines()[-3:]
        # The call in flight when the signal came (if one was) is given up, and said so.
        assert said[0] in (
            f"Interrupted: run 1 stopped after {kept} of 3 calls; every answer received is "
            f"stored{gave_up}."
            for gave_up in ("", "; the call in flight abandoned (sent again on resume)")
        )
        assert said[1] == (
            "To resume, run the same command again (answered checkpoints are not sent again):"
        )
        assert said[2] == "  auditor " + " ".join(["--db", str(store), *args])
        # The same command carries on where it stopped, paying for nothing twice.
        again = auditor(*args, "--json", db=store)
        assert again.returncode == 0, again.stderr
        assert json.loads(again.stdout)["reused"] == kept
    finally:
        stub.close()


def test_progress_shows_done_of_total_cost_and_eta(monkeypatch):
    out = io.StringIO()
    monkeypatch.setattr(render, "err_console", Console(file=out, force_terminal=True, width=140))
    summary = RunSummary(1, "local", "m")
    with render.run_progress() as progress:
        summary.queued = 3
        progress(summary)
        summary.planning, summary.finished, summary.cost_usd, summary.corrections = (
            False,
            1,
            0.25,
            1,
        )
        progress(summary)
        seen = out.getvalue()
    assert "0/3+ calls" in seen
    assert "1/3 calls" in seen and "1 corrections" in seen and "$0.2500" in seen
    assert "ETA 0:00:0" in seen  # two calls left at the pace of the first (well under a second)


@pytest.mark.slow
def test_sigterm_stops_a_background_run_whose_observer_never_answers(store):
    """Started as `auditor run &` is (SIGINT ignored), against an observer that takes the
    connection and never answers: SIGTERM ends the run at once, not when its calls time out."""
    hung = Stub(Reply(body=openai_response(CORRECTING), delay=600))
    hung.queue.append(Reply(body={"object": "list", "data": []}))  # the backend's check: at once
    args = ["run", "-j", "2", *observer(hung), "--timeout", "300"]
    try:
        run = subprocess.Popen(
            [sys.executable, "-m", "auditor", "--db", str(store), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
        )
        deadline = time.monotonic() + 60
        calls = lambda: [r for r in hung.log if r["path"].endswith("/chat/completions")]  # noqa: E731
        while time.monotonic() < deadline and not calls():
            time.sleep(0.05)
        assert calls(), "no call was made"
        run.send_signal(signal.SIGTERM)
        try:
            out, err = run.communicate(timeout=30)  # the calls would hang for 300 s
        except subprocess.TimeoutExpired:
            run.kill()
            run.communicate()
            raise AssertionError("SIGTERM did not stop the run within 30 s") from None
        assert run.returncode == 130, err
        assert "Interrupted: run 1 stopped after 0 of" in err
        assert "Traceback" not in err
    finally:
        hung.close()


def test_a_run_piped_to_a_file_writes_progress_lines(store):
    """Output to a pipe (a log, `| tee`) showed nothing for minutes: no bar, no line."""
    stub = Stub(Reply(body=openai_response(CORRECTING)))
    try:
        env = {**os.environ, "COLUMNS": "200", render.PROGRESS_EVERY_VAR: "0"}
        done = subprocess.run(
            [sys.executable, "-m", "auditor", "--db", str(store), "run", *observer(stub)],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
    finally:
        stub.close()
    assert done.returncode == 0, done.stderr
    calls = sum(r["path"].endswith("/chat/completions") for r in stub.log)
    lines = [line for line in done.stderr.splitlines() if line.startswith("audit: ")]
    assert len(lines) >= calls
    assert lines[-1].startswith(f"audit: {calls}/{calls} calls, {calls} corrections, $")
    assert "\x1b" not in done.stderr  # plain lines, no bar drawn over itself


def test_line_progress_waits_its_interval_between_lines(monkeypatch):
    out = io.StringIO()
    monkeypatch.setattr(render, "err_console", Console(file=out, force_terminal=False, width=140))
    clock = iter([0.0, 1.0, 4.0, 11.0, 12.0, 12.5])
    monkeypatch.setattr(render, "monotonic", lambda: next(clock))
    summary = RunSummary(1, "local", "m")
    with render.run_progress(every=10.0) as progress:  # started at 0.0
        summary.queued, summary.finished = 4, 1
        progress(summary)  # 1.0: too soon
        summary.finished = 2
        progress(summary)  # 4.0: too soon
        summary.finished, summary.planning = 3, False
        progress(summary)  # 11.0: a line
        summary.finished = 4
        progress(summary)  # 12.0: the last call: a line at once
    lines = out.getvalue().splitlines()
    assert [line.split(",")[0] for line in lines] == ["audit: 3/4 calls", "audit: 4/4 calls"]
    assert lines[0].endswith("0:00:11 elapsed, ETA 0:00:04")
