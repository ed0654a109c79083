"""What auditor decides at one checkpoint before any observer call: signals -> gate -> format.

`plan()` is the one place this order is written. `auditor run`, the Stop hooks, the live
worker and `auditor eval` reach it through `Planner.plan_checkpoint`, which also records the
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


def list_checkpoints(
    engine, plugins: Plugins, thread: Any, messages: list, mode: str = END_TURN
) -> list[dict[str, Any]]:
    """Return the checkpoints of `thread` in order, each with its gate decision and verdicts.

    The decision is the one a run stored (`stored` True), else the gate's answer now with the
    default options; `verdicts` are every answer given at the checkpoint, oldest first. `at`
    is the message id `auditor prompt --at` takes.
    """
    from sqlalchemy import select

    from ..store import schema as s
    from .checkpoints import find_checkpoints

    c, v = s.Checkpoint.__table__, s.Verdict.__table__
    found = find_checkpoints(thread.id, messages, mode)
    with engine.connect() as conn:
        stored = {
            (r.message_native_id, r.kind): r
            for r in conn.execute(select(c).where(c.c.thread_id == thread.id))
        }
        answers: dict[int, list[dict[str, Any]]] = {}
        for r in conn.execute(
            select(v).where(v.c.thread_id == thread.id).order_by(v.c.created_at, v.c.id)
        ):
            answers.setdefault(r.checkpoint_id, []).append(
                {
                    "id": r.id,
                    "observer": r.observer,
                    "model": r.model,
                    "status": r.status,
                    "needs_correction": r.needs_correction,
                    "message": r.message,
                    "cost_usd": r.cost_usd,
                }
            )
        out = []
        for cp in found:
            row = stored.get((cp.message_id, cp.kind))
            if row is not None and row.gate_reason is not None:
                gate = {"audit": bool(row.gate_audit), "reason": row.gate_reason, "stored": True}
            else:
                p = plan(
                    conn,
                    plugins,
                    cp,
                    thread,
                    messages,
                    gate={"mode": mode},
                    formatter={},
                    signals={},
                )
                gate = {"audit": p.decision.audit, "reason": p.decision.reason, "stored": False}
            out.append(
                {
                    "at": cp.message_id,
                    "kind": cp.kind,
                    "index": cp.index,
                    "tool_calls": cp.tool_calls,
                    "file_edits": cp.file_edits,
                    "gate": gate,
                    "verdicts": answers.get(row.id, []) if row is not None else [],
                }
            )
    return out
