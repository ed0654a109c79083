"""Tables at the widths of a normal terminal, on the real corpus (issue 13 item 3).

Before: at 80 columns `threads` squeezed id, project, msgs and tokens to nothing; at 100
`report costs` folded numbers and dates (`$7.3` over `342`). Now every line fits, every value
that is a number, a date or an id is whole on its row, and --wide shows all columns in full.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from conftest import CORPUS

from auditor.cli.tables import short_thread_id
from auditor.ingest.ingester import ingest
from auditor.plugins import get_plugin_manager
from auditor.store.db import open_db


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Claude Code and Codex threads of the corpus, ingested once for the module."""
    if not CORPUS.is_dir():
        if os.environ.get("CI"):
            pytest.fail(f"CI must have the corpus at {CORPUS}, and it is missing")
        pytest.skip(f"the real-transcript corpus is not at {CORPUS}")
    db = tmp_path_factory.mktemp("widths") / "corpus.db"
    ingest(open_db(db), get_plugin_manager(), [CORPUS / "claude-code", CORPUS / "codex"])
    return db


def auditor(db, *args: str, columns: int | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    if columns:
        env["COLUMNS"] = str(columns)
    return subprocess.run(
        [sys.executable, "-m", "auditor", "--db", str(db), *args],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stdout


@pytest.mark.parametrize("width", [80, 100])
def test_threads_fit_and_keep_every_value_whole(store, width):
    rows = json.loads(auditor(store, "threads", "--json"))
    assert len(rows) > 60
    lines = auditor(store, "threads", columns=width).splitlines()
    assert max(len(line) for line in lines) <= width
    header = lines[0].split()
    assert header[:6] == ["id", "agent", "thread", "started", "msgs"] + header[5:6]
    assert "tokens" in header and "$" in header
    assert ("project" in header) == (width == 100)
    table, footer = lines[2:-2], lines[-2:]
    # The columns that did not fit are named; at 80 the cost stays, before title and project.
    left_out = "edits" if width == 100 else "edits, title, project"
    assert footer[0] == f"(left out for width: {left_out}; --wide shows all)"
    assert footer[-1] == f"{len(rows)} threads"
    by_id = {line.split()[0]: line for line in table}
    assert len(by_id) == len(rows)
    for r in rows:
        cells = by_id[str(r["id"])].split()
        assert cells[1] == r["agent"]
        assert cells[2] == r["short_id"]
        assert cells[3] == (r["started"] or "—")[:10]
        assert cells[4] == str(r["messages"])
        assert re.fullmatch(r"\d+(\.\d[kMG])?", cells[5])
        assert cells[6] == ("?" if r["agent_usd"] is None else f"{r['agent_usd']:.2f}")


def test_sub_agent_ids_keep_their_session_and_their_own_name(store):
    assert short_thread_id("8fd119a6-9ab8-407b-810f-329cfb6153e0") == "8fd119a6"
    assert (
        short_thread_id(
            "8fd119a6-9ab8-407b-810f-329cfb6153e0/agent-aside_question-ac9ee4804d56a951"
        )
        == "8fd119a6/aside_qu…d56a951"
    )
    assert short_thread_id("1fb5e404-604d-4a2b-baf1-3beb42a67371/agent-aa9b6813c05338fac") == (
        "1fb5e404/aa9b6813c053"
    )
    out = auditor(store, "threads", columns=80)
    assert "8fd119a6/aside_qu…d56a951" in out and "uestion-ac9ee4804d56a951" not in out


def test_every_short_id_in_the_table_is_unique_and_opens_its_thread(store):
    from auditor.store.threads import find_thread

    rows = json.loads(auditor(store, "threads", "--json"))
    shown = [r["short_id"] for r in rows]
    assert len(set(shown)) == len(shown)
    assert "019a2d7b" not in shown  # two Codex rollouts start with it: each shows more
    engine = open_db(store)
    for r in rows:
        assert find_thread(engine, r["short_id"]).id == r["id"]


def test_an_8_character_id_from_the_table_opens_the_thread(store):
    out = auditor(store, "show", "8fd119a6", columns=100)
    assert "8fd119a6-9ab8-407b-810f-329cfb6153e0" in out.splitlines()[1]


def test_wide_shows_every_column_and_the_full_ids(store):
    lines = auditor(store, "threads", "--wide", columns=80).splitlines()
    assert lines[0].split() == (
        "id agent thread id started msgs tools edits tokens $ title project model in out "
        "cache r/w".split()
    )
    assert any(
        "8fd119a6-9ab8-407b-810f-329cfb6153e0/agent-aside_question-ac9ee4804d56a951" in line
        for line in lines
    )
    assert max(len(line) for line in lines) > 80  # past the terminal, never folded
    # Laid out at one width (the rule under the header), no line padded past its last value.
    assert all(len(line) <= len(lines[1]) and line == line.rstrip() for line in lines[2:-1])


@pytest.mark.parametrize("width", [80, 100])
def test_report_costs_fits_without_folding_a_number_or_a_date(store, width):
    data = json.loads(auditor(store, "report", "costs", "--format", "json"))
    out = auditor(store, "report", "costs", columns=width)
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= width
    assert lines[0] == "costs by day"
    rows = [line.split() for line in lines if re.match(r"\d{4}-\d\d-\d\d ", line)]
    assert len(rows) == len([r for r in data["rows"] if r["day"]])
    for cells, r in zip(rows, [r for r in data["rows"] if r["day"]], strict=True):
        assert cells[0] == r["day"] and cells[1] == str(r["agent_calls"])
        assert f"${r['agent_usd']:,.4f}" in cells or f"${r['agent_usd']:,.2f}" in cells
    total = next(line for line in lines if line.startswith("total")).split()
    assert total[1] == str(data["total"]["agent_calls"])
    if width == 80:
        assert "(left out for width: cache write; --wide shows all)" in lines
    else:
        assert not any(line.startswith("(left out") for line in lines)


def test_report_costs_wide_has_every_column(store):
    lines = auditor(store, "report", "costs", "--by", "model", "--wide", columns=80).splitlines()
    heads = " ".join(lines[1:3])
    for word in ("invalid/err", "in/out", "credits", "write", "overhead"):
        assert word in heads
    assert "claude-sonnet-4-6" in "\n".join(lines)


def test_report_costs_by_model_keeps_the_models_apart_at_80_columns(store):
    """Three Claude Sonnet models all read `claude-sonnet-…` at 80 columns: a column goes first."""
    data = json.loads(auditor(store, "report", "costs", "--by", "model", "--format", "json"))
    lines = auditor(store, "report", "costs", "--by", "model", columns=80).splitlines()
    assert max(len(line) for line in lines) <= 80
    body = lines[lines.index(next(x for x in lines if x.startswith("─"))) + 1 :]
    names = [line.split()[0] for line in body[: len(data["rows"])]]
    assert len(set(names)) == len(names) == len(data["rows"])
    for name, row in zip(names, data["rows"], strict=True):
        model = row["model"] or "—"
        assert name == model or (name.endswith("…") and model.startswith(name[:-1]))
    assert any(line.startswith("(left out for width: cache read") for line in lines)


def test_observers_fit_the_terminal_and_say_what_to_do(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update(COLUMNS="60", AUDITOR_LOCAL_BASE_URL="http://127.0.0.1:1/v1")
    out = subprocess.run(
        [sys.executable, "-m", "auditor", "--db", str(tmp_path / "a.db"), "observers"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stdout
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 60
    rows = {line.split()[0]: line for line in lines if not line.startswith(" ")}
    assert rows["gemini"].endswith("not ready") and rows["claude"].endswith("not ready")
    said = " ".join(line.strip() for line in lines if line.startswith("    "))
    assert "set GEMINI_API_KEY (or pass --key)" in said
    assert "set ANTHROPIC_API_KEY (or pass --key)" in said
