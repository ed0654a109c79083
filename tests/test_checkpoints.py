"""Finding checkpoints in a thread, and the built-in gate's decisions."""

from __future__ import annotations

from types import SimpleNamespace

from auditor_plugins.gate import decide
from helpers.audit import agent, numbered, result, user

from auditor.audit.checkpoints import END_TURN, INFERENCE, find_checkpoints, loop_guard

EDIT = ("Edit", True)
READ = ("Read", False)


def busy_turn(n_tools: int, edit: bool = True):
    out = []
    for i in range(n_tools):
        out += [agent(tools=[EDIT if (edit and i == 0) else READ]), result(f"r{i}")]
    return out


def test_an_end_of_turn_is_the_last_agent_message_before_the_user_writes_again():
    messages = numbered(
        [
            user("fix the bug"),
            *busy_turn(6),
            agent("Done, all tests pass."),
            user("thanks, now docs"),
            agent("ok"),
        ]
    )
    cps = find_checkpoints(1, messages)
    assert [(c.kind, c.index, c.tool_calls, c.file_edits, c.user_wrote_after) for c in cps] == [
        (END_TURN, 13, 6, 1, True),
        (END_TURN, 15, 0, 0, False),
    ]


def test_a_parser_that_does_not_say_who_wrote_a_message_still_has_turns():
    """One definition of "typed by a person" (issue 11 item 5): the checkpoint finder and the
    formatter (which now uses this one) disagreed on user messages whose `source_type` is unset."""
    from auditor.audit.checkpoints import is_typed_user

    unsaid = [user("fix the bug", source=None), *busy_turn(2), agent("Done.")]
    unsaid += [user("thanks", source=None), agent("ok")]
    messages = numbered(unsaid)
    assert is_typed_user(messages[0]) and not is_typed_user(result("r"))
    tool_result_unsaid = result("r")
    tool_result_unsaid.source_type = None
    assert not is_typed_user(tool_result_unsaid)
    cps = find_checkpoints(1, messages)
    assert [(c.index, c.tool_calls, c.user_wrote_after) for c in cps] == [
        (5, 2, True),
        (7, 0, False),
    ]


def test_a_turn_that_ends_waiting_on_a_tool_is_not_a_checkpoint():
    messages = numbered([user("go"), agent(tools=[READ])])
    assert find_checkpoints(1, messages) == []


def test_every_inference_mode_adds_the_moments_before_each_model_call():
    messages = numbered(
        [
            user("fix it"),
            agent(tools=[EDIT]),
            result(),
            agent(tools=[READ]),
            result(),
            agent("done"),
        ]
    )
    kinds = [(c.kind, c.index) for c in find_checkpoints(1, messages, "every-inference")]
    assert kinds == [(INFERENCE, 2), (INFERENCE, 4), (END_TURN, 5)]


def test_a_turn_started_by_a_correction_is_flagged():
    messages = numbered(
        [
            user("fix it"),
            *busy_turn(5),
            agent("done"),
            user("you skipped the tests", "course-correction"),
            *busy_turn(5),
            agent("done now"),
        ]
    )
    first, second = find_checkpoints(1, messages)
    assert not first.after_correction and second.after_correction


thread = SimpleNamespace(agent="claude-code", cwd="/home/me/proj", is_sidechain=False)


def test_gate_reasons():
    messages = numbered([user("fix the bug"), *busy_turn(6), agent("Done")])
    (cp,) = find_checkpoints(1, messages)
    assert decide(cp, thread, {}).reason == "passed"
    assert decide(cp, thread, {"min_tool_calls": 7}).reason == "too-few-tool-calls (6 < 7)"
    assert decide(cp, thread, {"agents": ["codex"]}).reason == "agent-not-allowed (claude-code)"
    assert decide(cp, thread, {"projects": ["/srv"]}).reason == "project-not-allowed"
    assert (
        decide(cp, SimpleNamespace(agent="claude-code", cwd="/x", is_sidechain=True), {}).reason
        == "sidechain"
    )
    no_edit = numbered([user("look around"), *busy_turn(6, edit=False), agent("Done")])
    (cp2,) = find_checkpoints(1, no_edit)
    assert decide(cp2, thread, {}).reason == "no-file-edit"
    assert decide(cp2, thread, {"require_edit": False}).audit


def test_the_loop_guard_holds_back_the_turn_right_after_a_correction():
    messages = numbered([user("fix it", "course-correction"), *busy_turn(6), agent("done")])
    (cp,) = find_checkpoints(1, messages)
    assert loop_guard(cp, {}).reason == "after-correction"
    assert decide(cp, thread, {}).audit  # the gate no longer decides it: the core does


def test_an_end_of_turn_the_user_answered_is_audited_in_every_mode():
    """Whether the user wrote again decides delivery (`auditor.live.delivery`), not the audit: a
    retrospective run in every-inference mode looks at the same ends of turns end-turn mode does."""
    messages = numbered([user("fix it"), *busy_turn(6), agent("done"), user("great")])
    cp = next(c for c in find_checkpoints(1, messages, "every-inference") if c.kind == END_TURN)
    assert cp.user_wrote_after
    assert loop_guard(cp, {"mode": "every-inference"}) is None
    assert loop_guard(cp, {"mode": "end-turn"}) is None


