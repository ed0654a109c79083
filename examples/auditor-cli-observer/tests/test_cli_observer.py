"""The `cli` observer, against a fake command-line model tool (tests/fake_model.py)."""

from __future__ import annotations

import asyncio
import json
import shlex
import sys
from pathlib import Path

import auditor_cli_observer as plugin
import pytest

from auditor.api import ObserveRequest, validate

FAKE = Path(__file__).with_name("fake_model.py")
COMMAND = f"{shlex.quote(sys.executable)} {shlex.quote(str(FAKE))} --model {{model}}"


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("AUDITOR_DB", str(tmp_path / "auditor.db"))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv(plugin.COMMAND_ENV, COMMAND)
    monkeypatch.setenv("FAKE_MODEL_LOG", str(tmp_path / "calls.jsonl"))
    monkeypatch.delenv("AUDITOR_DISABLE_PLUGINS", raising=False)


def observe(user: str, **options):
    request = ObserveRequest(
        "You review agents.", user, options.get("model", "default"), timeout=10
    )
    return asyncio.run(plugin.CommandObserver().observe(request, options))


def test_it_is_registered_through_the_entry_point_hook():
    from auditor.api import get_plugin_manager

    pm = get_plugin_manager()
    if "cli" not in pm.observers():  # not installed: register the module as the entry point would
        pm = get_plugin_manager(extra=[plugin])
    assert isinstance(pm.observer("cli"), plugin.CommandObserver)


def test_check_says_what_to_set_and_what_is_missing(monkeypatch):
    obs = plugin.CommandObserver()
    assert obs.check({}) is None
    monkeypatch.delenv(plugin.COMMAND_ENV)
    assert "set AUDITOR_CLI_COMMAND" in obs.check({}) and "ollama run {model}" in obs.check({})
    assert "'no-such-llm-tool' (from AUDITOR_CLI_COMMAND) is not on PATH" in obs.check(
        {"command": "no-such-llm-tool -m x"}
    )


def test_the_prompt_goes_on_stdin_and_the_model_into_the_command(tmp_path):
    result = observe("The agent said: all tests pass.", model="llama3.2")
    (call,) = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    assert call["argv"] == ["--model", "llama3.2"]
    assert (
        call["prompt"].startswith("You review agents.")
        and "Answer with exactly one JSON object" in call["prompt"]
    )
    assert call["prompt"].rstrip().endswith("The agent said: all tests pass.")
    verdict = validate(result)
    assert (verdict.valid, verdict.needs_correction, verdict.message) == (
        True,
        True,
        "the tests still fail, look again",
    )
    assert (
        result.model == "llama3.2"
        and result.usage.input > 0
        and "estimated" in result.usage.details
    )


@pytest.mark.parametrize("mode", ["fenced", "bare"])
def test_json_is_found_fenced_or_bare(monkeypatch, mode):
    monkeypatch.setenv("FAKE_MODEL_MODE", mode)
    assert validate(observe("nothing wrong here")).needs_correction is False


def test_an_answer_without_json_is_invalid_not_silence(monkeypatch):
    monkeypatch.setenv("FAKE_MODEL_MODE", "prose")
    verdict = validate(observe("anything"))
    assert (verdict.valid, verdict.problem) == (
        False,
        "the model answered without calling course_correct",
    )


def test_a_failing_command_raises_with_its_stderr(monkeypatch):
    monkeypatch.setenv("FAKE_MODEL_MODE", "fail")
    with pytest.raises(RuntimeError, match="exited with status 3: model not found"):
        observe("anything")


def test_a_slow_command_is_killed_at_the_timeout(monkeypatch):
    monkeypatch.setenv("FAKE_MODEL_MODE", "slow")
    request = ObserveRequest("s", "u", "m", timeout=0.5)
    with pytest.raises(TimeoutError):
        asyncio.run(plugin.CommandObserver().observe(request, {}))


def test_find_answer_skips_other_json():
    text = 'config {"a": 1} then {"needsCorrection": true, "message": "stop"} and {"x": 2}'
    assert plugin.find_answer(text) == {"needsCorrection": True, "message": "stop"}
    assert plugin.find_answer("no json") is None


def test_an_audit_run_over_auditors_sample_transcripts():
    from importlib import resources

    from auditor.api import RunConfig, get_plugin_manager, ingest, open_db, run

    pm = get_plugin_manager()
    if "cli" not in pm.observers():
        pm = get_plugin_manager(extra=[plugin])
    engine = open_db()
    samples = resources.files("auditor_data") / "samples"
    ingest(engine, pm, [str(samples)])
    config = RunConfig(
        observer="cli", model="fake-model", gate={"min_tool_calls": 0, "require_edit": False}
    )
    summary = run(engine, pm, config, announce=lambda line: None)
    assert summary.audited >= 1 and summary.errors == 0 and summary.invalid == 0
