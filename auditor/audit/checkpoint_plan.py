"""What auditor decides at one checkpoint before any observer call: signals -> gate -> format.

`plan()` is the one place this order is written. `auditor run`, the Stop hooks, the live
worker and `auditor eval` reach it through `Auditor.plan_checkpoint`, which also records the
decision; `auditor prompt` calls it directly and records nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..ingest import guidance
from .checkpoints import END_TURN, Checkpoint, GateDecision

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from ..plugins import Plugins
    from ..store.signal_rows import Signal


@dataclass
class Plan:
    """The signals, the gate's decision and the observer's user content at one checkpoint."""

    checkpoint: Checkpoint
    signals: list[Signal]
    decision: GateDecision
    user: str | None  # the rendered checkpoint; None when the gate held it back


def gate_config(gate: dict[str, Any]) -> dict[str, Any]:
    """Return the gate options with the default mode filled in."""
    return {"mode": END_TURN, **gate}


# Model tokenizers count more than the formatter's bytes/4 on code, paths and JSON: the
# embedded model's counted 1.18x it on the corpus's checkpoints (median), up to 1.49x.
TOKENIZER_MARGIN = 1.25


def formatter_for(formatter: dict[str, Any], observer: Any, system: str) -> dict[str, Any]:
    """Return the formatter options for calls to `observer` with the system prompt `system`.

    An observer with a small context window says how many tokens its prompt may take
    (`context_tokens`): the rendered thread's budget (`max_tokens`) is then what the system
    prompt leaves of it, so that the formatter chooses what to leave out rather than the
    backend cutting the middle. A `max_tokens` the user gave (--max-prompt-tokens) wins.
    """
    window = int(getattr(observer, "context_tokens", 0) or 0)
    if not window or formatter.get("max_tokens"):
        return formatter
    system_tokens = -(-len(system.encode("utf-8", "surrogatepass")) // 4)
    room = int((window - system_tokens) / TOKENIZER_MARGIN)
    return {**formatter, "max_tokens": max(room, 500)}


def plan(
    conn: Connection,
    plugins: Plugins,
    checkpoint: Checkpoint,
    thread: Any,
    messages: list,
    *,
    gate: dict[str, Any],
    formatter: dict[str, Any],
    signals: dict[str, Any],
    render: bool = False,
) -> Plan:
    """Compute the signals at `checkpoint`, ask the gate, and render it for the observer.

    `messages` is the whole thread; only those up to the checkpoint are used. The checkpoint
    is rendered when the gate lets it through, or always with `render=True`. Nothing is
    written: `conn` is read for the guidance files the observer is shown.
    """
    upto = messages[: checkpoint.index + 1]
    found = plugins.signals(checkpoint, thread, upto, signals)
    decision = plugins.gate(checkpoint, thread, upto, gate_config(gate), found)
    user = None
    if decision.audit or render:
        view = guidance.for_checkpoint(conn, thread, upto)
        user = plugins.render_checkpoint(checkpoint, view, upto, formatter)
    return Plan(checkpoint, found, decision, user)
