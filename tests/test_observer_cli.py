"""The CLI observers, driven as the real Claude Code, Codex and Gemini CLI against model servers
on 127.0.0.1: what each CLI sends, what auditor records, a hung CLI, a CLI not logged in."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from auditor_plugins.agent_cli import DECISION_SCHEMA
from helpers import anthropic_server as anthropic
from helpers import gemini_api_server as gemini
from helpers import openai_responses_server as responses
from helpers.agents import CLAUDE_CODE, CODEX, GEMINI_CLI, require
from helpers.audit import ScriptPlugin, quiet, write_script_thread
from sqlalchemy import select

from auditor.audit.prompt import load_prompt
from auditor.audit.recorder import price_of
from auditor.audit.run import run
from auditor.audit.run_types import RunConfig
from auditor.ingest.ingester import ingest
from auditor.plugins import get_plugin_manager
from auditor.store import schema as s

# A hung CLI's test looks for any process of that observer still alive on the machine: the
# module's tests run one by one in one process, so none of its own calls is running beside it.
pytestmark = pytest.mark.xdist_group("agent-cli-observers")


@pytest.fixture(autouse=True)
def unhurried_login_check(monkeypatch):
    """`claude auth status` starts all of Claude Code: on a loaded two-core machine that took
    more than the 20 s a login check gets. What these tests check is what the check says."""
    from auditor_plugins import agent_cli

    monkeypatch.setattr(agent_cli, "STATUS_TIMEOUT", 120.0)


@dataclass
class Answer:
    text: str  # the model's answer: a JSON decision, or anything else to test repairs
    usage: dict[str, int]  # the counts the server reports (see CASES)
    delay: float = 0.0  # held this long (the CLI's timeout comes first)


def decision(needs: bool, message: str | None = None) -> str:
    return json.dumps({"needsCorrection": needs, "message": message})


CORRECTION = "The last test run failed: 1 failed. Fix it before saying all tests pass."
TRIGGER = "Done! all tests pass."


def logged_in(agent, home: Path, monkeypatch) -> None:
    """Log the CLI in as a user of an API key would, in the private HOME, offline."""
    if agent is CLAUDE_CODE:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-key")
    elif agent is CODEX:
        subprocess.run(
            [str(agent.path), "login", "--with-api-key"],
            input=b"sk-test-key",
            capture_output=True,
            check=True,
            env={**os.environ, "HOME": str(home)},
        )
    else:
        (home / ".gemini").mkdir(parents=True, exist_ok=True)
        (home / ".gemini" / "settings.json").write_text(
            json.dumps({"security": {"auth": {"selectedType": "gemini-api-key"}}})
        )
        monkeypatch.setenv("GEMINI_API_KEY", "gemini-test-key")


class Model:
    """The model server a CLI calls (the shared scripted servers of each API), answering with
    `answers` in order (the last repeats); `bodies` are the model requests it received."""

    def __init__(self, name: str, answers: list[Answer]):
        self.name = name
        self.stop = threading.Event()  # ends a held answer when the test is over
        answers = answers + [answers[-1]] * 2  # a repair retry gets the last one again
        if name == "claude-cli":
            self.server = anthropic.AnthropicServer([self._claude(a) for a in answers])
            self.url = self.server.url
        elif name == "codex-cli":
            self.server = responses.ResponsesServer([self._codex(a) for a in answers])
            self.url = self.server.base_url
        else:
            self.server = gemini.GeminiApiServer([self._gemini(a) for a in answers])
            self.url = self.server.url

    def _claude(self, a: Answer) -> anthropic.Turn:
        """The answer as Claude Code's --json-schema gets it: a StructuredOutput tool call."""
        try:
            args = json.loads(a.text)
        except ValueError:
            args = None
        block = (
            anthropic.ToolUse("StructuredOutput", args)
            if isinstance(args, dict)
            else anthropic.Text(a.text)
        )
        return anthropic.Turn([block], anthropic.Usage(**a.usage), delay=a.delay)

    def _codex(self, a: Answer) -> responses.Turn:
        u = a.usage
        usage = responses.Usage(u["input"], u["cached"], u["output"], u["reasoning"])
        held = (lambda: not self.stop.wait(a.delay)) if a.delay else None
        return responses.Turn([responses.say(a.text)], usage, before=held)

    def _gemini(self, a: Answer) -> gemini.Turn:
        u = a.usage
        usage = gemini.Usage(u["prompt"], u["cached"], u["candidates"], u["thoughts"])
        held = (lambda: not self.stop.wait(a.delay)) if a.delay else None
        return gemini.Turn([gemini.say(a.text)], usage, before=held)

    @property
    def bodies(self) -> list[dict]:
        if self.name == "claude-cli":
            return [r.body for r in self.server.requests if r.turn is not None]
        return list(self.server.requests)

    def close(self) -> None:
        self.stop.set()
        self.server.close()


