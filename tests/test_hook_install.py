"""`auditor hook install`: the settings entry Claude Code (and Codex) accepts, merged, idempotent."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.live import CC_SESSION, copy_lines, run_cli

from auditor.live.fast_path import DELIVER
from auditor.live.install import _first_command

EXAMPLE = (
    Path(__file__).resolve().parent.parent.parent
    / "shared"
    / "reference"
    / "wire"
    / "claude_code_settings.hooks.example.json"
)


EVENTS = (
    "PostToolUse",
    "PostToolUseFailure",
    "UserPromptSubmit",
    "Stop",
    "SubagentStop",
    "SessionEnd",
)


def assert_claude_code_accepts(settings: dict, event: str = "Stop") -> dict:
    """The shape of ../shared/reference/observer-apis.md section 6.1 and docs/live-hooks.md:
    event -> groups -> handlers; auditor's groups have no matcher (every tool); a command
    handler has type, command and a timeout in seconds; Stop has a second, asyncRewake one.
    Return auditor's non-blocking handler of `event`."""
    for name in EVENTS:
        groups = settings["hooks"][name]
        assert isinstance(groups, list)
        ours = [h for g in groups for h in g["hooks"] if "hook claude-code" in h.get("command", "")]
        assert len(ours) == (2 if name == "Stop" else 1), (name, ours)
        for group in groups:
            if any(h in ours for h in group["hooks"]):
                assert "matcher" not in group and isinstance(group["hooks"], list)
        for handler in ours:
            rewake = _first_command(handler["command"])[-1] == "--rewake"
            assert set(handler) == {"type", "command", "timeout"} | (
                {"asyncRewake"} if rewake else set()
            )
            assert handler["type"] == "command" and isinstance(handler["timeout"], int)
            assert handler["timeout"] > 0 and handler.get("asyncRewake", True) is True
    if EXAMPLE.is_file():  # the same keys as the reference example
        example = json.loads(EXAMPLE.read_text())["hooks"]["Stop"][0]["hooks"][0]
        assert set(example) == {"type", "command", "timeout"}
    return next(
        h
        for g in settings["hooks"][event]
        for h in g["hooks"]
        if "hook claude-code" in h.get("command", "") and "--rewake" not in h["command"]
    )


def rewake_handler(settings: dict) -> dict:
    return next(
        h
        for g in settings["hooks"]["Stop"]
        for h in g["hooks"]
        if "--rewake" in _first_command(h["command"])
    )


def install(tmp_path, *args):
    return run_cli("hook", "install", "claude-code", "--dir", str(tmp_path / "proj"), *args)


def test_install_writes_the_project_settings(tmp_path):
    result = install(tmp_path)
    path = tmp_path / "proj" / ".claude" / "settings.json"
    assert result.returncode == 0 and result.stdout.startswith(f"installed in {path}: ")
    settings = json.loads(path.read_text())
    handler = assert_claude_code_accepts(settings)
    assert handler["timeout"] == 10  # the hook never waits
    assert _first_command(handler["command"])[-2:] == ["hook", "claude-code"]
    rewake = rewake_handler(settings)
    assert rewake["timeout"] == 45 and rewake["asyncRewake"] is True
    assert _first_command(rewake["command"])[-3:] == ["hook", "claude-code", "--rewake"]
    for event in EVENTS:
        assert assert_claude_code_accepts(settings, event)["command"] == handler["command"]
    assert oct(path.stat().st_mode & 0o777) == oct(0o666 & ~_umask())


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_installing_twice_changes_nothing(tmp_path):
    install(tmp_path)
    path = tmp_path / "proj" / ".claude" / "settings.json"
    before = path.read_bytes()
    again = install(tmp_path)
    assert again.returncode == 0 and again.stdout.startswith("already installed in")
    assert path.read_bytes() == before


