"""Small things that cost trust (issue 13 item 5): a usable `db path`, unknown agents named,
an empty store that says what to do, events in the order --help gives, a clean notice."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import click
from helpers.audit import FakeObserver, FakeObserverPlugin, ScriptPlugin, write_script_thread
from helpers.cli import invoke

from auditor.audit.run import run
from auditor.audit.run_types import RunConfig, choose_observer
from auditor.cli.main import cli
from auditor.ingest.ingester import ingest
from auditor.plugins import get_plugin_manager
from auditor.store.threads import EMPTY_STORE_HINT

HINT = (
    "The store has no threads yet: run `auditor ingest ~/.claude/projects ~/.codex/sessions` "
    "(or any folder of transcripts) first.\n"
)


def test_db_path_is_a_file_sqlite3_opens(tmp_path):
    db = tmp_path / "store.db"
    assert invoke("--db", str(db), "threads").exit_code == 0  # creates and migrates it
    path = invoke("--db", str(db), "db", "path").stdout.strip()
    assert path == str(db)
    # what the issue tried: sqlite3 "$(auditor db path)"
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        assert conn.execute("SELECT count(*) FROM threads").fetchone() == (0,)
    assert invoke("--db", str(db), "db", "path", "--url").stdout.strip() == f"sqlite:///{db}"


def test_db_path_of_a_server_store_is_its_url_without_the_password():
    url = "postgresql+psycopg://me:s3cret@db.example/auditor"
    out = invoke("--db", url, "db", "path").stdout.strip()
    assert out == "postgresql+psycopg://me:***@db.example/auditor"


def test_db_path_through_the_shell(tmp_path):
    """The real command line, as a user types it: the output is a path with no URL scheme."""
    db = tmp_path / "shell.db"
    out = subprocess.run(
        [sys.executable, "-m", "auditor", "--db", str(db), "db", "path"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out == f"{db}\n"


def test_an_unknown_agent_is_an_error_listing_the_agents(engine):
    result = invoke("threads", "--agent", "claude")
    assert result.exit_code == 2
    assert result.output == (
        "Error: 'claude' is not a known agent. "
        "Available: aider, amp, claude-code, codex, cursor, gemini-cli, inspect-ai, "
        "mini-swe-agent, openai, openhands, swe-agent\n"
    )


def test_a_known_agent_without_threads_is_an_empty_list_not_an_error(tmp_path):
    f = tmp_path / "t.jsonl"
    write_script_thread(f, "t-1", "Done.")
    engine_pm = get_plugin_manager(extra=[ScriptPlugin()])
    from auditor.store.db import open_db

    ingest(open_db(), engine_pm, [f])
    result = invoke("threads", "--agent", "codex", "--json")
    assert result.exit_code == 0 and json.loads(result.stdout) == []
    assert result.stderr == ""  # the store is not empty: no ingest hint


def test_an_agent_only_the_store_knows_is_accepted(tmp_path):
    """A plugin's format may be uninstalled since: its stored threads stay listable."""
    f = tmp_path / "t.jsonl"
    write_script_thread(f, "t-1", "Done.")
    from auditor.store.db import open_db

    ingest(open_db(), get_plugin_manager(extra=[ScriptPlugin()]), [f])
    agent = json.loads(invoke("threads", "--json").stdout)[0]["agent"]
    assert agent not in {"amp", "claude-code", "codex", "gemini-cli", "openai"}
    assert [
        r["native_id"] for r in json.loads(invoke("threads", "--agent", agent, "--json").stdout)
    ] == ["t-1"]


def test_an_empty_store_says_to_ingest(engine):
    assert EMPTY_STORE_HINT + "\n" == HINT
    threads = invoke("threads")
    assert threads.exit_code == 0 and threads.stderr == HINT
    assert invoke("threads", "--json").stderr == HINT
    dry = invoke("run", "--dry-run")
    assert dry.exit_code == 0 and dry.stderr.endswith(HINT)
    show = invoke("show", "abc")
    assert show.exit_code == 2
    assert show.output == "Error: 'abc' is not a known thread: " + HINT


