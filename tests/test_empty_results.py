"""A listing with nothing to list says so, on stderr, instead of printing nothing at all."""

from __future__ import annotations

import json

from helpers.cli import invoke


def one_thread(tmp_path) -> None:
    chat = tmp_path / "chat.json"
    chat.write_text(json.dumps({"id": "c1", "messages": [{"role": "user", "content": "hi"}]}))
    invoke("ingest", "-q", str(chat), ok=True)


def test_events_with_no_match_say_so(tmp_path):
    one_thread(tmp_path)
    result = invoke("events", "--type", "corrected", ok=True)
    assert (result.stdout, result.stderr) == ("", "No event matches these filters.\n")
    assert invoke("events", ok=True).stdout.strip()  # the ingest is logged


def test_an_empty_log_says_what_fills_it():
    result = invoke("events", ok=True)
    assert result.stdout == ""
    assert result.stderr.startswith("The store has no threads yet: run `auditor ingest")


def test_threads_with_no_match_say_so(tmp_path):
    one_thread(tmp_path)
    result = invoke("threads", "--agent", "codex", ok=True)
    assert result.stderr == "No thread matches these filters.\n"
    assert "0 threads" not in result.stdout


def test_runs_before_any_run_say_how_to_start_one(tmp_path):
    one_thread(tmp_path)
    result = invoke("runs", ok=True)
    assert (result.stdout, result.stderr) == (
        "",
        "No runs yet: `auditor run` audits the stored threads.\n",
    )


def test_ingest_to_a_pipe_says_how_far_it_got(monkeypatch):
    from pathlib import Path

    from auditor.cli import render

    monkeypatch.setenv(render.PROGRESS_EVERY_VAR, "0")
    samples = Path(__file__).resolve().parent.parent / "data" / "samples"
    result = invoke("ingest", str(samples), ok=True)
    lines = [line for line in result.stderr.splitlines() if line.startswith("ingest: ")]
    files = int(result.stdout.split(" files:")[0])  # the summary: "4 files: 3 new, ..."
    assert [line.split(",")[0] for line in lines] == [
        f"ingest: {n} files" for n in range(1, files + 1)
    ]
    added = result.stdout.split(" messages added")[0].rsplit(" ", 1)[-1]
    assert f", {added} messages added, " in lines[-1]
    assert lines[-1].endswith(".json") or lines[-1].endswith(".jsonl")  # the file it read last
