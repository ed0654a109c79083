"""The loop guards hold whatever gate is installed.

A gate plugin that wants every checkpoint audited is registered through the real
`gate_checkpoint` hook. It still never gets the turn right after a course correction; an end of
turn the user already answered is audited but its correction never sent; a Stop hook still never
blocks twice in a row; delivery still sends no text twice and no more than the cap between two
messages the user typed.
"""

from __future__ import annotations

import asyncio
import io
import json
import uuid
from dataclasses import dataclass

import pytest
from helpers.audit import ScriptPlugin, write_script_thread
from helpers.live import CC_SESSION, CORRECTION, copy_lines, last_record, rows
from helpers.wire import Reply, Stub, anthropic_response

from auditor.audit.checkpoints import GateDecision
from auditor.audit.observe import ObserveResult, ObserverUsage
from auditor.audit.run import run
from auditor.audit.run_types import RunConfig
from auditor.hookspecs import hookimpl
from auditor.ingest.ingester import ingest
from auditor.live import delivery as inject
from auditor.live.sync_hook import run_hook
from auditor.plugins import get_plugin_manager
from auditor.store import schema as s
from auditor.store.db import open_db

SESSION_ID = "1af7fc5e-8455-4414-9ccd-011d40f70b2a"


class AuditEverything:
    """A gate of one's own that says yes to every checkpoint."""

    seen: list

    def __init__(self) -> None:
        self.seen = []

    @hookimpl
    def gate_checkpoint(self, checkpoint, thread, messages, config, signals):
        self.seen.append(checkpoint.message_id)
        return GateDecision(True, "audit-everything")


# -- through the Claude Code Stop hook ------------------------------------------------------------
@pytest.fixture
def stub():
    server = Stub(Reply(200, anthropic_response({"needsCorrection": True, "message": CORRECTION})))
    yield server
    server.close()


def stop(stub, session, tmp_path, gate: AuditEverything, **payload):
    """Run the Claude Code Stop hook in this process, with `gate` installed; return its output."""
    data = {
        "session_id": SESSION_ID,
        "transcript_path": str(session),
        "hook_event_name": "Stop",
        "stop_hook_active": False,
        **payload,
    }
    config = RunConfig(
        observer="claude",
        concurrency=1,
        observer_options={"base_url": stub.url, "max_retries": 0, "api_key": "sk-ant-TEST-dummy"},
    )
    out = io.StringIO()
    outcome = run_hook(
        "claude-code",
        json.dumps(data),
        out,
        engine_factory=lambda wait_until=None: open_db(
            tmp_path / "auditor.db", wait_until=wait_until
        ),
        plugins_factory=lambda: get_plugin_manager(extra=[gate]),
        run_config=config,
    )
    return outcome, out.getvalue()


def answer_the_correction(session) -> str:
    """Append what Claude Code writes after a block: the hook's reason, then the agent's reply."""
    final = last_record(session)
    feedback_id, answer_id = str(uuid.uuid4()), str(uuid.uuid4())
    common = {
        k: final[k] for k in ("sessionId", "cwd", "version", "gitBranch", "userType", "isSidechain")
    }
    records = [
        {
            **common,
            "parentUuid": final["uuid"],
            "type": "user",
            "isMeta": True,
            "uuid": feedback_id,
            "timestamp": "2025-09-03T00:50:00.000Z",
            "message": {
                "role": "user",
                "content": "Stop hook feedback:\n[auditor hook claude-code]: "
                f"{inject.CORRECTION_MARKER} {CORRECTION}",
            },
        },
        {
            **common,
            "parentUuid": feedback_id,
            "type": "assistant",
            "uuid": answer_id,
            "timestamp": "2025-09-03T00:50:09.000Z",
            "message": {
                "id": "msg_after",
                "type": "message",
                "role": "assistant",
                "model": "claude-sonnet-4-20250514",
                "content": [
                    {
                        "type": "text",
                        "text": "Right, the Write was denied. Grant it and I will retry.",
                    }
                ],
                "stop_reason": "end_turn",
                "usage": {"input_tokens": 10, "output_tokens": 20},
            },
        },
    ]
    with open(session, "a") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in records)
    return answer_id


@pytest.mark.corpus
def test_a_gate_that_audits_everything_cannot_audit_right_after_a_correction(
    stub, corpus, tmp_path
):
    session = copy_lines(
        corpus / CC_SESSION, tmp_path / "projects" / "demo" / f"{SESSION_ID}.jsonl"
    )
    gate = AuditEverything()
    outcome, printed = stop(stub, session, tmp_path, gate)
    assert outcome.status == "blocked" and CORRECTION in printed
    assert len(stub.log) == 1 and len(gate.seen) == 1

    first_end = last_record(session)["uuid"]
    answer_id = answer_the_correction(session)
    # Another correction is ready: only the guards stand between it and the agent.
    stub.default = Reply(
        200, anthropic_response({"needsCorrection": True, "message": "also add a test"})
    )

    # Claude Code says it goes on because of a Stop hook: nothing is read, asked or printed.
    outcome, printed = stop(stub, session, tmp_path, gate, stop_hook_active=True)
    assert (outcome.status, printed) == ("skipped", "")
    # Without that flag the agent's answer to the correction is held back by the core before
    # the gate is asked: no observer call, nothing printed.
    outcome, printed = stop(stub, session, tmp_path, gate)
    assert (outcome.status, outcome.detail, printed) == ("silent", "gate: after-correction", "")
    assert len(stub.log) == 1 and answer_id not in gate.seen
    engine = open_db(tmp_path / "auditor.db")
    decided = {c.message_native_id: c.gate_reason for c in rows(engine, s.Checkpoint)}
    assert decided == {first_end: "audit-everything", answer_id: "after-correction"}
    assert [i.status for i in rows(engine, s.Injection)] == ["delivered"]


