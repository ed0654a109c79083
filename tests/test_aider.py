"""Aider chat histories: sessions as threads, edit blocks and shell commands as tool calls."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.store import store_counts, stored_thread
from sqlalchemy import text

from auditor.audit.checkpoints import find_checkpoints
from auditor.ingest.ingester import ingest
from auditor.store.threads import load_messages

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "data" / "formats" / "greeter.aider.chat.history.md"
INPUT_HISTORY = ROOT / "data" / "formats" / "greeter.aider.input.history"
FIRST = "formats@2026-03-02T09:15:04"
SECOND = "formats@2026-03-02T11:40:27"


def texts(row) -> list[str]:
    return [b.get("text", "") for b in json.loads(row.blocks)]


def test_a_session_reads_as_turns_with_the_edits_aider_applied_as_calls(engine, plugins):
    summary = ingest(engine, plugins, [SAMPLE])
    assert summary.ok and summary.files[0].format == "aider"
    th, msgs, calls, tokens = stored_thread(engine, "aider", FIRST)
    assert [(m.native_id, m.role, m.source_type) for m in msgs] == [
        ("L4", "system", "meta"),  # aider's banner
        ("L11", "user", "command"),  # /add greet.py, with aider's answer
        ("L14", "user", "user"),  # the typed request (two lines)
        ("L17", "assistant", "agent"),  # the reply: its text and the calls aider made of it
        ("L17:out", "tool", "tool-result"),  # what aider said it did
        ("L17:end", "assistant", "agent"),  # the reply's text after its edit block
        ("L41", "system", "meta"),
        ("L43", "user", "command"),  # /run: the person's command, not the agent's call
        ("L47", "user", "user"),
        ("L49", "assistant", "agent"),
        ("L49:out", "tool", "tool-result"),
        ("L49:end", "assistant", "agent"),  # the reply ended on its block: an empty close
        ("L61", "system", "meta"),
        ("L66", "user", "user"),
        ("L68", "assistant", "agent"),
    ]
    assert texts(msgs[2]) == [
        'Make greet() take a name and say hello to it.\nKeep the default "world".'
    ]
    edit = calls["L17:edit0"]
    assert (edit.name, edit.is_file_edit, edit.edited_paths, edit.is_error) == (
        "edit",
        True,
        ["greet.py"],
        False,
    )
    assert edit.result_message_id == "L17:out"
    [use] = [b for b in json.loads(msgs[3].blocks) if b.get("tool_use_id") == "L17:edit0"]
    assert use["tool_input"]["replace"] == 'def greet(name="world"):\n    print(f"Hello, {name}!")'
    shell = calls["L17:shell0"]
    assert (shell.name, shell.is_file_edit, shell.is_error) == ("shell", False, True)  # declined
    assert calls["L49:edit0"].edited_paths == ["tests/test_greet.py"]
    assert len(calls) == 3
    # The reply's text keeps its prose; the edit block itself is the call's input.
    assert "<<<<<<< SEARCH" not in msgs[3].blocks and "You can try it with" in texts(msgs[5])[0]
    # "2.4k sent, 1.1k cache hit, 96 received" (+ two more replies): the cache is not input.
    assert (tokens.input, tokens.cache_read, tokens.output, tokens.bills) == (
        1300 + 2900 + 3000,
        1100,
        96 + 71 + 18,
        3,
    )
    assert "anthropic/claude-sonnet-4-5" in th["models"] and th["version"] == "0.86.1"
    ends = find_checkpoints(th["id"], load_messages(engine, th["id"]))
    assert [(c.message_id, c.tool_calls, c.file_edits) for c in ends] == [
        ("L17:end", 2, 1),
        ("L49:end", 1, 1),
        ("L68", 0, 0),
    ]


def test_a_block_that_failed_to_match_is_a_failed_edit_and_the_retry_ends_the_turn(engine, plugins):
    assert ingest(engine, plugins, [SAMPLE]).ok
    th, msgs, calls, _ = stored_thread(engine, "aider", SECOND)
    assert calls["L80:edit0"].is_error and not calls["L95:edit0"].is_error
    failed = next(m for m in msgs if m.native_id == "L80:out")
    assert "failed to match" in texts(failed)[0]
    [end] = find_checkpoints(th["id"], load_messages(engine, th["id"]))
    assert (end.message_id, end.tool_calls, end.file_edits) == ("L95:end", 2, 2)


def snapshot(engine) -> list:
    with engine.connect() as conn:
        return conn.execute(
            text(
                "SELECT t.native_id, m.native_id, m.role, m.blocks FROM messages m "
                "JOIN threads t ON t.id = m.thread_id ORDER BY t.native_id, m.seq, m.native_id"
            )
        ).all()


@pytest.mark.parametrize("cut_at", ["> Tokens: 2.8k", "> Applied edit to greet.py", "#### Add"])
def test_a_history_aider_is_still_writing_reads_as_a_fresh_read_does(
    tmp_path, engine, plugins, cut_at
):
    whole = SAMPLE.read_text()
    cut = whole.index(cut_at)
    path = tmp_path / "formats" / ".aider.chat.history.md"
    path.parent.mkdir()
    path.write_text(whole[:cut])
    assert ingest(engine, plugins, [path.parent]).ok  # a walk finds the file by its name
    with path.open("a") as fh:
        fh.write(whole[cut:])
    summary = ingest(engine, plugins, [path])
    assert summary.ok and summary.grown + summary.rewritten == 1
    from auditor.store.db import open_db

    fresh = open_db(tmp_path / "fresh.db")
    assert ingest(fresh, plugins, [path]).ok
    assert snapshot(engine) == snapshot(fresh)


def test_a_walk_passes_over_other_markdown(tmp_path, engine, plugins):
    (tmp_path / "README.md").write_text("# A project\n\nNothing to see.\n")
    (tmp_path / ".aider.chat.history.md").write_text(SAMPLE.read_text())
    summary = ingest(engine, plugins, [tmp_path])
    assert summary.ok and [Path(f.path).name for f in summary.files] == [".aider.chat.history.md"]


def test_bytes_that_are_not_text_are_one_problem_naming_the_line(tmp_path, engine, plugins):
    lines = SAMPLE.read_bytes().split(b"\n")
    lines[16] = b"I'll give \xff\xfe a name."  # the reply's first line
    path = tmp_path / ".aider.chat.history.md"
    path.write_bytes(b"\n".join(lines))
    summary = ingest(engine, plugins, [path])
    assert summary.errors == [
        f"{path}:17: bytes that are not UTF-8 text (invalid start byte at column 11); "
        "read with them replaced"
    ]
    _, msgs, calls, _ = stored_thread(engine, "aider", f"{tmp_path.name}@2026-03-02T09:15:04")
    assert len(msgs) == 15 and len(calls) == 3  # the rest is read


def test_markdown_that_is_no_aider_history_forced_as_one_says_so(tmp_path, engine, plugins):
    path = tmp_path / "notes.md"
    path.write_text("# Notes\n\n#### not a prompt  \n")
    summary = ingest(engine, plugins, [path], format_name="aider")
    assert summary.errors == [
        f"{path}: no '# aider chat started at' line: not an aider chat history "
        "(.aider.chat.history.md)"
    ]


def test_the_input_history_stores_nothing_and_says_the_chat_history_holds_its_turns(
    engine, plugins
):
    summary = ingest(engine, plugins, [INPUT_HISTORY])
    assert summary.ok and summary.errors == [] and summary.files[0].format == "aider"
    assert summary.notes == [
        f"{INPUT_HISTORY}: aider's input history (the typed lines alone): nothing stored; "
        "greeter.aider.chat.history.md beside it holds these turns, ingest that"
    ]
    assert store_counts(engine).threads == 0


def test_an_input_history_alone_names_the_chat_history_aider_writes(tmp_path, engine, plugins):
    path = tmp_path / ".aider.input.history"
    path.write_bytes(INPUT_HISTORY.read_bytes())
    summary = ingest(engine, plugins, [path])
    assert summary.ok and summary.notes == [
        f"{path}: aider's input history (the typed lines alone): nothing stored; "
        "aider writes these turns to .aider.chat.history.md, not found beside it"
    ]


def test_the_input_history_is_claimed_by_aider_alone(tmp_path, engine, plugins):
    path = tmp_path / "typed.txt"  # told by its lines, whatever its name
    path.write_bytes(INPUT_HISTORY.read_bytes())
    for forced in ("cursor", "openai", "codex"):
        summary = ingest(engine, plugins, [path], format_name=forced)
        assert summary.errors == [
            f"{path}: --format {forced} does not fit this aider transcript; "
            "drop --format, or use --format aider"
        ]


def test_the_command_line_prints_the_note_and_exits_0(tmp_path):
    from click.testing import CliRunner

    from auditor.cli.main import cli

    result = CliRunner().invoke(
        cli, ["--db", str(tmp_path / "cli.db"), "ingest", str(INPUT_HISTORY)]
    )
    assert result.exit_code == 0, result.output
    assert f"{INPUT_HISTORY}: aider's input history" in result.output
    assert "0 with problems" in result.output


@pytest.mark.corpus
def test_every_aider_history_of_the_corpus_ingests(corpus, engine, plugins):
    summary = ingest(engine, plugins, [corpus / "aider"])
    assert summary.ok, summary.errors
    # The walk takes the chat histories; .aider.input.history repeats their typed lines.
    assert [f.format for f in summary.files] == ["aider"] * 4
    # threads, messages, calls (35 edits, 8 shell commands all declined), answered, edits,
    # failed, tokens
    assert store_counts(engine) == (37, 207, 43, 43, 35, 8, 125_027)


@pytest.mark.corpus
def test_the_input_history_of_the_corpus_given_by_name_is_no_problem(corpus, engine, plugins):
    folder = corpus / "aider" / "AbdulAlkawasmeh-metadata-aider"
    summary = ingest(engine, plugins, [folder / ".aider.input.history"])
    assert summary.ok and summary.errors == [] and len(summary.notes) == 1
    assert ".aider.chat.history.md beside it holds these turns" in summary.notes[0]
    assert store_counts(engine).threads == 0