# agent, the usage the server reports, and the tokens auditor records from it (input with
# cached among it, output without thinking).
CASES = {
    "claude-cli": (
        CLAUDE_CODE,
        {"input_tokens": 1300, "cache_read_input_tokens": 200, "output_tokens": 30},
        (1500, 200, 30, 0),
    ),
    "codex-cli": (
        CODEX,
        {"input": 1500, "cached": 200, "output": 30, "reasoning": 10},
        (1500, 200, 20, 10),
    ),
    "gemini-cli": (
        GEMINI_CLI,
        {"prompt": 1500, "cached": 200, "candidates": 20, "thoughts": 10},
        (1500, 200, 20, 10),
    ),
}


@pytest.fixture
def store(engine, tmp_path):
    pm = get_plugin_manager(extra=[ScriptPlugin()])
    f = tmp_path / "threads.jsonl"
    write_script_thread(f, "t-claims", TRIGGER)
    ingest(engine, pm, [f])
    return engine, pm


def audit(store, name: str, url: str, timeout: float = 60.0, **config):
    engine, pm = store
    agent = CASES[name][0]
    options = {"command": str(agent.path), "base_url": url}
    summary = run(
        engine,
        pm,
        RunConfig(observer=name, observer_options=options, timeout=timeout, **config),
        announce=quiet,
    )
    with engine.connect() as conn:
        rows = conn.execute(select(s.Verdict.__table__).order_by(s.Verdict.id)).all()
    return summary, rows


def sent_text(name: str, body: dict) -> tuple[str, str]:
    """The system prompt and the user content of a CLI's model request, as sent."""
    if name == "claude-cli":
        system = "\n".join(b["text"] for b in body["system"])
        user = "\n".join(b.get("text", "") for b in body["messages"][-1]["content"])
    elif name == "codex-cli":
        parts = [
            c.get("text", "")
            for m in body["input"]
            for c in m.get("content", [])
            if m.get("role") in ("developer", "system")
        ]
        system = "\n".join(parts)
        user = "\n".join(
            c.get("text", "")
            for m in body["input"]
            if m.get("role") == "user"
            for c in m["content"]
        )
    else:
        system = "\n".join(p["text"] for p in body["systemInstruction"]["parts"])
        user = "\n".join(p.get("text", "") for c in body["contents"] for p in c["parts"])
    return system, user


@pytest.mark.parametrize("name", list(CASES))
def test_the_cli_gets_auditors_prompt_and_schema_and_its_answer_is_recorded(
    name, store, tmp_path, monkeypatch
):
    agent, usage, tokens = CASES[name]
    require(agent)
    server = Model(name, [Answer(decision(True, CORRECTION), usage)])
    try:
        logged_in(agent, tmp_path / "home", monkeypatch)
        started = time.monotonic()
        summary, rows = audit(store, name, server.url)
        took = time.monotonic() - started
    finally:
        server.close()
    assert summary.audited == 1 and summary.corrections == 1, summary.messages
    (v,) = rows
    assert (v.observer, v.status, v.needs_correction, v.message) == (name, "ok", True, CORRECTION)
    assert (v.input_tokens, v.cached_tokens, v.output_tokens, v.thinking_tokens) == tokens

    (body,) = server.bodies
    system, user = sent_text(name, body)
    assert load_prompt().text.strip() in system
    assert TRIGGER in user and "1 failed, 3 passed" in user
    if name == "claude-cli":  # the schema is the only tool's: Claude Code's StructuredOutput
        assert [t["input_schema"] for t in body["tools"]] == [DECISION_SCHEMA]
        reported = v.raw["answer"]["total_cost_usd"]
        assert v.cost_usd == pytest.approx(reported) and v.raw["cost"] == "reported by the CLI"
    elif name == "codex-cli":  # the schema is the answer's format; no shell, no file tools
        assert body["text"]["format"]["schema"] == DECISION_SCHEMA
        tools = {t.get("name") or t.get("type") for t in body.get("tools") or []}
        assert not tools & {"exec_command", "shell", "apply_patch", "write_stdin", "web_search"}
        assert v.raw["cost"] == "estimated"
        assert v.cost_usd == pytest.approx(price_of(v.model, _usage(v), name)[0])
    else:  # the schema is in the system prompt; not one tool is declared
        assert json.dumps(DECISION_SCHEMA) in system
        assert all(not t.get("functionDeclarations") for t in body.get("tools") or [])
        assert v.raw["cost"] == "estimated"
    print(f"{name}: verdict in {v.latency_ms} ms (the run {took:.1f} s)")


