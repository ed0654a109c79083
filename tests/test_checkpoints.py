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


def test_the_loop_guard_skips_an_end_of_turn_the_user_already_answered_in_every_inference_mode():
    messages = numbered([user("fix it"), *busy_turn(6), agent("done"), user("great")])
    cp = next(c for c in find_checkpoints(1, messages, "every-inference") if c.kind == END_TURN)
    assert loop_guard(cp, {"mode": "every-inference"}).reason == "user-wrote-again"
    assert loop_guard(cp, {"mode": "end-turn"}) is None  # auditing history: every turn counts