def test_events_print_newest_first_as_help_says(engine, tmp_path):
    fake = FakeObserver()
    pm = get_plugin_manager(extra=[ScriptPlugin(), FakeObserverPlugin(fake)])
    f = tmp_path / "t.jsonl"
    write_script_thread(f, "t-claims", "Done! all tests pass.")
    ingest(engine, pm, [f])
    run(engine, pm, RunConfig(observer="fake"), announce=lambda line: None)
    assert "newest first" in invoke("events", "--help").stdout
    lines = invoke("events", "--limit", "0").stdout.splitlines()
    ids = [json.loads(invoke("events", "--json", "--limit", "0").stdout)[i]["id"] for i in (0, -1)]
    assert ids[0] > ids[-1]  # JSON: newest first
    assert "run-finished" in lines[0] and "ingested" in lines[-1]  # and the text the same way


def test_the_default_observer_notice_has_no_nested_parentheses():
    name, why = choose_observer(get_plugin_manager(), None)
    assert name == "embedded"
    line = f"observer: {name} ({why}), model x"
    assert "(" not in why and ")" not in why
    assert line == (
        "observer: embedded (no API key is set; the offline embedded model's verdicts are for "
        "trying the pipeline), model x"
    )


def _commands_named_in_backticks() -> set[tuple[str, ...]]:
    """Every `auditor WORD [WORD]` the code, the plugins and README.md tell a user to type."""
    root = Path(__file__).resolve().parent.parent
    files = [
        root / "README.md",
        *(root / "auditor").rglob("*.py"),
        *(root / "plugins").rglob("*.py"),
    ]
    named = set()
    for f in files:
        for m in re.finditer(r"`auditor((?: [a-z][a-z-]*)+)", f.read_text(encoding="utf-8")):
            named.add(tuple(m.group(1).split()))
    return named


def test_every_command_a_message_or_the_readme_names_exists():
    """A hint naming a command that is not there (`auditor paths`, four times) -> none."""
    unknown = []
    for words in sorted(_commands_named_in_backticks()):
        command, known = cli, []
        for word in words:
            # get_command, not .commands: `hook AGENT` is made for each agent a format declares
            found = (
                command.get_command(click.Context(command), word)
                if isinstance(command, click.Group)
                else None
            )
            if found is None:
                break
            command, known = found, [*known, word]
        if not known or isinstance(command, click.Group) and len(words) > len(known):
            if not words[len(known)].isupper():  # a placeholder: `auditor hook AGENT`
                unknown.append(" ".join(words))
    assert unknown == []


def test_config_names_the_price_overrides_file(tmp_path, monkeypatch):
    """The hints for an unpriced model say `auditor config` shows where prices.json goes."""
    monkeypatch.setenv("AUDITOR_CONFIG", str(tmp_path / "none.toml"))
    monkeypatch.setenv("AUDITOR_PRICES", str(tmp_path / "prices.json"))
    out = invoke("config").stdout.splitlines()
    assert (
        out[-1]
        == f"price overrides: {tmp_path / 'prices.json'} (not found: genai-prices' table only)"
    )
    (tmp_path / "prices.json").write_text("{}")
    assert invoke("config").stdout.splitlines()[-1].endswith("prices.json (found)")
    data = json.loads(invoke("config", "--json").stdout)
    assert data["prices"] == {"path": str(tmp_path / "prices.json"), "exists": True}


def test_the_hook_help_describes_the_non_blocking_hooks_it_installs():
    """`hook install` sets PostToolUse, UserPromptSubmit and Stop; the help said Stop only."""
    group = " ".join(invoke("hook", "--help").stdout.split())
    assert "each time it is about to stop" not in group
    assert "after each tool round, when the user writes and when it stops" in group
    for agent in ("claude-code", "codex"):
        text = " ".join(invoke("hook", agent, "--help").stdout.split())
        assert "Stop hook: audit the turn that just ended" not in text
        assert "returns without waiting for the observer" in text
        assert "(PostToolUse)" in text and "(UserPromptSubmit)" in text and "With --sync" in text


def test_prompt_at_an_unknown_message_says_where_the_ids_are(engine, tmp_path):
    pm = get_plugin_manager(extra=[ScriptPlugin()])
    f = tmp_path / "t.jsonl"
    write_script_thread(f, "t-claims", "Done! all tests pass.")
    ingest(engine, pm, [f])
    result = invoke("prompt", "t-claims", "--at", "nosuch")
    assert result.exit_code == 2
    assert result.output == (
        "Error: 'nosuch' is not a message of thread t-claims: `auditor show t-claims` shows "
        "each message's id in brackets\n"
    )
