"""The command line: help everywhere, one-line errors, JSON that parses."""

from __future__ import annotations

import json

import pytest
from helpers.cli import invoke

from auditor.cli.main import cli


def all_commands(group=cli, prefix=()):
    for name, cmd in group.commands.items():
        yield prefix + (name,)
        if hasattr(cmd, "commands"):
            yield from all_commands(cmd, prefix + (name,))


@pytest.mark.parametrize("command", list(all_commands()), ids=lambda c: " ".join(c))
def test_every_command_has_help(command):
    result = invoke(*command, "--help")
    assert result.exit_code == 0
    assert "Usage: " in result.output and len(result.output.splitlines()) > 3


def test_unknown_thread_is_one_line(tmp_path):
    chat = tmp_path / "chat.json"
    chat.write_text(json.dumps({"id": "c1", "messages": [{"role": "user", "content": "hi"}]}))
    invoke("ingest", "-q", str(chat))
    result = invoke("show", "no-such-thread")
    assert result.exit_code == 2
    assert result.output == "Error: 'no-such-thread' is not a known thread.\n"


def test_unknown_format_lists_the_known_ones(tmp_path):
    result = invoke("ingest", "--format", "nope", str(tmp_path))
    assert result.exit_code == 2
    assert result.output.startswith("Error: 'nope' is not a known transcript format. Available: ")
    assert "claude-code" in result.output


def test_db_commands(tmp_path):
    db = tmp_path / "x.db"
    assert invoke("--db", str(db), "db", "path").output.strip() == str(db)
    assert invoke("--db", str(db), "db", "current").output.startswith("current: (empty)")
    assert invoke("--db", str(db), "db", "upgrade").exit_code == 0
    assert "current: (empty)" not in invoke("--db", str(db), "db", "current").output


def test_plugins_json_lists_formats():
    data = json.loads(invoke("plugins", "--json").output)
    assert {"claude-code", "codex", "amp", "openai"} <= set(data["formats"])
    assert data["failed"] == []


def test_ingest_and_threads_json(tmp_path):
    chat = tmp_path / "chat.json"
    chat.write_text(
        json.dumps(
            {
                "id": "c1",
                "messages": [
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": "hello"},
                ],
            }
        )
    )
    summary = json.loads(invoke("ingest", "--json", str(chat)).output)
    assert (summary["new"], summary["messages"], summary["failed"]) == (1, 2, 0)
    rows = json.loads(invoke("threads", "--json").output)
    assert [(r["native_id"], r["agent"], r["messages"]) for r in rows] == [("c1", "openai", 2)]
    shown = invoke("show", "c1").output
    assert "hi" in shown and "hello" in shown


def test_a_session_prefix_names_the_session_not_its_subagents(tmp_path):
    for native_id in ("sess-1", "sess-1/agent-a"):
        f = tmp_path / f"{native_id.replace('/', '_')}.json"
        f.write_text(
            json.dumps(
                {
                    "id": native_id,
                    "messages": [{"role": "user", "content": f"hello from {native_id}"}],
                }
            )
        )
    invoke("ingest", "-q", str(tmp_path))
    shown = invoke("show", "sess")
    assert (
        shown.exit_code == 0
        and "hello from sess-1" in shown.output
        and "agent-a" not in shown.output
    )


@pytest.mark.corpus
def test_prompt_budget_grows_with_the_turn_within_the_given_floor_and_cap(corpus):
    from auditor_plugins.formatter_text import estimate_tokens

    # A 148-call turn: the default budget is 7500 + 60 a call; the options move floor and cap.
    path = corpus / "claude-code/marot-spotter/ae4a77f8-aedd-4bc1-888f-c94edc91af04.jsonl"
    assert invoke("ingest", str(path)).exit_code == 0

    def size(*options: str) -> int:
        at = "1d698e31-9e57-4b0c-b787-727e7bcea2f9"
        result = invoke("prompt", "ae4a77f8", "--at", at, *options)
        assert result.exit_code == 0
        return estimate_tokens(result.stdout.split("=== user ===\n", 1)[1])

    capped = size("--max-prompt-tokens", "6000")
    grown = size()
    raised = size("--min-prompt-tokens", "20000", "--max-prompt-tokens", "40000")
    assert capped <= 6000 and 8000 < grown <= 7500 + 60 * 148 < raised <= 20000 + 60 * 148
    # As the embedded model gets it: sized to its window, beside the system prompt.
    from auditor_plugins.embedded import EmbeddedObserver

    from auditor.audit.checkpoint_plan import formatter_for
    from auditor.audit.prompt import load_prompt

    fits = formatter_for({}, EmbeddedObserver(), load_prompt().text)["max_tokens"]
    assert size("--observer", "embedded") <= fits < 6000


@pytest.mark.corpus
def test_prompt_takes_the_short_ids_show_prints(corpus):
    path = corpus / "claude-code/marot-spotter/ae4a77f8-aedd-4bc1-888f-c94edc91af04.jsonl"
    invoke("ingest", "-q", str(path), ok=True)
    full = invoke("prompt", "ae4a77f8", "--at", "1d698e31-9e57-4b0c-b787-727e7bcea2f9", ok=True)
    short = invoke("prompt", "ae4a77f8", "--at", "1d698e31", ok=True)
    assert short.stdout == full.stdout


def test_an_ambiguous_message_prefix_names_the_candidates():
    from pathlib import Path

    samples = Path(__file__).resolve().parent.parent / "data" / "samples" / "claude-code"
    invoke("ingest", "-q", str(samples), ok=True)
    result = invoke("prompt", "5a3f2c1e", "--at", "5a3f0000-0000-0000-0000-00000000000")
    assert result.exit_code == 2
    assert result.output.startswith(
        "Error: '5a3f0000-0000-0000-0000-00000000000' matches 15 messages of thread "
        "5a3f2c1e-7b8d-4e9f-a0b1-c2d3e4f5a6b7: 5a3f0000-0000-0000-0000-000000000001, "
    )
    assert result.output.rstrip().endswith("Give more of the id.")
