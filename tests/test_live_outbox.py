"""The outbox injector: how the session's worker stages a correction for the next hook event.

The worker hands each correction to the `outbox` injector through the same `deliver` as
`auditor inject`: the core's loop guards first, then the outbox's own (the user typed while
the observer thought; one correction waits at a time). Staging records nothing; the hook that
hands the correction over does (`claim`, then the worker's `fold`).
"""

from __future__ import annotations

import json
import os

import pytest
from helpers.audit import FakeObserver, FakeObserverPlugin, ScriptPlugin, quiet, write_script_thread
from helpers.live import rows

from auditor.audit.run import run
from auditor.audit.run_types import RunConfig
from auditor.errors import AuditorError
from auditor.ingest.ingester import ingest
from auditor.live import delivery as inj
from auditor.live.fast_path import EVENTS, SessionSpool, claim
from auditor.plugins import get_plugin_manager
from auditor.store import schema as s
from auditor.store.threads import load_messages


@pytest.fixture
def pm():
    return get_plugin_manager(extra=[ScriptPlugin(), FakeObserverPlugin(FakeObserver())])


@pytest.fixture
def correction(engine, pm, tmp_path):
    """A stored verdict asking for a correction, as the worker hands it to the outbox."""
    f = tmp_path / "threads.jsonl"
    write_script_thread(f, "t-claims", "Done! all tests pass.")
    ingest(engine, pm, [f])
    run(engine, pm, RunConfig(observer="fake"), announce=quiet)
    (c,) = inj.pending(engine)
    return c


def spool(tmp_path, *events):
    sdir = tmp_path / "spool"
    sdir.mkdir()
    with open(sdir / EVENTS, "w") as fh:
        for e in events:
            fh.write(json.dumps(e) + "\n")
    return SessionSpool(str(sdir))


def stage(engine, pm, c, box, since=0):
    messages = load_messages(engine, c.thread_id)
    return inj.deliver(engine, pm.injector("outbox"), c, messages, {"spool": box, "since": since})


def test_a_staged_correction_waits_in_the_outbox_and_the_next_event_hands_it_over(
    engine, pm, correction, tmp_path
):
    box = spool(tmp_path, {"hook_event_name": "PostToolUse"})
    d = stage(engine, pm, correction, box)
    assert d.status == inj.STAGED and os.path.basename(d.target) == (
        f"{correction.verdict_id:012d}.json"
    )
    assert rows(engine, s.Injection) == []  # the hand-over is what gets recorded
    entry = claim(box.path, "t-claims", "PostToolUse")
    assert entry["message"] == "the tests failed, look again"
    assert entry["verdict_id"] == correction.verdict_id and box.waiting() == []


def test_a_prompt_typed_while_the_observer_thought_holds_the_correction_back(
    engine, pm, correction, tmp_path
):
    box = spool(
        tmp_path,
        {"hook_event_name": "PostToolUse"},
        {"hook_event_name": "UserPromptSubmit", "typed": True},
    )
    d = stage(engine, pm, correction, box, since=1)
    assert (d.status, d.error) == (
        "skipped",
        "user-wrote-again: the user wrote while the observer thought",
    )
    assert box.waiting() == []
    [row] = rows(engine, s.Injection)
    assert (row.injector, row.status) == ("outbox", "skipped")


def test_a_prompt_the_client_wrote_itself_does_not_hold_it_back(engine, pm, correction, tmp_path):
    box = spool(tmp_path, {"hook_event_name": "UserPromptSubmit", "typed": False})
    assert stage(engine, pm, correction, box).status == inj.STAGED


def test_one_correction_waits_at_a_time(engine, pm, correction, tmp_path):
    box = spool(tmp_path, {"hook_event_name": "PostToolUse"})
    box.stage("000000000999.json", {"thread": "t-claims", "message": "an earlier one"})
    d = stage(engine, pm, correction, box)
    assert (d.status, d.error) == (
        "skipped",
        "one-per-gap: a correction is already waiting to go out",
    )
    assert [e["message"] for e in box.waiting()] == ["an earlier one"]


def test_the_outbox_stages_for_the_hooks_worker_only(engine, pm, correction):
    with pytest.raises(AuditorError, match="hooks' worker only"):
        pm.injector("outbox").deliver(correction, {})
