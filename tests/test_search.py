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
    """The text ingest indexes with each message belongs to that message, whatever ids the
    store gives (rows of earlier ingests, a grown file, a second file of new threads): each
    message's own word finds it, with the text read back from its own blocks."""
    from sqlalchemy import text

    from auditor.store.search import searchable

    def said(session: str, numbers, day: str) -> str:
        return "".join(
            line(session, n, f"{day}T09:3{n}:00Z", f"{session} word{n} only{session[2:]}{n}")
            for n in numbers
        )

    first = tmp_path / "a.jsonl"
    first.write_text(said("s-a", (1, 2), "2026-11-02"))
    invoke("ingest", str(tmp_path), ok=True)
    with first.open("a") as out:  # grown: its new messages are stored after the first ones
        out.write(said("s-a", (3, 4), "2026-11-02"))
    (tmp_path / "b.jsonl").write_text(said("s-b", (1, 2, 3), "2026-11-03"))
    invoke("ingest", str(tmp_path), ok=True)
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT native_id, blocks FROM messages ORDER BY id")).all()
    assert [native for native, _ in rows] == [f"s-a-{n}" for n in (1, 2, 3, 4)] + [
        f"s-b-{n}" for n in (1, 2, 3)
    ]
    for native, blocks in rows:
        blocks = json.loads(blocks) if isinstance(blocks, str) else blocks
        (found,) = hits("only" + native[2:].replace("-", ""))
        assert found["snippet"] == searchable(blocks) != "", native
    assert [h["thread"] for h in hits("word3")] == ["s-b", "s-a"]
    assert [h["snippet"] for h in hits("word4")] == ["s-a word4 onlya4"]


def _index_rows(conn) -> list[tuple]:
    """Every (word, message id, place) SQLite's full-text index holds."""
    conn.exec_driver_sql(
        "CREATE VIRTUAL TABLE IF NOT EXISTS temp.held USING fts5vocab(main, search_fts, instance)"
    )
    rows = conn.exec_driver_sql("SELECT term, doc, offset FROM temp.held ORDER BY 1, 2, 3").all()
    conn.exec_driver_sql("DROP TABLE temp.held")
    return [tuple(r) for r in rows]


def _index_made_again(conn) -> list[tuple]:
    """What the index would hold were it made now from the messages stored."""
    from auditor.store.search import searchable

    stored = conn.exec_driver_sql("SELECT id, blocks FROM messages").all()
    conn.exec_driver_sql("CREATE VIRTUAL TABLE temp.fresh USING fts5(body, content='')")
    conn.exec_driver_sql(
        "INSERT INTO temp.fresh (rowid, body) VALUES (?, ?)",
        [(i, searchable(json.loads(b))) for i, b in stored],
    )
    conn.exec_driver_sql("CREATE VIRTUAL TABLE temp.held USING fts5vocab(temp, fresh, instance)")
    rows = conn.exec_driver_sql("SELECT term, doc, offset FROM temp.held ORDER BY 1, 2, 3").all()
    conn.exec_driver_sql("DROP TABLE temp.held")
    conn.exec_driver_sql("DROP TABLE temp.fresh")
    return [tuple(r) for r in rows]


@pytest.mark.sqlite_only
def test_rewritten_and_forgotten_messages_leave_the_index_as_if_never_there(tmp_path, engine):
    """SQLite's index keeps no text: a message's words are taken out with the text made again
    from its blocks. After a file is rewritten and a thread forgotten (text with a NUL byte,
    accents, an emoji and a word repeated), the index holds exactly what it would if made
    from the messages left, and their words only."""
    odd = "caf\u00e9 \u00fcber NUL\x00byte \U0001f389 party party"
    kept, gone = tmp_path / "kept.jsonl", tmp_path / "gone.jsonl"
    kept.write_text(
        line("s-kept", 1, "2026-11-02T09:30:00Z", "first draft of the ledger")
        + line("s-kept", 2, "2026-11-02T09:31:00Z", "ledger drafted")
    )
    gone.write_text(line("s-gone", 1, "2026-11-03T09:30:00Z", odd))
    invoke("ingest", str(tmp_path), ok=True)
    assert [h["thread"] for h in hits("party")] == ["s-gone"]
    assert [h["thread"] for h in hits("byte")] == ["s-gone"]
    # Rewritten in place (not grown): its old messages are deleted and read again.
    kept.write_text(line("s-kept", 1, "2026-11-02T09:30:00Z", "second version of the books"))
    invoke("ingest", str(tmp_path), ok=True)
    assert hits("ledger") == [] and [h["thread"] for h in hits("books")] == ["s-kept"]
    invoke("forget", "s-gone", ok=True)
    assert hits("party") == [] and hits("über") == []
    with engine.begin() as conn:
        held = _index_rows(conn)
        assert held == _index_made_again(conn)
        assert {word for word, *_ in held} == {"second", "version", "of", "the", "books"}
