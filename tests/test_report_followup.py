"""`auditor report followup`: what the agent did after each course correction."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from helpers.reports import COUNTS_ONLY, ObserversPlugin, TwoFaced, UsagePlugin, write_thread

from auditor.audit.run import run
from auditor.audit.run_types import RunConfig
from auditor.cli.main import cli
from auditor.ingest.ingester import ingest
from auditor.plugins import get_plugin_manager
from auditor.reports import followup_report

pytestmark = pytest.mark.both_stores


def lines(thread: str, *items) -> list[dict]:
    """Messages after a thread's first turn: ("cc", text) | ("user", text) | ("say", text) |
    ("tool", name, is_edit, input) followed by its result."""
    out = []
    for i, item in enumerate(items):
        base = {
            "usage": 1,
            "thread": thread,
            "id": f"{thread}-x{i}",
            "ts": f"2026-03-02T13:{i:02d}:00Z",
            "cwd": "/w",
        }
        kind = item[0]
        if kind == "cc":
            out.append({**base, "role": "user", "source": "course-correction", "text": item[1]})
        elif kind == "user":
            out.append({**base, "role": "user", "text": item[1]})
        elif kind == "say":
            out.append({**base, "role": "assistant", "text": item[1], "model": "m"})
        else:
            out.append(
                {**base, "role": "assistant", "tools": [[item[1], item[2], item[3]]], "model": "m"}
            )
            out.append(
                {
                    **base,
                    "id": f"{thread}-x{i}r",
                    "role": "user",
                    "source": "tool-result",
                    "result": "ok",
                    "for": f"{thread}-x{i}-0",
                }
            )
    return out


@pytest.fixture
def store(engine, tmp_path):
    f = tmp_path / "t.jsonl"
    write_thread(f, "t-acted", "Done, all tests pass.", n_tools=6)
    extra = lines(
        "t-acted",
        ("cc", "The last run failed; look again."),
        ("tool", "Edit", True, {"file_path": "a.py"}),
        ("tool", "Bash", False, {"command": "python -m pytest -q tests/"}),
        ("say", "Fixed; the tests pass now."),
        ("user", "Thanks. Now update the README."),
        *[("tool", "Edit" if i == 0 else "Bash", i == 0, {"command": "ls"}) for i in range(5)],
        ("say", "README updated [again]."),
    )
    write_thread(f, "t-passed", "Done.", n_tools=6)
    extra += lines(
        "t-passed",
        ("cc", "Check the failing test."),
        ("tool", "Edit", True, {"file_path": "b.py"}),
        ("say", "Fixed."),
        ("user", "Good, go on with the next step."),
        *[("tool", "Edit" if i == 0 else "Bash", i == 0, {"command": "ls"}) for i in range(5)],
        ("say", "Next step done."),
    )
    write_thread(f, "t-ignored", "Done, all tests pass.", n_tools=6)
    extra += lines(
        "t-ignored",
        ("cc", "Did you run the tests?"),
        ("say", "Yes, they are fine."),
        ("user", "No, you didn't run them. Run them now."),
    )
    write_thread(f, "t-ended", "Done.", n_tools=1)
    extra += lines("t-ended", ("cc", "Check the failing test."))
    write_thread(f, "t-tests-only", "Done.", n_tools=1)
    extra += lines(
        "t-tests-only",
        ("cc", "Run the tests."),
        ("tool", "Bash", False, {"command": ["bash", "-lc", "cargo test"]}),
        ("say", "All green."),
        ("cc", "And the linter?"),
        ("say", "Fine too."),
    )
    with open(f, "a") as fh:
        fh.writelines(json.dumps(line) + "\n" for line in extra)
    pm = get_plugin_manager(
        extra=[UsagePlugin(), ObserversPlugin(TwoFaced("alpha", mark="[again]"))]
    )
    ingest(engine, pm, [f])
    run(engine, pm, RunConfig(observer="alpha", gate=COUNTS_ONLY), announce=lambda line: None)
    return engine


def test_what_followed_each_correction(store):
    rep = followup_report(store)
    got = {(r["thread_native_id"], r["correction_id"]): r for r in rep.rows}
    acted = got["t-acted", "t-acted-x0"]
    assert (acted["continued"], acted["edited_files"], acted["ran_tests"], acted["acted_on"]) == (
        True,
        True,
        True,
        True,
    )
    assert (
        acted["user_wrote_next"] and not acted["user_corrected"]
    )  # "Thanks. Now..." is a new task
    # the checkpoint right after a correction is not audited (loop guard); the next one was, and
    # the observer asked for another correction there
    assert acted["next_checkpoint"] == "corrected again"
    passed = got["t-passed", "t-passed-x0"]
    assert passed["next_checkpoint"] == "passed" and passed["acted_on"]
    ignored = got["t-ignored", "t-ignored-x0"]
    assert (
        ignored["continued"],
        ignored["edited_files"],
        ignored["ran_tests"],
        ignored["acted_on"],
    ) == (True, False, False, False)
    assert ignored["user_corrected"] and ignored["next_checkpoint"] is None
    ended = got["t-ended", "t-ended-x0"]
    assert not ended["continued"] and not ended["acted_on"]
    tests_only = got["t-tests-only", "t-tests-only-x0"]
    assert tests_only["ran_tests"] and not tests_only["edited_files"] and tests_only["acted_on"]
    linter = got["t-tests-only", "t-tests-only-x3"]  # the window ends at the next correction
    assert linter["continued"] and not linter["ran_tests"] and not linter["acted_on"]
    assert rep.extra == {"corrections": 6, "continued": 5, "acted_on": 3, "acted_on_share": 3 / 5}


def test_command_json_and_table(store):
    out = json.loads(CliRunner().invoke(cli, ["report", "followup", "--format", "json"]).stdout)
    assert out["acted_on_share"] == 0.6 and len(out["rows"]) == 6
    assert out["total"]["next_checkpoint"] == {"passed": 1, "corrected again": 1}
    table = CliRunner().invoke(cli, ["report", "followup"]).stdout
    assert "6 corrections; the agent went on after 5, and acted on 3 of those (60.0%)" in table
