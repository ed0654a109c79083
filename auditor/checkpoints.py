"""Checkpoints: the moments of a thread where an observer could step in, and gate decisions."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

END_TURN = "end-turn"  # the agent ended its turn (seeds 000/001)
INFERENCE = "inference"  # a round of tool results came back, before the next model call (seed 002)


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
    audit: bool
    reason: str  # e.g. "passed", "too-few-tool-calls (3 < 5)", "no-file-edit"
