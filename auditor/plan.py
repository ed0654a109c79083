"""What auditor decides at one checkpoint before any observer call: signals -> gate -> format.

`plan()` is the one place this order is written. `auditor run`, the Stop hooks, the live
worker and `auditor eval` reach it through `Auditor.plan_checkpoint`, which also records the
decision; `auditor prompt` calls it directly and records nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import guidance
from .checkpoints import END_TURN, Checkpoint, GateDecision

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from .plugins import Plugins
    from .signals import Signal


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