def test_install_merges_and_never_clobbers(tmp_path):
    path = tmp_path / "proj" / ".claude" / "settings.json"
    path.parent.mkdir(parents=True)
    theirs = {
        "permissions": {"allow": ["Bash(npm test)"]},
        "hooks": {
            "Stop": [
                {"hooks": [{"type": "command", "command": "~/.claude/stop-hook-git-check.sh"}]}
            ],
            "PostToolUse": [
                {"matcher": "Edit|Write", "hooks": [{"type": "command", "command": "prettier -w"}]}
            ],
        },
    }
    path.write_text(json.dumps(theirs, indent=2))
    assert install(tmp_path, "--observer", "claude", "--deadline", "20").returncode == 0
    settings = json.loads(path.read_text())
    assert settings["permissions"] == theirs["permissions"]
    assert settings["hooks"]["PostToolUse"][0] == theirs["hooks"]["PostToolUse"][0]
    assert settings["hooks"]["Stop"][0] == theirs["hooks"]["Stop"][0]
    handler = assert_claude_code_accepts(settings)
    assert "--observer claude --deadline 20" in handler["command"]
    assert rewake_handler(settings)["timeout"] == 35
    # Installing with other options updates auditor's entries in place.
    assert install(tmp_path, "--observer", "gemini").returncode == 0
    settings = json.loads(path.read_text())
    handler = assert_claude_code_accepts(settings)
    assert "--observer gemini" in handler["command"] and len(settings["hooks"]["Stop"]) == 3
    assert "--observer gemini" in rewake_handler(settings)["command"]


def test_an_earlier_stop_only_install_is_upgraded_and_sync_goes_back(tmp_path):
    path = tmp_path / "proj" / ".claude" / "settings.json"
    path.parent.mkdir(parents=True)
    old = {"type": "command", "command": "/venv/bin/auditor hook claude-code", "timeout": 45}
    path.write_text(
        json.dumps({"hooks": {"Stop": [{"hooks": [old]}], "SubagentStop": [{"hooks": [old]}]}})
    )
    assert install(tmp_path).returncode == 0
    settings = json.loads(path.read_text())
    assert_claude_code_accepts(settings)
    assert len(settings["hooks"]["Stop"]) == 2  # the old entry updated in place, the rewake added
    assert install(tmp_path, "--sync").returncode == 0
    settings = json.loads(path.read_text())
    assert set(settings["hooks"]) == {"Stop", "SubagentStop"}
    for event in ("Stop", "SubagentStop"):
        [group] = settings["hooks"][event]
        [handler] = group["hooks"]
        assert _first_command(handler["command"])[-3:] == ["hook", "claude-code", "--sync"]
        assert handler["timeout"] == 45
    assert install(tmp_path).returncode == 0
    assert_claude_code_accepts(json.loads(path.read_text()))


def test_a_symlinked_settings_file_is_written_through(tmp_path):
    """Dotfile repos link settings.json: the link stays and the file it points to gets the hook."""
    real = tmp_path / "dotfiles" / "claude-settings.json"
    real.parent.mkdir()
    real.write_text(json.dumps({"permissions": {"allow": ["Bash(ls)"]}}))
    os.chmod(real, 0o600)
    path = tmp_path / "proj" / ".claude" / "settings.json"
    path.parent.mkdir(parents=True)
    path.symlink_to(os.path.relpath(real, path.parent))
    assert install(tmp_path).returncode == 0
    assert path.is_symlink() and path.resolve() == real
    settings = json.loads(real.read_text())
    assert settings["permissions"] == {"allow": ["Bash(ls)"]}
    assert_claude_code_accepts(settings)
    assert oct(real.stat().st_mode & 0o777) == oct(0o600)


def test_a_broken_settings_file_is_left_alone(tmp_path):
    path = tmp_path / "proj" / ".claude" / "settings.json"
    path.parent.mkdir(parents=True)
    path.write_text('{"hooks": {')
    result = install(tmp_path)
    assert result.returncode == 2
    assert (
        result.stderr.startswith(f"Error: {path} is not valid JSON (")
        and "nothing was changed" in result.stderr
    )
    assert path.read_text() == '{"hooks": {'