def test_every_inference_mode_looks_after_every_round_unless_the_user_keeps_the_busy_turn_policy():
    messages = numbered(
        [user("what is in README?"), agent(tools=[READ]), result(), agent("It says hi")]
    )
    first_round, end = find_checkpoints(1, messages, "every-inference")
    every = {"mode": "every-inference"}
    assert decide(first_round, thread, every).reason == "passed"
    assert decide(end, thread, every).reason == "passed"
    kept = {**every, "min_tool_calls": 5, "require_edit": True}
    assert decide(first_round, thread, kept).reason == "too-few-tool-calls (1 < 5)"
    # End-turn mode keeps its documented policy: five tool calls and an edit since the user wrote.
    (end_only,) = find_checkpoints(1, messages)
    assert decide(end_only, thread, {"mode": "end-turn"}).reason == "too-few-tool-calls (1 < 5)"
    assert decide(end_only, thread, {}).reason == "too-few-tool-calls (1 < 5)"


def test_on_the_corpus_every_inference_mode_audits_each_end_of_turn_end_turn_mode_audits(
    corpus, engine, plugins
):
    from sqlalchemy import select

    from auditor.audit.checkpoint_plan import CheckpointPlanner
    from auditor.ingest.ingester import ingest
    from auditor.store import schema as s
    from auditor.store.threads import load_messages

    ingest(engine, plugins, [corpus / "claude-code", corpus / "codex"])
    audited: dict[str, set] = {"end-turn": set(), "every-inference": set()}
    with engine.connect() as conn:
        for t in conn.execute(select(s.Thread)).all():
            messages = load_messages(engine, t.id)
            for mode, seen in audited.items():
                planner = CheckpointPlanner(plugins, gate={"mode": mode})
                for cp in find_checkpoints(t.id, messages, mode):
                    if cp.kind == END_TURN and planner.plan(conn, cp, t, messages).decision.audit:
                        seen.add((t.id, cp.message_id))
    assert len(audited["end-turn"]) > 40  # the corpus has enough audited ends of turns to tell
    assert audited["end-turn"] - audited["every-inference"] == set()


def test_a_run_says_which_gate_policy_holds_in_its_mode():
    from helpers.cli import invoke

    every = invoke("run", "--dry-run", "--mode", "every-inference", ok=True)
    assert "gate (every-inference): every checkpoint (keep the busy-turn policy: " in every.output
    kept = invoke(
        "run", "--dry-run", "--mode", "every-inference", "--min-tool-calls", "5", "--require-edit"
    )
    assert (
        "gate (every-inference): 5 tool calls and a file edit since the user wrote" in kept.output
    )
    default = invoke("run", "--dry-run", ok=True)
    assert "gate (end-turn): 5 tool calls and a file edit since the user wrote" in default.output


def test_checkpoint_at_a_message_is_the_checkpoint_the_whole_thread_has_there(
    corpus, engine, plugins
):
    # A live hook event names the message it is about, in the latest turn of a session that may
    # be long: `checkpoint_at` looks only at that turn, and must give what the thread's
    # checkpoints give, on every message, with the thread whole and as it grew.
    from sqlalchemy import select

    from auditor.audit.checkpoints import checkpoint_at
    from auditor.ingest.ingester import ingest
    from auditor.store import schema as s
    from auditor.store.threads import load_messages

    ingest(engine, plugins, [corpus / "claude-code/marot-spotter", corpus / "codex"])
    checked = rounds = 0
    with engine.connect() as conn:
        threads = conn.execute(select(s.Thread.id)).scalars().all()
    for tid in threads:
        messages = load_messages(engine, tid)
        for mode in (END_TURN, "every-inference"):
            for cp in find_checkpoints(tid, messages, mode):
                assert checkpoint_at(tid, messages, cp.message_id, mode) == cp
                checked += 1
                if cp.kind == INFERENCE:
                    # Named before the agent's next message, the round has the same facts.
                    grown = checkpoint_at(tid, messages[: cp.index + 1], cp.message_id, mode)
                    assert grown == cp
                    rounds += 1
    assert checked > 500 and rounds > 200


def test_a_stop_finds_the_end_of_turn_the_whole_thread_has_there(corpus, engine, plugins):
    # At a Stop the live path looks for the end of turn in the last turn only; on every prefix
    # of real threads it must be the thread's last end of turn, when nobody wrote after it.
    from sqlalchemy import select

    from auditor.ingest.ingester import ingest
    from auditor.live.lookup import end_of_turn
    from auditor.store import schema as s
    from auditor.store.threads import load_messages

    ingest(engine, plugins, [corpus / "claude-code/marot-spotter", corpus / "codex"])
    with engine.connect() as conn:
        threads = conn.execute(select(s.Thread.id)).scalars().all()
    found = 0
    for tid in threads:
        messages = load_messages(engine, tid)
        for k in range(len(messages) + 1):
            upto = messages[:k]
            cps = find_checkpoints(tid, upto, END_TURN)
            final = max((i for i, m in enumerate(upto) if m.role == "assistant"), default=-1)
            last = cps[-1] if cps else None
            if last is not None and last.index == final and not last.user_wrote_after:
                assert end_of_turn(tid, upto) == last
                found += 1
            else:
                assert end_of_turn(tid, upto) is None
    assert found > 100