# -- through `auditor run` and `auditor inject` -------------------------------------------------
@dataclass
class Insistent:
    """An observer that asks for a correction at every checkpoint."""

    distinct: bool  # a new text each time, or always the same one
    name: str = "insistent"
    default_model: str = "insistent-1"
    calls: int = 0

    def check(self, options):
        return None

    async def observe(self, request, options):
        self.calls += 1
        message = f"fix the parser (call {self.calls})" if self.distinct else "fix the parser"
        usage = ObserverUsage(input=100, output=10, cached=0, thinking=0)
        return ObserveResult(
            "course_correct",
            {"needsCorrection": True, "message": message},
            usage,
            request.model,
            0.0,
            raw={},
        )


class Plugins:
    def __init__(self, observer):
        self.observer = observer

    @hookimpl
    def register_observers(self, register):
        register(self.observer)


@dataclass
class Memo:
    """An injector that keeps what it was given."""

    name: str = "memo"
    description: str = "keeps corrections in a list"
    live: bool = False

    def __post_init__(self):
        self.sent: list[str] = []

    def deliver(self, correction, options):
        self.sent.append(correction.message)
        return "memory"


def audit_every_inference(engine, tmp_path, observer) -> list[inject.Delivery]:
    """A task, six tool rounds and a claim, audited at every checkpoint, then delivered."""
    f = tmp_path / "thread.jsonl"
    write_script_thread(f, "t", "Done! all tests pass.")
    gate = AuditEverything()
    pm = get_plugin_manager(extra=[ScriptPlugin(), Plugins(observer), gate])
    ingest(engine, pm, [f])
    summary = run(
        engine,
        pm,
        RunConfig(observer="insistent", gate={"mode": "every-inference"}),
        announce=lambda line: None,
    )
    assert summary.audited == len(gate.seen) == 7  # six rounds of tool results and the end of turn
    return inject.inject_pending(engine, Memo())


@pytest.mark.parametrize(
    ("distinct", "expected"),
    [
        (True, ["delivered"] * 2 + ["skipped too-many-corrections"] * 5),
        (False, ["delivered"] + ["skipped duplicate"] * 6),
    ],
)
def test_delivery_caps_corrections_and_repeats_whatever_the_gate_let_through(
    engine, tmp_path, distinct, expected
):
    deliveries = audit_every_inference(engine, tmp_path, Insistent(distinct))
    assert [f"{d.status} {(d.error or '').split(':')[0]}".strip() for d in deliveries] == expected


def test_an_end_of_turn_the_user_answered_is_audited_in_every_inference_mode_and_not_delivered(
    engine, tmp_path
):
    f = tmp_path / "thread.jsonl"
    write_script_thread(f, "t", "Done! all tests pass.")
    answered = [
        {"id": "t-thanks", "role": "user", "text": "thanks, ship it"},
        {"id": "t-ok", "role": "assistant", "text": "Shipping."},
    ]
    with open(f, "a") as fh:
        fh.writelines(json.dumps({"script": 1, "thread": "t", **row}) + "\n" for row in answered)
    gate, observer = AuditEverything(), Insistent(distinct=True)
    pm = get_plugin_manager(extra=[ScriptPlugin(), Plugins(observer), gate])
    ingest(engine, pm, [f])
    run(
        engine,
        pm,
        RunConfig(observer="insistent", gate={"mode": "every-inference"}),
        announce=lambda line: None,
    )
    reasons = {c.message_native_id: c.gate_reason for c in rows(engine, s.Checkpoint)}
    assert reasons["t-end"] == reasons["t-ok"] == "audit-everything" and "t-end" in gate.seen
    # The user's "thanks" came after t-end: its correction is recorded, never sent.
    memo = Memo()
    by_checkpoint = {
        d.correction.checkpoint_message: d for d in inject.inject_pending(engine, memo)
    }
    held = by_checkpoint["t-end"]
    assert held.status == "skipped" and held.error.startswith("user-wrote-again")
    assert by_checkpoint["t-ok"].status == "delivered"


def test_a_deadline_passing_after_the_verdict_is_stored_adds_no_error_verdict(
    stub, corpus, tmp_path, monkeypatch
):
    """The hook's deadline can pass between the observer's verdict being stored and the hook
    noting the call done: the failure is recorded on the run, and the paid verdict stays the
    checkpoint's only one (no second, error verdict for a call that was answered)."""
    from auditor.audit.observer_audit import CheckpointNow
    from auditor.live import sync_hook

    session = copy_lines(
        corpus / CC_SESSION, tmp_path / "projects" / "demo" / f"{SESSION_ID}.jsonl"
    )
    real_run = asyncio.run

    def answered_then_late(coro, **kw):
        if getattr(coro, "cr_code", None) is not CheckpointNow.audit.__code__:
            return real_run(coro, **kw)
        real_run(coro, **kw)
        raise sync_hook.DeadlinePassed("deadline exceeded: the hook ran past 30s")

    monkeypatch.setattr(asyncio, "run", answered_then_late)
    outcome, printed = stop(stub, session, tmp_path, AuditEverything())
    assert (outcome.status, printed) == ("failed", "")
    verdicts = rows(open_db(tmp_path / "auditor.db"), s.Verdict)
    assert [(v.status, v.message) for v in verdicts] == [("ok", CORRECTION)]
    [run_row] = rows(open_db(tmp_path / "auditor.db"), s.Run)
    assert run_row.status == "failed" and "deadline exceeded" in run_row.error