def test_user_and_local_scopes(tmp_path):
    home = Path(os.environ["HOME"])
    assert install(tmp_path, "--user").returncode == 0
    assert_claude_code_accepts(json.loads((home / ".claude" / "settings.json").read_text()))
    assert install(tmp_path, "--local").returncode == 0
    assert_claude_code_accepts(
        json.loads((tmp_path / "proj" / ".claude" / "settings.local.json").read_text())
    )


def test_codex_hooks_file(tmp_path):
    result = run_cli("hook", "install", "codex", "--dir", str(tmp_path / "proj"))
    assert result.returncode == 0
    settings = json.loads((tmp_path / "proj" / ".codex" / "hooks.json").read_text())
    assert set(settings["hooks"]) == {"PostToolUse", "UserPromptSubmit", "Stop"}
    for event, groups in settings["hooks"].items():
        [group] = groups
        [handler] = group["hooks"]
        argv = shlex.split(handler["command"])
        if event == "Stop":  # waits for the end-of-turn audit: Codex cannot be woken later
            assert argv[-3:] == ["hook", "codex", "--wait"] and handler["timeout"] == 45
        else:
            assert argv[-2:] == ["hook", "codex"] and handler["timeout"] == 10
        assert "asyncRewake" not in handler
    # Codex reads a project's .codex/ only once the project is trusted: the install says so.
    assert "codex exec --trust" in result.stdout
    # --no-wait: the Stop handler returns at once (corrections only at the next tool round).
    run_cli("hook", "install", "codex", "--dir", str(tmp_path / "proj"), "--no-wait")
    settings = json.loads((tmp_path / "proj" / ".codex" / "hooks.json").read_text())
    [[stop]] = [g["hooks"] for g in settings["hooks"]["Stop"]]
    assert shlex.split(stop["command"])[-2:] == ["hook", "codex"] and stop["timeout"] == 10


def test_gemini_cli_settings_with_timeouts_in_milliseconds(tmp_path):
    """Gemini CLI reads hooks from .gemini/settings.json, beside its other settings, and counts
    a handler's timeout in milliseconds."""
    settings_file = tmp_path / "proj" / ".gemini" / "settings.json"
    settings_file.parent.mkdir(parents=True)
    settings_file.write_text(json.dumps({"security": {"auth": {"selectedType": "gemini-api-key"}}}))
    result = run_cli("hook", "install", "gemini-cli", "--dir", str(tmp_path / "proj"))
    assert result.returncode == 0, result.stderr
    settings = json.loads(settings_file.read_text())
    assert settings["security"] == {"auth": {"selectedType": "gemini-api-key"}}
    handlers = {event: groups[0]["hooks"] for event, groups in settings["hooks"].items()}
    assert {
        e: [(shlex.split(h["command"])[-1], h["timeout"]) for h in hs] for e, hs in handlers.items()
    } == {
        "AfterTool": [("gemini-cli", 10000)],
        "BeforeAgent": [("gemini-cli", 10000)],
        "AfterAgent": [("--wait", 45000)],  # waits for the end-of-turn audit
        "SessionEnd": [("gemini-cli", 10000)],
    }
    again = run_cli("hook", "install", "gemini-cli", "--dir", str(tmp_path / "proj"))
    assert again.stdout.startswith("already installed in")
    sync = run_cli("hook", "install", "gemini-cli", "--sync", "--dir", str(tmp_path / "proj"))
    assert sync.returncode == 0
    after = json.loads(settings_file.read_text())["hooks"]
    assert list(after) == ["AfterAgent"] and after["AfterAgent"][0]["hooks"][0]["command"].endswith(
        "hook gemini-cli --sync"
    )
    local = run_cli("hook", "install", "gemini-cli", "--local", "--dir", str(tmp_path / "proj"))
    assert local.returncode != 0 and "gemini-cli has no local settings file" in local.stderr


