"""`auditor search TEXT`: the words said and the tool results, found across stored threads."""

from __future__ import annotations

import csv
import io
import json

import pytest
from helpers.cli import invoke

pytestmark = pytest.mark.both_stores

SECRET = "sk-ant-api03-" + "Q7x9" * 20 + "AA"


def line(session: str, n: int, when: str, content, cwd: str = "/home/dev/invoicer") -> str:
    role = "assistant" if isinstance(content, str) and n % 2 == 0 else "user"
    record = {
        "parentUuid": None if n == 1 else f"{session}-{n - 1}",
        "cwd": cwd,
        "sessionId": session,
        "type": role,
        "uuid": f"{session}-{n}",
        "timestamp": when,
        "message": {"role": role, "content": content},
    }
    if role == "assistant":
        record["message"] = {
            "id": f"msg-{session}-{n}",
            "role": role,
            "model": "claude-sonnet-4-6",
            "content": [{"type": "text", "text": content}],
        }
    return json.dumps(record) + "\n"


def tool_result(session: str, n: int, when: str, text: str) -> str:
    block = {"type": "tool_result", "tool_use_id": f"toolu-{n}", "content": text}
    return line(session, n, when, [block])


def hits(*args: str) -> list[dict]:
    return json.loads(invoke("search", "--json", *args, ok=True).stdout)


@pytest.fixture
def transcripts(tmp_path):
    root = tmp_path / "projects"
    root.mkdir()
    invoicer = root / "s-invoice.jsonl"
    invoicer.write_text(
        line("s-invoice", 1, "2026-11-02T09:30:00Z", "Add a --currency option to invoicer")
        + line("s-invoice", 2, "2026-11-02T09:31:00Z", "I will read the CLI first.")
        + tool_result("s-invoice", 3, "2026-11-02T09:32:00Z", f"FAILED test_currency\nkey={SECRET}")
    )
    parser = root / "s-parser.jsonl"
    parser.write_text(
        line("s-parser", 1, "2026-11-20T10:00:00Z", "Why does the parser fail?", "/srv/parser")
        + line("s-parser", 2, "2026-11-20T10:01:00Z", "The currency field is empty.")
    )
    invoke("ingest", "-q", "--format", "claude-code", str(root), ok=True)
    return root


def test_words_in_messages_and_tool_results_are_found_newest_first(transcripts):
    found = hits("currency")
    assert [(h["thread"], h["role"]) for h in found] == [
        ("s-parser", "assistant"),
        ("s-invoice", "user"),  # the tool result
        ("s-invoice", "user"),  # the request
    ]
    assert found[0]["agent"] == "claude-code"
    assert found[0]["time"].startswith("2026-11-20T10:01")
    assert found[0]["snippet"] == "The currency field is empty."
    assert hits("FAILED", "test_currency")[0]["snippet"].startswith("FAILED test_currency")
    assert hits("currency", "parser") == []  # every word in the same message


def test_a_secret_in_a_match_is_redacted(transcripts):
    (found,) = hits("FAILED")
    assert SECRET not in found["snippet"] and "[REDACTED" in found["snippet"]
    table = invoke("search", "FAILED", ok=True).stdout
    assert "s-invoice" in table and SECRET[:20] not in table


def test_filters_agent_project_since_and_limit(transcripts):
    assert {h["thread"] for h in hits("currency", "--project", "PARSER")} == {"s-parser"}
    assert {h["thread"] for h in hits("currency", "--since", "2026-11-10")} == {"s-parser"}
    assert len(hits("currency", "--limit", "1")) == 1
    assert hits("currency", "--agent", "codex") == []


def test_later_ingests_are_found_and_forgotten_threads_are_not(transcripts):
    assert hits("refund") == []
    with (transcripts / "s-parser.jsonl").open("a") as f:
        f.write(line("s-parser", 3, "2026-11-21T08:00:00Z", "Now add refund support."))
    invoke("ingest", "-q", "--format", "claude-code", str(transcripts), ok=True)
    assert [h["thread"] for h in hits("refund")] == ["s-parser"]
    invoke("forget", "s-parser", ok=True)
    assert hits("refund") == []
    assert {h["thread"] for h in hits("currency")} == {"s-invoice"}


def test_csv_and_json_lines_carry_the_same_rows(transcripts):
    rows = list(csv.DictReader(io.StringIO(invoke("search", "--csv", "currency", ok=True).stdout)))
    assert [r["thread"] for r in rows] == [h["thread"] for h in hits("currency")]
    lines = invoke("search", "--nl", "currency", ok=True).stdout.splitlines()
    assert [json.loads(x)["snippet"] for x in lines] == [h["snippet"] for h in hits("currency")]


def test_nothing_found_is_said_in_one_line(transcripts):
    result = invoke("search", "zeppelin", ok=True)
    assert result.stdout == ""
    assert result.stderr.strip().splitlines() == ["No message holds 'zeppelin'."]
    assert hits("zeppelin") == []


@pytest.mark.sqlite_only
def test_the_snippet_is_around_the_whole_word_matched():
    from auditor.store.search import snippet

    body = "Currencies are listed first. " + "filler " * 40 + "Then the currency option."
    assert snippet(body, ["currency"], width=40) == "…Then the currency option."


def test_each_message_keeps_its_own_searchable_text_across_ingests(tmp_path, engine):
    """The text ingest writes with each message belongs to that message, whatever ids the
    store gives (rows of earlier ingests, a grown file, a second file of new threads): each
    stored text is the one read back from its own message's blocks."""
    from sqlalchemy import text

    from auditor.store.search import searchable

    def said(session: str, numbers, day: str) -> str:
        return "".join(
            line(session, n, f"{day}T09:3{n}:00Z", f"{session} word{n}") for n in numbers
        )

    first = tmp_path / "a.jsonl"
    first.write_text(said("s-a", (1, 2), "2026-11-02"))
    invoke("ingest", str(tmp_path), ok=True)
    with first.open("a") as out:  # grown: its new messages are stored after the first ones
        out.write(said("s-a", (3, 4), "2026-11-02"))
    (tmp_path / "b.jsonl").write_text(said("s-b", (1, 2, 3), "2026-11-03"))
    invoke("ingest", str(tmp_path), ok=True)
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT m.native_id, m.blocks, t.body FROM messages m "
                "JOIN search_texts t ON t.message_id = m.id ORDER BY m.id"
            )
        ).all()
    assert [native for native, _, _ in rows] == [f"s-a-{n}" for n in (1, 2, 3, 4)] + [
        f"s-b-{n}" for n in (1, 2, 3)
    ]
    for native, blocks, body in rows:
        blocks = json.loads(blocks) if isinstance(blocks, str) else blocks
        assert body == searchable(blocks) != "", native
    assert [h["thread"] for h in hits("word3")] == ["s-b", "s-a"]
    assert [h["snippet"] for h in hits("word4")] == ["s-a word4"]
