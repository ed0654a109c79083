"""`auditor hook status`: the installs found, what keeps a hook from running, what hooks did.
(The real Codex session of tests/test_real_codex.py checks the corrections it reports.)"""

from __future__ import annotations

import json
import os
from pathlib import Path

from helpers.live import run_cli

KEY = {"GEMINI_API_KEY": "AIza-TEST-dummy"}


def status(*args: str, env: dict | None = None) -> tuple[int, dict]:
    done = run_cli("hook", "status", "--json", *args, env={**KEY, **(env or {})})
    return done.returncode, json.loads(done.stdout)


def test_nothing_installed_is_said_plainly(tmp_path):
    done = run_cli("hook", "status", "--dir", str(tmp_path))
    assert done.returncode == 0
    assert "not installed" in done.stdout


def test_codex_hooks_without_trust_will_not_run_and_status_says_what_to_do(tmp_path):
    run_cli("hook", "install", "codex", "--user", "-o", "gemini", "--no-trust")
    code, out = status("--dir", str(tmp_path))
    assert code == 1
    [install] = out["installs"]
    assert (install["agent"], install["scope"], install["runs"]) == ("codex", "user", False)
    assert install["events"] == {
        "PostToolUse": ["fast"],
        "UserPromptSubmit": ["fast"],
        "Stop": ["wait"],
    }
    [problem] = install["problems"]
    assert problem.startswith("Codex trusts 0 of auditor's 3 handlers")
    assert "auditor hook install codex --user" in problem

    run_cli("hook", "install", "codex", "--user", "-o", "gemini")
    code, out = status("--dir", str(tmp_path))
    assert code == 0 and out["installs"][0]["problems"] == []
    assert "Codex trusts all 3 handlers" in out["installs"][0]["notes"]
    assert "observer gemini ready" in out["installs"][0]["notes"]
    # Without the observer's key the hooks run but cannot audit: said too.
    code, out = status("--dir", str(tmp_path), env={"GEMINI_API_KEY": ""})
    assert code == 1 and "observer gemini not ready" in out["installs"][0]["problems"][0]


def test_a_changed_handler_and_a_missing_auditor_are_both_named(tmp_path):
    run_cli("hook", "install", "codex", "--user", "-o", "gemini")
    hooks = Path(os.environ["HOME"]) / ".codex" / "hooks.json"
    settings = json.loads(hooks.read_text())
    for groups in settings["hooks"].values():
        handler = groups[0]["hooks"][0]
        handler["command"] = handler["command"].replace(
            handler["command"].split()[0], str(tmp_path / "gone" / "auditor")
        )
    hooks.write_text(json.dumps(settings))
    code, out = status("--dir", str(tmp_path))
    assert code == 1
    problems = out["installs"][0]["problems"]
    assert any("is gone or not executable" in p for p in problems)
    assert any("(3 changed since reviewed)" in p for p in problems)


def test_a_project_codex_does_not_trust_is_named_and_claude_code_is_listed_too(tmp_path):
    project = tmp_path / "proj"
    project.mkdir()
    run_cli("hook", "install", "codex", "--dir", str(project), "-o", "gemini")
    run_cli("hook", "install", "claude-code", "--dir", str(project), "-o", "gemini")
    code, out = status("--dir", str(project))
    assert code == 1
    by_agent = {i["agent"]: i for i in out["installs"]}
    assert by_agent["claude-code"]["runs"] is True
    assert by_agent["claude-code"]["events"]["Stop"] == ["fast", "rewake"]
    assert any("trusted project" in p for p in by_agent["codex"]["problems"])
    (Path(os.environ["HOME"]) / ".codex" / "config.toml").open("a").write(
        f'\n[projects."{project}"]\ntrust_level = "trusted"\n'
    )
    code, out = status("--dir", str(project))
    assert code == 0, out["installs"]


def test_the_latest_events_of_a_session_are_listed(tmp_path):
    run_cli("hook", "install", "codex", "--user", "-o", "gemini")
    for name in ("UserPromptSubmit", "PostToolUse"):
        event = {
            "session_id": "01a21ac5-0000-7000-8000-000000000001",
            "hook_event_name": name,
            "transcript_path": str(tmp_path / "missing.jsonl"),
            "tool_name": "Bash",
        }
        assert run_cli("hook", "codex", "--idle", "1", stdin=json.dumps(event)).returncode == 0
    code, out = status("--dir", str(tmp_path))
    [session] = out["activity"]["codex"]["sessions"]
    assert session["session"] == "01a21ac5-0000-7000-8000-000000000001"
    assert [e["event"] for e in session["events"]] == ["UserPromptSubmit", "PostToolUse"]
    assert out["activity"]["codex"]["delivered"] == 0
    text = run_cli("hook", "status", "--dir", str(tmp_path), env=KEY).stdout
    assert "session 01a21ac5-0000-7000-8000-000000000001: UserPromptSubmit" in text
    assert "PostToolUse Bash" in text