def codex_state(home: Path) -> dict:
    import tomllib

    config = tomllib.loads((home / ".codex" / "config.toml").read_text())
    return {k: v["trusted_hash"] for k, v in config["hooks"]["state"].items()}


def test_codex_install_records_the_trust_codex_asks_for(tmp_path):
    """Codex runs a handler only when its hash is recorded under its key in the user's
    config.toml (tests/test_real_codex.py proves the real client runs them); reinstalling with
    other options changes the handlers, and the trust is recorded again."""
    from auditor.live.codex_trust import handler_hash

    home = Path(os.environ["HOME"])
    (home / ".codex").mkdir()
    (home / ".codex" / "config.toml").write_text('# my settings\nmodel = "gpt-5.5"\n')
    result = run_cli("hook", "install", "codex", "--user")
    assert "recorded your trust in auditor's 3 handlers" in result.stdout
    hooks_file = home / ".codex" / "hooks.json"

    def expected() -> dict:
        settings = json.loads(hooks_file.read_text())["hooks"]
        labels = {
            "PostToolUse": "post_tool_use",
            "UserPromptSubmit": "user_prompt_submit",
            "Stop": "stop",
        }
        return {
            f"{hooks_file}:{labels[event]}:0:0": handler_hash(
                event, groups[0], groups[0]["hooks"][0]
            )
            for event, groups in settings.items()
        }

    first = codex_state(home)
    assert first == expected()
    assert (
        (home / ".codex" / "config.toml").read_text().startswith('# my settings\nmodel = "gpt-5.5"')
    )
    assert "already recorded" in run_cli("hook", "install", "codex", "--user").stdout
    run_cli("hook", "install", "codex", "--user", "--deadline", "20")
    second = codex_state(home)
    assert second == expected() and second != first
    # The hash is Codex's: SHA-256 over the handler's normalized identity, sorted compact JSON.
    handler = {"type": "command", "command": "auditor hook codex", "timeout": 10}
    identity = '{"event_name":"post_tool_use","hooks":[{"async":false,"command":"auditor hook codex","timeout":10,"type":"command"}]}'
    import hashlib

    assert handler_hash("PostToolUse", {"hooks": [handler]}, handler) == (
        "sha256:" + hashlib.sha256(identity.encode()).hexdigest()
    )


def test_codex_install_without_trust_says_the_one_command_that_records_it(tmp_path):
    home = Path(os.environ["HOME"])
    result = run_cli("hook", "install", "codex", "--user", "--deadline", "20", "--no-trust")
    assert result.returncode == 0
    assert not (home / ".codex" / "config.toml").exists()
    line = result.stdout.splitlines()[-1]
    assert line.endswith("run: auditor hook install codex --user --deadline 20")
    assert "Codex skips the 3 handlers until you trust them" in line


def test_codex_user_hooks_follow_codex_home(tmp_path, monkeypatch):
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "codex-home"))
    result = run_cli("hook", "install", "codex", "--user")
    assert result.returncode == 0
    assert (tmp_path / "codex-home" / "hooks.json").is_file()
    assert str(tmp_path / "codex-home" / "config.toml") in result.stdout


