"""Each agent's threads are audited by an observer from another vendor: a plain `auditor run` over
Claude Code, Codex and Gemini CLI threads, with the SDK observers' keys (against stand-ins)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from helpers.audit import ScriptPlugin, write_script_thread
from helpers.wire import Reply, Stub, anthropic_response, gemini_response
from sqlalchemy import text

from auditor.audit.observer_choice import SameVendorOnly, choose
from auditor.ingest.ingester import ingest
from auditor.plugins import get_plugin_manager

AGENTS = {"claude-code": "anthropic", "codex": "openai", "gemini-cli": "google"}
OBSERVER_VENDOR = {"gemini": "google", "claude": "anthropic"}


def store_threads(engine, path, names: dict[str, str]) -> None:
    """Store script threads (`names`: thread -> agent) as if that agent had written them."""
    for name in names:
        write_script_thread(path, name, "Done! all tests pass.")
    ingest(engine, get_plugin_manager(extra=[ScriptPlugin()]), [path])
    with engine.begin() as conn:
        for name, agent in names.items():
            conn.execute(
                text("UPDATE threads SET agent = :a WHERE native_id = :n"), {"a": agent, "n": name}
            )


@pytest.fixture
def mixed(engine, tmp_path):
    """A store with two threads of each agent, each one a claim after a failed test."""
    names = {f"{agent}-{n}": agent for agent in AGENTS for n in range(2)}
    store_threads(engine, tmp_path / "mixed.jsonl", names)
    return engine


@pytest.fixture
def models():
    gemini = Stub(Reply(200, gemini_response()))
    claude = Stub(Reply(200, anthropic_response()))
    yield gemini, claude
    gemini.close()
    claude.close()


def auditor(db, *args, env):
    # The embedded model is left out: where it is installed (CI) it would be one more
    # observer ready, of Google's; the choice between API keys is what is shown here.
    env = {
        **{k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")},
        "AUDITOR_DISABLE_PLUGINS": "embedded",
        **env,
    }
    return subprocess.run(
        [sys.executable, "-m", "auditor", "--db", db, *args],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        timeout=300,
    )


def audited(engine) -> dict[tuple[str, str], int]:
    """Verdicts by (agent, observer)."""
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT t.agent, v.observer, v.same_vendor, count(*) FROM verdicts v "
                "JOIN threads t ON t.id = v.thread_id WHERE v.status = 'ok' "
                "GROUP BY t.agent, v.observer, v.same_vendor"
            )
        ).all()
    return {(r[0], r[1], bool(r[2])): r[3] for r in rows}


def keys(models, *which):
    gemini, claude = models
    env = {}
    if "gemini" in which:
        env.update(GEMINI_API_KEY="AIza-TEST-dummy", GOOGLE_GEMINI_BASE_URL=gemini.url)
    if "claude" in which:
        env.update(ANTHROPIC_API_KEY="sk-ant-TEST-dummy", ANTHROPIC_BASE_URL=claude.url)
    return env


def test_with_keys_for_two_vendors_no_agent_is_audited_by_its_own(mixed, models, tmp_path):
    db = str(mixed.url.database)
    out = auditor(db, "run", "--json", env=keys(models, "gemini", "claude"))
    assert out.returncode == 0, out.stderr
    assert audited(mixed) == {
        ("claude-code", "gemini", False): 2,
        ("codex", "gemini", False): 2,
        ("gemini-cli", "claude", False): 2,
    }
    assert "observer: gemini for claude-code, codex threads" in out.stderr
    assert "observer: claude for gemini-cli threads" in out.stderr
    summary = json.loads(out.stdout)
    assert summary["audited"] == 6 and summary["refused"] == {}
    assert len(summary["run_ids"]) == 2  # one recorded run per observer


def test_with_only_the_agents_own_vendor_ready_its_threads_are_refused_out_loud(
    mixed, models, tmp_path
):
    db = str(mixed.url.database)
    out = auditor(db, "run", "--json", env=keys(models, "claude"))
    assert out.returncode == 0, out.stderr
    said = (
        "claude-code threads not audited: the only observer ready, claude, runs Anthropic's "
        "model like the agent; make another vendor's ready (`auditor observers`) or pass "
        "--allow-same-vendor (or allow_same_vendor = true under [observer] in the config)."
    )
    assert said in out.stderr.splitlines()
    assert audited(mixed) == {("codex", "claude", False): 2, ("gemini-cli", "claude", False): 2}
    assert json.loads(out.stdout)["refused"] == {"claude-code": said}

    allowed = auditor(db, "run", "--allow-same-vendor", env=keys(models, "claude"))
    assert allowed.returncode == 0, allowed.stderr
    assert audited(mixed)[("claude-code", "claude", True)] == 2  # recorded on the verdicts


def test_every_agent_refused_audits_nothing_and_says_so(engine, models, tmp_path):
    store_threads(engine, tmp_path / "claude.jsonl", {"cc-0": "claude-code"})
    out = auditor(str(engine.url.database), "run", env=keys(models, "claude"))
    assert out.returncode == 1
    assert "claude-code threads not audited" in out.stderr
    assert audited(engine) == {} and models[1].log == []


def test_the_order_prefers_keys_then_logged_in_clis_then_the_offline_model(monkeypatch):
    # The embedded model (Google's Gemma) is ready wherever it is installed (CI): left out
    # here, so that only the keys decide; its own place in the order is tested below.
    monkeypatch.setenv("AUDITOR_DISABLE_PLUGINS", "embedded")
    pm = get_plugin_manager()
    for key in ("GEMINI_API_KEY", "GOOGLE_API_KEY", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-TEST-dummy")
    assert choose(pm, ["gemini-cli"]).observer == "claude"
    assert choose(pm, ["codex"]).observer == "claude"
    with pytest.raises(SameVendorOnly):
        choose(pm, ["claude-code"])
    same = choose(pm, ["claude-code"], allow_same_vendor=True)
    assert (same.observer, same.same_vendor) == ("claude", True)
    monkeypatch.setenv("GEMINI_API_KEY", "AIza-TEST-dummy")
    assert choose(pm, ["claude-code"]).observer == "gemini"
    assert choose(pm, ["amp"]).observer == "gemini"  # no vendor of its own: Google's first


def test_hook_install_names_the_observer_chosen_for_that_agent(models, tmp_path):
    db = str(tmp_path / "a.db")
    only_claude = auditor(
        db, "hook", "install", "claude-code", "--dir", str(tmp_path), "--print",
        env=keys(models, "claude"),
    )  # fmt: skip
    assert only_claude.returncode == 0, only_claude.stderr
    assert only_claude.stderr.startswith("Warning: claude-code threads not audited")
    codex = auditor(
        db, "hook", "install", "codex", "--dir", str(tmp_path), "--print",
        env=keys(models, "claude"),
    )  # fmt: skip
    assert "observer for codex: claude (ANTHROPIC_API_KEY is set" in codex.stderr
    allowed = auditor(
        db, "hook", "install", "claude-code", "--dir", str(tmp_path), "--print",
        "--allow-same-vendor", env=keys(models, "claude"),
    )  # fmt: skip
    assert "observer for claude-code: claude" in allowed.stderr
    assert "--allow-same-vendor" in allowed.stdout  # the hook chooses the same way


@pytest.mark.corpus
def test_a_claude_code_hook_with_only_anthropic_ready_records_why_it_audits_nothing(
    corpus, models, tmp_path
):
    from helpers.live import CC_SESSION, copy_lines, rows, run_cli

    from auditor.store import schema as s
    from auditor.store.db import open_db

    session = copy_lines(corpus / CC_SESSION, tmp_path / "projects" / "demo" / "s.jsonl")
    payload = {
        "session_id": "1af7fc5e-8455-4414-9ccd-011d40f70b2a",
        "transcript_path": str(session),
        "cwd": "/path/to/Demo",
        "hook_event_name": "Stop",
        "stop_hook_active": False,
    }
    env = {**keys(models, "claude"), "AUDITOR_DISABLE_PLUGINS": "embedded"}
    result = run_cli("hook", "claude-code", "--sync", stdin=json.dumps(payload), env=env)
    assert (result.returncode, result.stdout) == (0, "")  # the agent stops normally
    assert models[1].log == []  # Claude was not asked to judge Claude
    [run] = rows(open_db(), s.Run)
    assert run.status == "failed"
    assert "claude-code threads not audited: the only observer ready, claude," in run.error


def test_eval_takes_an_observer_of_another_vendor_than_every_labelled_thread(
    engine, models, tmp_path, monkeypatch
):
    from auditor.audit.evaluate import evaluate
    from auditor.audit.run_types import RunConfig

    store_threads(engine, tmp_path / "t.jsonl", {"cc-0": "claude-code", "cx-0": "codex"})
    labels = tmp_path / "labels.jsonl"
    labels.write_text(
        "".join(
            json.dumps({"thread": t, "at": f"{t}-end", "needs_correction": True}) + "\n"
            for t in ("cc-0", "cx-0")
        )
    )
    for key, value in keys(models, "gemini", "claude").items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AUDITOR_DISABLE_PLUGINS", "embedded")
    evaluate(engine, get_plugin_manager(), str(labels), RunConfig())
    gemini, claude = models
    assert len(gemini.log) == 2 and claude.log == []  # neither Anthropic's nor OpenAI's
    assert audited(engine) == {("claude-code", "gemini", False): 1, ("codex", "gemini", False): 1}


def test_every_format_of_these_agents_declares_the_vendor_of_its_model():
    formats = get_plugin_manager().formats().values()
    declared = {(f.agent, getattr(f, "vendor", None)) for f in formats if f.agent in AGENTS}
    assert declared == set(AGENTS.items())
