"""The amp-thread injector on the real Amp thread of the corpus: the correction becomes a user
message with source course-correction, and a kill in the middle never breaks the file."""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import time

import pytest
from helpers.audit import FakeObserver, FakeObserverPlugin
from helpers.live import auditor_argv, rows, run_cli

from auditor.audit.run import run
from auditor.audit.run_types import RunConfig
from auditor.ingest.ingester import ingest
from auditor.plugins import get_plugin_manager
from auditor.store import schema as s

pytestmark = [pytest.mark.corpus, pytest.mark.both_stores]
AMP = "amp/letta-ai-trajectory/orb-thread-export.input.json"
ANY = {"min_tool_calls": 0, "require_edit": False}


def amp_thread(corpus, dest, pad_mb: int = 0):
    """The corpus thread, optionally grown with copies of its own tool rounds to `pad_mb` MB."""
    doc = json.loads((corpus / AMP).read_text())
    if pad_mb:
        call, result = doc["messages"][1], doc["messages"][2]
        final = doc["messages"][-1]
        body, n = doc["messages"][:-1], 0
        output = "x" * 65536
        for n in range(
            1, pad_mb * 1_000_000 // (len(output) + len(json.dumps([call, result]))) + 1
        ):
            c, r = copy.deepcopy(call), copy.deepcopy(result)
            c["messageId"], r["messageId"] = 100 + 2 * n, 101 + 2 * n
            for block in c["content"]:
                if block.get("type") == "tool_use":
                    block["id"] = f"tool-pad-{n}"
            for block in r["content"]:
                if block.get("type") == "tool_result":
                    block["toolUseID"] = f"tool-pad-{n}"
                    block["run"] = {"status": "done", "result": {"output": output, "exitCode": 0}}
            body += [c, r]
        final = copy.deepcopy(final)
        final["messageId"] = 100 + 2 * n + 2
        doc["messages"] = body + [final]
    dest.write_text(json.dumps(doc, indent=2))
    return dest


@pytest.fixture
def audited(engine, corpus, tmp_path, request):
    """An Amp thread in the store with one pending correction."""
    (tmp_path / "threads").mkdir()
    path = amp_thread(
        corpus, tmp_path / "threads" / "T-sanitized-orb-thread.json", getattr(request, "param", 0)
    )
    pm = get_plugin_manager(
        extra=[FakeObserverPlugin(FakeObserver(trigger="Inspect the workspace"))]
    )
    ingest(engine, pm, [path])
    summary = run(engine, pm, RunConfig(observer="fake", gate=ANY), announce=lambda line: None)
    assert summary.corrections == 1
    return path, pm


def test_the_correction_becomes_a_course_correction_user_message(engine, audited):
    path, pm = audited
    before = json.loads(path.read_text())
    result = run_cli("inject", "--injector", "amp-thread")
    assert result.returncode == 0, result.stderr
    after = json.loads(path.read_text())
    assert after["messages"][:-1] == before["messages"]
    added = after["messages"][-1]
    assert added["role"] == "user" and added["source"] == {"type": "course-correction"}
    assert added["content"] == [{"type": "text", "text": "the tests failed, look again"}]
    assert added["messageId"] == max(m["messageId"] for m in before["messages"]) + 1
    [row] = rows(engine, s.Injection)
    assert (row.status, row.target) == ("delivered", str(path))
    # Read again, the thread shows the message with that source, and its next stop is not audited.
    ingest(engine, pm, [path])
    last = rows(engine, s.Message)[-1]
    assert (last.role, last.source_type) == ("user", "course-correction")
    assert run_cli("inject", "--injector", "amp-thread").stdout == ""


def test_a_symlinked_thread_file_gets_the_correction_in_its_target(engine, corpus, tmp_path):
    """Dotfile repos link thread files: the link stays a link and the real file gets the message."""
    (tmp_path / "dotfiles").mkdir()
    (tmp_path / "threads").mkdir()
    real = amp_thread(corpus, tmp_path / "dotfiles" / "T-sanitized-orb-thread.json")
    link = tmp_path / "threads" / real.name
    link.symlink_to(real)
    pm = get_plugin_manager(
        extra=[FakeObserverPlugin(FakeObserver(trigger="Inspect the workspace"))]
    )
    ingest(engine, pm, [link.parent])  # a directory walk keeps the link's path
    run(engine, pm, RunConfig(observer="fake", gate=ANY), announce=lambda line: None)
    result = run_cli("inject", "--injector", "amp-thread")
    assert result.returncode == 0, result.stderr
    assert link.is_symlink() and link.resolve() == real
    added = json.loads(real.read_text())["messages"][-1]
    assert added["source"] == {"type": "course-correction"}
    assert not list(tmp_path.glob("*/*.auditor-tmp"))


def test_another_agents_thread_is_refused(engine, pm_script_thread):
    result = run_cli("inject", "--injector", "amp-thread")
    assert result.returncode == 1
    assert "is a script thread, not an Amp one" in result.stderr


@pytest.fixture
def pm_script_thread(engine, tmp_path):
    from helpers.audit import ScriptPlugin, write_script_thread

    pm = get_plugin_manager(extra=[ScriptPlugin(), FakeObserverPlugin(FakeObserver())])
    f = tmp_path / "t.jsonl"
    write_script_thread(f, "t-claims", "Done! all tests pass.")
    ingest(engine, pm, [f])
    run(engine, pm, RunConfig(observer="fake"), announce=lambda line: None)
    return pm


@pytest.mark.parametrize("audited", [40], indirect=True)
def test_a_kill_in_the_middle_leaves_the_old_file_or_the_new_one(engine, audited):
    path, _ = audited
    old = path.read_bytes()
    old_messages = json.loads(old)["messages"]
    outcomes = []
    for delay in (0.0, 0.005, 0.02, 0.1):
        proc = subprocess.Popen(
            auditor_argv() + ["inject", "--injector", "amp-thread"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and proc.poll() is None:
            if any(p.name.endswith(".auditor-tmp") for p in path.parent.iterdir()):
                break  # the writer is at work: its temporary file exists
            time.sleep(0.0005)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        data = path.read_bytes()
        messages = json.loads(data)["messages"]  # never a broken file
        if data == old:
            outcomes.append("old")
        else:
            assert messages[:-1] == old_messages and messages[-1]["source"] == {
                "type": "course-correction"
            }
            outcomes.append("new")
            break
    assert "old" in outcomes, f"no kill landed before the rename: {outcomes}"
    # A later inject (the killed run's lease is released: its process is gone) completes it once.
    for leftover in path.parent.glob("*.auditor-tmp"):
        os.unlink(leftover)
    result = run_cli("inject", "--injector", "amp-thread")
    assert result.returncode == 0, result.stderr
    messages = json.loads(path.read_bytes())["messages"]
    assert [m.get("source") for m in messages].count({"type": "course-correction"}) == 1
