"""Checkpoints: the moments of a thread where an observer could step in, and gate decisions."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..model import SOURCE_COURSE_CORRECTION, SOURCE_TOOL_RESULT, SOURCE_TYPED

# The two kinds of checkpoint: see docs/design.md, "When the observer steps in".
END_TURN = "end-turn"  # the agent ended its turn
INFERENCE = "inference"  # a round of tool results came back, before the next model call
MODES = {"end-turn": END_TURN, "every-inference": "every-inference"}


@dataclass
class Checkpoint:
    """A candidate audit point: the thread as it stood right after message `index`."""

    thread_id: int
    index: int  # position in the thread's message list
    message_id: str  # native id of the last message included
    kind: str  # END_TURN or INFERENCE
    # Facts the gate rules use, computed from the messages since the last typed user message.
    tool_calls: int = 0
    file_edits: int = 0
    after_correction: bool = False  # the last user message was a course correction
    user_wrote_after: bool = False  # the user had already written again after this point
    facts: dict[str, Any] = field(default_factory=dict)


@dataclass
class GateDecision:
    """A gate's answer at a checkpoint: whether to audit it, and why.

    `reason` is what a person reads and the store keeps ("too-few-tool-calls (3 < 5)");
    `code` is the same reason without its particulars ("too-few-tool-calls"), what counts of
    decisions group by. A gate whose reasons carry no particulars may leave `code` out: it is
    then the reason itself.
    """

    audit: bool
    reason: str
    code: str = ""

    def __post_init__(self) -> None:
        self.code = self.code or self.reason


# The busy-turn policy: audit a checkpoint only after this many tool calls and a file edit since
# the user last wrote. End-turn mode judges a turn once, as a whole, and keeps it by default;
# every-inference mode looks after every round (docs/design.md, "When the observer steps in")
# unless the user gives the two gate options. Gate plugins read it through `gate_policy`.
BUSY_TURN = {"min_tool_calls": 5, "require_edit": True}
EVERY_ROUND = {"min_tool_calls": 0, "require_edit": False}


def gate_policy(config: dict) -> dict[str, Any]:
    """Return `min_tool_calls` and `require_edit` in effect under the gate options `config`."""
    base = EVERY_ROUND if config.get("mode") == "every-inference" else BUSY_TURN
    return {k: base[k] if config.get(k) is None else config[k] for k in base}


def describe_gate_policy(config: dict) -> str:
    """Return the policy in effect as a person reads it, with how to change it."""
    policy = gate_policy(config)
    n, edit = policy["min_tool_calls"], policy["require_edit"]
    if not n and not edit:
        return "every checkpoint (keep the busy-turn policy: --min-tool-calls 5 --require-edit)"
    calls = f"{n} tool call{'s' if n != 1 else ''}" if n else ""
    needs = " and ".join(x for x in (calls, "a file edit" if edit else "") if x)
    return f"{needs} since the user wrote (every checkpoint: --min-tool-calls 0 --no-require-edit)"


def loop_guard(checkpoint: Checkpoint, config: dict) -> GateDecision | None:
    """Return the decision of the loop guards at `checkpoint`, or None when none holds it back.

    The core checks this before any gate plugin, so that no gate can switch it off:
    `after-correction`: never right after a course correction (the agent's answer to it is not
    audited until the user writes again), else one correction could call for the next.
    The other guards decide delivery, not the audit, and live where their facts are: an end of
    turn the user already answered is audited in every mode, but its correction is never sent
    (`user-wrote-again`), nor repeated text, nor more than `max_consecutive` corrections between
    two typed messages (`auditor.live.delivery`); a Stop hook never blocks again when
    `stop_hook_active` says the agent already goes on because of one (`auditor.live.sync_hook`).
    """
    if checkpoint.after_correction:
        return GateDecision(False, "after-correction")
    return None


def is_typed_user(m) -> bool:
    """True for a message a person typed (not tool output, not harness text, not a correction).

    A message whose parser does not say who wrote it (`source_type` unset) is taken at its
    role; a message carrying tool results is never typed.
    """
    if m.role != "user" or m.source_type not in (SOURCE_TYPED, None):
        return False
    return not any(b.kind == "tool_result" for b in m.blocks)


def _has_tool_use(m) -> bool:
    return any(b.kind == "tool_use" for b in m.blocks)


def is_tool_result(m) -> bool:
    return m.source_type == SOURCE_TOOL_RESULT or (
        m.role in ("user", "tool") and m.blocks and all(b.kind == "tool_result" for b in m.blocks)
    )


def find_checkpoints(thread_id: int, messages: list, mode: str = END_TURN) -> list[Checkpoint]:
    """Return the candidate checkpoints of a thread, in order.

    An end of turn is the last agent message before the next message from the user (typed or
    a correction) or the end of the thread, when that message does not wait on a tool. In
    `every-inference` mode, the last tool result of each round that the agent answers is a
    checkpoint too (the moment before the next model call); a round is every call of one
    model answer, whose lines share a `usage_key` when the format says it.
    """
    out: list[Checkpoint] = []
    tool_calls = edits = 0
    after_correction = False
    pending_end: int | None = None  # index of the latest agent message of the current turn

    def _same_answer(at: int | None, nxt) -> bool:
        # A result followed by another line of the model answer it belongs to is not the
        # moment before the next model call: Claude Code runs a call, and writes its result,
        # before the rest of the answer (the lines of one answer share its `usage_key`).
        key = getattr(nxt, "usage_key", None)
        return (
            at is not None and key is not None and getattr(messages[at], "usage_key", None) == key
        )

    def close_turn(user_wrote_after: bool) -> None:
        nonlocal pending_end
        if pending_end is not None:
            m = messages[pending_end]
            if not _has_tool_use(m):
                out.append(
                    Checkpoint(
                        thread_id,
                        pending_end,
                        m.native_id,
                        END_TURN,
                        tool_calls,
                        edits,
                        after_correction,
                        user_wrote_after,
                    )
                )
        pending_end = None

    for i, m in enumerate(messages):
        if is_typed_user(m) or m.source_type == SOURCE_COURSE_CORRECTION:
            close_turn(user_wrote_after=True)
            tool_calls = edits = 0
            after_correction = m.source_type == SOURCE_COURSE_CORRECTION
            continue
        if m.role == "assistant":
            for b in m.blocks:
                if b.kind == "tool_use":
                    tool_calls += 1
                    edits += bool(b.is_file_edit)
            pending_end = i
            continue
        if mode != END_TURN and is_tool_result(m):
            nxt = messages[i + 1] if i + 1 < len(messages) else None
            if nxt is not None and nxt.role == "assistant" and not _same_answer(pending_end, nxt):
                out.append(
                    Checkpoint(
                        thread_id, i, m.native_id, INFERENCE, tool_calls, edits, after_correction
                    )
                )
    close_turn(user_wrote_after=False)
    if mode == END_TURN:
        return out
    return sorted(out, key=lambda c: c.index)


def checkpoint_at(
    thread_id: int, messages: list, native_id: str, mode: str = END_TURN
) -> Checkpoint:
    """Return the checkpoint that ends at the message `native_id` (any message may be named):
    the one `find_checkpoints` finds there, else the checkpoint a message of its kind would be.

    Only the turn holding the message is looked at (a live hook event names a message of the
    latest turn of a long session): a checkpoint's counts are those of its turn."""
    # Looked for from the end (a stored thread's native ids are unique): a live event names
    # one of the last messages.
    i = next(
        (i for i in range(len(messages) - 1, -1, -1) if messages[i].native_id == native_id), None
    )
    if i is None:
        raise KeyError(native_id)
    m = messages[i]
    start = next((j for j in range(i, -1, -1) if _opens_turn(messages[j])), -1)
    tool_calls = edits = 0
    for prev in messages[start + 1 : i + 1]:
        if prev.role == "assistant":
            for b in prev.blocks:
                tool_calls += b.kind == "tool_use"
                edits += bool(b.kind == "tool_use" and b.is_file_edit)
    after_correction = start >= 0 and messages[start].source_type == SOURCE_COURSE_CORRECTION
    facts = (tool_calls, edits, after_correction)
    if m.role != "assistant":
        return Checkpoint(thread_id, i, native_id, INFERENCE, *facts)
    if start != i and not _has_tool_use(m):
        # The end of its turn when no agent message follows before the user's next one.
        end = next((j for j in range(i + 1, len(messages)) if _opens_turn(messages[j])), None)
        if not any(x.role == "assistant" for x in messages[i + 1 : end]):
            return Checkpoint(thread_id, i, native_id, END_TURN, *facts, end is not None)
    return Checkpoint(thread_id, i, native_id, END_TURN, *facts)


def _opens_turn(m) -> bool:
    return is_typed_user(m) or m.source_type == SOURCE_COURSE_CORRECTION
