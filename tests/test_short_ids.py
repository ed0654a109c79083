"""Short thread ids: the ones a table shows are the ones `auditor show` takes, and no two alike.

Codex names its rollouts with UUIDv7s, whose first 8 characters are a timestamp: two sessions
started in the same minute shared `019a2d7b`, `threads` printed it twice and `show 019a2d7b`
then refused it as ambiguous. A short id is now lengthened until it tells its thread apart.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from sqlalchemy import insert

from auditor.cli.main import cli
from auditor.errors import AmbiguousName
from auditor.store import schema as s
from auditor.store.threads import find_thread, short_ids

TWINS = (
    "019a2d7b-1f2a-7c3e-9a10-5b6c7d8e9f01",
    "019a2d7b-44d0-7e21-8b33-0a1b2c3d4e5f",
)
SESSION = "8fd119a6-9ab8-407b-810f-329cfb6153e0"
SUBAGENTS = (
    f"{SESSION}/agent-aside_question-ac9ee4804d56a951",
    f"{SESSION}/agent-aside_question-bd01e4804d56a951",
)
LONG = ("chatlog-demo-fix-the-name-config", "chatlog-demo-fix-the-other-config")


def add_threads(engine, *native_ids: str, agent: str = "codex") -> None:
    with engine.begin() as conn:
        conn.execute(insert(s.Thread), [{"agent": agent, "native_id": n} for n in native_ids])


def test_two_sessions_started_in_the_same_minute_get_ids_that_tell_them_apart(engine):
    add_threads(engine, *TWINS, SESSION, *SUBAGENTS, *LONG)
    shown = short_ids(engine, [*TWINS, SESSION, *SUBAGENTS, *LONG])
    assert shown[TWINS[0]] == "019a2d7b-1"
    assert shown[TWINS[1]] == "019a2d7b-4"
    assert shown[SESSION] == "8fd119a6"
    assert len(set(shown.values())) == 7
    for native_id, short in shown.items():  # each short id opens its own thread
        assert find_thread(engine, short).native_id == native_id


def test_the_threads_table_and_show_agree(engine):
    add_threads(engine, *TWINS)
    runner = CliRunner()
    table = runner.invoke(cli, ["threads"], env={"COLUMNS": "100"}).output
    assert "019a2d7b-1" in table and "019a2d7b-4" in table
    shown = runner.invoke(cli, ["show", "--no-pager", "019a2d7b-4"])
    assert shown.exit_code == 0, shown.output
    assert TWINS[1] in shown.output


def test_an_ambiguous_prefix_is_refused_naming_the_candidates(engine):
    add_threads(engine, *TWINS)
    with pytest.raises(AmbiguousName) as refused:
        find_thread(engine, "019a2d7b")
    assert str(refused.value) == (
        f"'019a2d7b' matches 2 threads: {TWINS[0]}, {TWINS[1]}. "
        "Give more of the id (`auditor threads` shows one that is unique)."
    )
