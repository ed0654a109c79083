"""The config file: where it is, what `auditor config` shows, defaults for the commands, errors."""

from __future__ import annotations

import json
import re
import tomllib

import pytest
from helpers.cli import invoke
from helpers.live import CC_SESSION, copy_lines, rows, run_cli

from auditor.config import EXAMPLE, config_path, load, validate
from auditor.store import schema as s
from auditor.store.db import open_db


@pytest.fixture
def config(tmp_path, monkeypatch):
    path = tmp_path / "auditor.toml"
    monkeypatch.setenv("AUDITOR_CONFIG", str(path))
    return path


def test_the_default_location_is_the_per_user_config_dir(tmp_path, monkeypatch):
    monkeypatch.delenv("AUDITOR_CONFIG", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert config_path() == tmp_path / "xdg" / "auditor" / "config.toml"
    monkeypatch.setenv("AUDITOR_CONFIG", str(tmp_path / "elsewhere.toml"))
    assert config_path() == tmp_path / "elsewhere.toml"


def test_a_missing_file_is_an_empty_config(config):
    result = invoke("config")
    assert result.exit_code == 0
    assert result.output.startswith(f"config file: {config} (from $AUDITOR_CONFIG; not found")


def test_config_shows_where_and_what(config):
    config.write_text(
        'sources = ["~/.claude/projects"]\n[observer]\nobserver = "claude"\n[hook]\ndeadline = 20\n'
    )
    result = invoke("config")
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert lines[0] == f"config file: {config} (from $AUDITOR_CONFIG; found)"
    assert lines[1].startswith("sources: ") and lines[1].endswith("/.claude/projects")
    assert "[observer] observer = 'claude'" in lines and "[hook] deadline = 20" in lines
    data = json.loads(invoke("config", "--json").output)
    assert data["exists"] and data["settings"]["hook"] == {"deadline": 20}
    assert data["defaults"]["hook"]["AGENT"] == {"observer": "claude", "deadline": 20}


def test_the_example_is_a_valid_config():
    data = tomllib.loads(EXAMPLE)
    validate(config_path(), data)
    assert invoke("config", "--example").output == EXAMPLE


def test_settings_become_the_defaults_of_the_commands_options(config):
    config.write_text(
        "[gate]\nmin_tool_calls = 9\nrequire_edit = false\n[hook]\ndeadline = 12\n[run]\nconcurrency = 7\n"
    )
    run_help = " ".join(invoke("run", "--help").output.split())
    assert "looks after every round). [default: 9]" in run_help
    assert re.search(r"--concurrency INTEGER [^\[]*\[default: 7\]", run_help)
    hook_help = " ".join(invoke("hook", "claude-code", "--help").output.split())
    assert "is recorded. [default: 12]" in hook_help
    gemini_help = " ".join(invoke("hook", "gemini-cli", "--help").output.split())
    assert "is recorded. [default: 12]" in gemini_help
    assert "every round). [default: 9]" in gemini_help
    # The session's worker, which the hooks start and which audits, reads them too.
    worker_help = " ".join(invoke("hook", "worker", "--help").output.split())
    assert "is recorded. [default: 12]" in worker_help
    assert "every round). [default: 9]" in worker_help
    assert load().default_map()["run"]["require_edit"] is False


@pytest.mark.corpus
def test_the_command_line_wins_over_the_file(config, corpus, tmp_path):
    session = copy_lines(corpus / CC_SESSION, tmp_path / "s.jsonl")
    assert invoke("ingest", "-q", str(session)).exit_code == 0
    config.write_text("[gate]\nmin_tool_calls = 1000\n")
    strict = run_cli("run", "--dry-run", "--json", "--observer", "embedded")
    assert json.loads(strict.stdout)["gated_in"] == 0
    loose = run_cli("run", "--dry-run", "--json", "--observer", "embedded", "--min-tool-calls", "1")
    assert json.loads(loose.stdout)["gated_in"] == 1


@pytest.mark.parametrize(
    "text, message",
    [
        ("[observer\n", "is not valid TOML"),
        (
            "[observr]\nobserver = 'x'\n",
            "'observr' is not a known setting. Valid: gate, hook, inject, injectors, observer, run, sources",
        ),
        (
            "[gate]\nmin_tools = 3\n",
            "'min_tools' is not a known key of [gate]. Valid: agents, include_sidechains, max_prompt_tokens, min_prompt_tokens, min_tool_calls, mode, projects, require_edit",
        ),
        (
            "[gate]\nmin_tool_calls = 'five'\n",
            "min_tool_calls in [gate] must be an integer, not 'five'",
        ),
        ("[hook]\ndeadline = true\n", "deadline in [hook] must be a number, not True"),
        ("sources = '~/x'\n", "sources in the top level must be a list, not '~/x'"),
        ("[injectors.webhook]\nurl = 5\n", "url in [injectors.webhook] must be a string, not 5"),
    ],
)
def test_a_bad_file_is_one_line_naming_the_problem(config, text, message):
    config.write_text(text)
    result = invoke("threads")
    assert result.exit_code == 2
    assert result.output.startswith(f"Error: {config}") and message in result.output
    assert len(result.output.splitlines()) == 1
    shown = invoke("config")
    assert shown.exit_code == 2 and message in shown.output


@pytest.mark.corpus
def test_a_bad_file_never_blocks_the_agent_and_is_recorded(config, corpus, tmp_path):
    config.write_text("[gate]\nmin_tools = 3\n")
    session = copy_lines(corpus / CC_SESSION, tmp_path / "s.jsonl")
    stdin = json.dumps(
        {
            "session_id": "1af7fc5e-8455-4414-9ccd-011d40f70b2a",
            "transcript_path": str(session),
            "hook_event_name": "Stop",
            "stop_hook_active": False,
        }
    )
    result = run_cli("hook", "claude-code", "--sync", stdin=stdin)
    assert (result.returncode, result.stdout) == (0, "")
    [run] = rows(open_db(tmp_path / "auditor.db"), s.Run)
    assert run.status == "failed" and "'min_tools' is not a known key of [gate]" in run.error