def _usage(v):
    from auditor.audit.observe import ObserverUsage

    return ObserverUsage(
        input=v.input_tokens,
        output=v.output_tokens,
        cached=v.cached_tokens,
        thinking=v.thinking_tokens,
    )


def _observer_processes(name: str) -> list[str]:
    """The live processes working in a directory of this observer's calls (the CLI and all its
    children start there)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cwd = os.readlink(proc / "cwd")
            state = (proc / "stat").read_text().split(") ", 1)[1][:1]
        except (OSError, IndexError):
            continue
        if f"/auditor-{name}-" in cwd and state != "Z":
            found.append(f"{proc.name}: {cwd}")
    return found


@pytest.mark.parametrize("name", list(CASES))
def test_a_hung_cli_is_killed_at_the_timeout_and_recorded(name, store, tmp_path, monkeypatch):
    agent, usage, _ = CASES[name]
    require(agent)
    server = Model(name, [Answer(decision(False), usage, delay=60)])
    try:
        logged_in(agent, tmp_path / "home", monkeypatch)
        summary, rows = audit(store, name, server.url, timeout=3)
    finally:
        server.close()
    (v,) = rows
    # The server holds its answer for 60 s: an "error" verdict is the timeout's, not the answer's.
    assert v.status == "error"
    assert v.problem.endswith("gave no answer within 3s; its process group was killed")
    assert _observer_processes(name) == []  # nothing of it left running


@pytest.mark.parametrize("name", list(CASES))
def test_a_cli_not_logged_in_says_so_in_one_line(name, monkeypatch):
    agent = CASES[name][0]
    require(agent)
    for key in ("ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY", "CODEX_API_KEY"):
        monkeypatch.delenv(key, raising=False)
    observer = get_plugin_manager().observer(name)
    problem = observer.check({"command": str(agent.path)})
    assert problem is not None and "\n" not in problem
    assert "not logged in" in problem


def test_an_answer_that_breaks_the_contract_is_asked_once_more(store, tmp_path, monkeypatch):
    require(CODEX)
    usage = CASES["codex-cli"][1]
    server = Model(
        "codex-cli",
        [Answer("The agent looks fine to me.", usage), Answer(decision(True, CORRECTION), usage)],
    )
    try:
        logged_in(CODEX, tmp_path / "home", monkeypatch)
        summary, rows = audit(store, "codex-cli", server.url)
    finally:
        server.close()
    (v,) = rows
    assert (v.status, v.needs_correction, v.message) == ("ok", True, CORRECTION)
    assert v.raw["repaired"] == "it held no JSON object with needsCorrection"
    assert v.input_tokens == 2 * 1500  # both calls are paid for
    _, retry = sent_text("codex-cli", server.bodies[1])
    assert "Your previous answer could not be used" in retry and TRIGGER in retry


def test_a_second_bad_answer_is_recorded_as_invalid(store, tmp_path, monkeypatch):
    require(CODEX)
    usage = CASES["codex-cli"][1]
    server = Model("codex-cli", [Answer('{"needsCorrection": "perhaps", "message": null}', usage)])
    try:
        logged_in(CODEX, tmp_path / "home", monkeypatch)
        summary, rows = audit(store, "codex-cli", server.url)
    finally:
        server.close()
    (v,) = rows
    assert v.status == "invalid" and v.problem == "needsCorrection is missing or not a boolean"
    assert len(server.bodies) == 2 and summary.invalid == 1


def test_observers_says_which_clis_are_installed_and_logged_in(tmp_path):
    for agent in (CLAUDE_CODE, CODEX, GEMINI_CLI):
        require(agent)
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update(
        AUDITOR_CLAUDE_CLI=str(CLAUDE_CODE.path),
        AUDITOR_CODEX_CLI=str(CODEX.path),
        AUDITOR_GEMINI_CLI=str(tmp_path / "no-such-gemini"),
    )
    out = subprocess.run(
        [sys.executable, "-m", "auditor", "--db", str(tmp_path / "a.db"), "observers", "--json"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    rows = {r["name"]: r for r in json.loads(out.stdout)}
    said = {
        n: (rows[n]["vendor"], rows[n]["ready"]) for n in ("claude-cli", "codex-cli", "gemini-cli")
    }
    assert said == {
        "claude-cli": ("anthropic", False),
        "codex-cli": ("openai", False),
        "gemini-cli": ("google", False),
    }
    assert rows["claude-cli"]["problem"].startswith("Claude Code is installed but not logged in")
    assert rows["codex-cli"]["problem"].startswith("Codex is installed but not logged in")
    assert rows["gemini-cli"]["problem"].startswith("The gemini-cli observer needs Gemini CLI")