@pytest.mark.corpus
def test_the_installed_command_runs_as_claude_code_would_run_it(tmp_path, corpus):
    """Run the command string from settings.json through a shell, with a Stop payload on stdin."""
    assert install(tmp_path).returncode == 0
    handler = assert_claude_code_accepts(
        json.loads((tmp_path / "proj" / ".claude" / "settings.json").read_text())
    )
    session = copy_lines(corpus / CC_SESSION, tmp_path / "s.jsonl")
    stdin = json.dumps(
        {
            "session_id": "1af7fc5e-8455-4414-9ccd-011d40f70b2a",
            "transcript_path": str(session),
            "hook_event_name": "Stop",
            "stop_hook_active": False,
        }
    )
    env = {
        **os.environ,
        "CLAUDE_PROJECT_DIR": str(tmp_path / "proj"),
        "AUDITOR_OBSERVER": "no-such-observer",
    }
    result = subprocess.run(
        ["/bin/sh", "-c", handler["command"]],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert (result.returncode, result.stdout) == (0, "")  # an unusable observer fails open


def test_print_shows_the_merged_file_without_writing(tmp_path):
    result = install(tmp_path, "--print")
    assert result.returncode == 0
    assert_claude_code_accepts(json.loads(result.stdout))
    assert not (tmp_path / "proj" / ".claude").exists()


def test_install_warns_when_the_observer_cannot_answer_inside_the_deadline(tmp_path):
    # No store yet: the backend's own figure (the embedded CPU model declares one).
    slow = install(tmp_path, "--observer", "embedded", "--deadline", "5")
    assert slow.returncode == 0 and slow.stdout.startswith("installed in ")
    assert "Warning: the embedded observer (gemma-3-270m-q4_k_m) takes " in slow.stderr
    assert "(the backend's own figure), longer than the hook's 5s deadline" in slow.stderr
    assert not (tmp_path / "auditor.db").exists()  # installing creates no store
    # Inside the deadline, or a backend with no figure: nothing to say about the deadline.
    assert (
        "takes about" not in install(tmp_path, "--observer", "embedded", "--deadline", "600").stderr
    )
    ready = run_cli(
        "hook",
        "install",
        "claude-code",
        "--dir",
        str(tmp_path / "proj"),
        "-o",
        "gemini",
        "--deadline",
        "1",
        env={"GEMINI_API_KEY": "AIza-TEST-dummy"},
    )
    assert "Warning" not in ready.stderr


@pytest.mark.slow
def test_install_judges_an_observer_by_its_answers_in_the_store(corpus, tmp_path):
    from helpers.wire import Reply, Stub, openai_response

    copy_lines(corpus / CC_SESSION, tmp_path / "t" / "s.jsonl")
    assert run_cli("ingest", "-q", str(tmp_path / "t")).returncode == 0
    stub = Stub(Reply(body=openai_response(json.dumps({"needsCorrection": False})), delay=0.6))
    try:
        local = ["--observer", "local", "--model", "slow", "--base-url", stub.url + "/v1"]
        every = ["--mode", "every-inference", "--min-tool-calls", "0", "--no-require-edit"]
        ran = run_cli("run", "-j", "4", *every, *local)  # 7 answers
    finally:
        stub.close()
    assert ran.returncode == 0, ran.stderr
    slow = install(tmp_path, "--observer", "local", "--model", "slow", "--deadline", "0.5")
    assert re.search(
        r"Warning: the local observer \(slow\) takes about \d+\.\ds to answer ", slow.stderr
    )
    assert "(90th percentile of its " in slow.stderr and "recorded in this store)" in slow.stderr
    assert "takes about" not in install(tmp_path, "--observer", "local", "--model", "slow").stderr


def test_install_warns_when_the_observer_is_not_ready(tmp_path):
    env = {"GEMINI_API_KEY": "", "GOOGLE_API_KEY": ""}
    result = run_cli(
        "hook", "install", "claude-code", "--dir", str(tmp_path / "proj"), "-o", "gemini", env=env
    )
    assert result.returncode == 0 and result.stdout.startswith("installed in ")
    assert "Warning: the hook's gemini observer cannot be used from here: " in result.stderr
    assert "set GEMINI_API_KEY" in result.stderr and "the agent's environment" in result.stderr


SECRET = "s3cr3t-pw"


def test_a_store_password_is_never_written_into_the_settings(tmp_path):
    path = tmp_path / "proj" / ".claude" / "settings.json"
    url = f"postgresql+psycopg://auditor:{SECRET}@db.example.internal:5432/audits"
    # Named on the command line: written without its password (libpq reads PGPASSWORD/.pgpass).
    given = run_cli("--db", url, "hook", "install", "claude-code", "--dir", str(tmp_path / "proj"))
    assert given.returncode == 0, given.stderr
    assert SECRET not in path.read_text() and SECRET not in given.stdout + given.stderr
    handler = assert_claude_code_accepts(json.loads(path.read_text()))
    argv = _first_command(handler["command"])
    assert (
        argv[argv.index("--db") + 1]
        == "postgresql+psycopg://auditor@db.example.internal:5432/audits"
    )
    assert "PGPASSWORD or ~/.pgpass" in given.stderr
    # Named by $AUDITOR_DB (the README's team setup): left to the agent's environment.
    path.unlink()
    from_env = run_cli(
        "hook", "install", "claude-code", "--dir", str(tmp_path / "proj"), env={"AUDITOR_DB": url}
    )
    assert from_env.returncode == 0, from_env.stderr
    assert SECRET not in path.read_text() and "--db" not in path.read_text()
    assert "$AUDITOR_DB names in the agent's environment" in from_env.stderr


def test_the_command_names_auditor_by_its_path_only_when_the_path_does_not_find_it(tmp_path):
    bin_dir = str(Path(sys.executable).parent)
    on_path = install_with_path(tmp_path, f"{bin_dir}:/usr/bin:/bin")
    assert _first_command(on_path)[0] == "auditor"
    off_path = install_with_path(tmp_path, "/usr/bin:/bin")
    assert _first_command(off_path)[0] == str(Path(bin_dir) / "auditor")


def install_with_path(tmp_path, path: str) -> str:
    settings = tmp_path / "proj" / ".claude" / "settings.json"
    settings.unlink(missing_ok=True)
    assert install_env(tmp_path, {"PATH": path}).returncode == 0
    return assert_claude_code_accepts(json.loads(settings.read_text()))["command"]


def install_env(tmp_path, env):
    return run_cli("hook", "install", "claude-code", "--dir", str(tmp_path / "proj"), env=env)


@pytest.mark.parametrize(
    ("status", "fast", "rewake"),
    [
        (0, 0, 0),  # nothing to say
        (DELIVER, 1, 2),  # the rewake handler delivers: Claude Code wakes on 2
        (2, 1, 1),  # Python cannot open a script, click's usage error: never 2
        (1, 1, 1),  # a Python error at start
        (127, 1, 1),  # the executable is gone, or a venv's interpreter
    ],
)
def test_the_installed_commands_exit_2_only_when_auditor_delivers(tmp_path, status, fast, rewake):
    """Claude Code wakes Claude on a Stop hook's status 2 (and erases a prompt on a
    UserPromptSubmit's): run the installed command strings through a shell, as it does, with an
    `auditor` that exits with `status`."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "auditor"
    fake.write_text(f"#!/bin/sh\ncat >/dev/null\necho 'auditor says' >&2\nexit {status}\n")
    fake.chmod(0o755)
    venv_bin = str(Path(sys.executable).parent)
    assert install_env(tmp_path, {"PATH": f"{venv_bin}:/usr/bin:/bin"}).returncode == 0
    settings = json.loads((tmp_path / "proj" / ".claude" / "settings.json").read_text())
    commands = {
        "fast": assert_claude_code_accepts(settings)["command"],
        "rewake": rewake_handler(settings)["command"],
    }
    for name, want in (("fast", fast), ("rewake", rewake)):
        ran = subprocess.run(
            ["/bin/sh", "-c", commands[name]],
            input="{}",
            capture_output=True,
            text=True,
            env={"PATH": f"{bin_dir}:/usr/bin:/bin"},
            timeout=10,
            check=False,
        )
        assert ran.returncode == want, (name, status, commands[name], ran.stderr)
        assert ran.stderr == "auditor says\n"  # what Claude Code shows (or wakes Claude with)
