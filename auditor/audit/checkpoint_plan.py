"""What auditor decides at one checkpoint before any observer call: signals -> gate -> format.

`CheckpointPlanner` holds the plugin manager's hook relay and the run's options, and is the one
place that calls the three decision hooks (`compute_signals`, `gate_checkpoint`,
`format_checkpoint`); its `plan` is the one place their order is written. `auditor run`, the
Stop hooks, the live worker and `auditor eval` reach it through `Planner.plan_checkpoint`, which
also records the decision; `auditor prompt`, `auditor checkpoints` and `auditor show` ask it
directly and record nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from ..errors import PluginError
from ..ingest import guidance
from ..printable import printable
from ..redact import redact
from ..store.signal_rows import Signal, strongest
from ..store.threads import StoredThread
from .checkpoints import END_TURN, Checkpoint, GateDecision, loop_guard

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from ..hookspecs import CheckpointHooks
    from ..plugins import Plugins
    from ..store.threads import StoredMessage


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


class CheckpointPlanner:
    """Plans checkpoints with the plugins' decision hooks and a run's options.

    `gate`, `formatter` and `signals` are the options each hook gets as its `config` (the
    gate's with the default mode filled in). A thread may be a row of the `threads` table or a
    `StoredThread`; the hooks always get a `StoredThread`.
    """

    def __init__(
        self,
        plugins: Plugins,
        *,
        gate: dict[str, Any] | None = None,
        formatter: dict[str, Any] | None = None,
        signals: dict[str, Any] | None = None,
    ):
        self.hook = cast("CheckpointHooks", plugins.pm.hook)
        self.gate_config = gate_config(gate or {})
        self.formatter = formatter or {}
        self.signal_config = signals or {}

    def plan(
        self,
        conn: Connection,
        checkpoint: Checkpoint,
        thread: Any,
        messages: list,
        render: bool = False,
    ) -> Plan:
        """Compute the signals at `checkpoint`, ask the gate, and render it for the observer.

        `messages` is the whole thread; only those up to the checkpoint are used. The
        checkpoint is rendered when the gate lets it through, or always with `render=True`.
        Nothing is written: `conn` is read for the guidance files the observer is shown.
        """
        upto = messages[: checkpoint.index + 1]
        found = self.signals(checkpoint, thread, upto)
        decision = self.gate(checkpoint, thread, upto, found)
        user = None
        if decision.audit or render:
            user = self.render(checkpoint, guidance.for_checkpoint(conn, thread, upto), upto)
        return Plan(checkpoint, found, decision, user)

    def signals(
        self, checkpoint: Checkpoint, thread: Any, upto: list[StoredMessage]
    ) -> list[Signal]:
        """Every plugin's signals at `checkpoint`, as one list, strongest first."""
        found: list[Signal] = []
        results = self.hook.compute_signals(
            checkpoint=checkpoint,
            thread=StoredThread.of(thread),
            messages=upto,
            config=self.signal_config,
        )
        for result in results:
            for sig in result or []:
                if not isinstance(sig, Signal):
                    raise PluginError(
                        f"A compute_signals hook returned {sig!r}; return "
                        "auditor.api.Signal objects."
                    )
                found.append(sig)
        return strongest(found)

    def gate(
        self,
        checkpoint: Checkpoint,
        thread: Any,
        upto: list[StoredMessage],
        signals: list[Signal] | None = None,
    ) -> GateDecision:
        """The gate's decision at `checkpoint`: the core's loop guards, else the winning
        plugin's (see `checkpoints.loop_guard`; no gate plugin can audit what they hold back)."""
        held = loop_guard(checkpoint, self.gate_config)
        if held is not None:
            return held
        decision = self.hook.gate_checkpoint(
            checkpoint=checkpoint,
            thread=StoredThread.of(thread),
            messages=upto,
            config=self.gate_config,
            signals=signals or [],
        )
        if decision is None:
            raise PluginError(
                "No gate plugin decided the checkpoint; is the built-in 'gate' plugin disabled?"
            )
        return decision

    def render(self, checkpoint: Checkpoint, thread: Any, upto: list[StoredMessage]) -> str:
        """The observer's user content at `checkpoint`.

        Whatever formatter rendered it, the text is redacted (`auditor.redact`) and freed of
        terminal control sequences here, before it can reach an observer or a terminal.
        """
        out = self.hook.format_checkpoint(
            checkpoint=checkpoint,
            thread=StoredThread.of(thread),
            messages=upto,
            config=self.formatter,
        )
        if out is None:
            raise PluginError(
                "No formatter plugin rendered the checkpoint; is the built-in 'formatter' "
                "plugin disabled?"
            )
        return redact(printable(out))


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
    planner = CheckpointPlanner(plugins, gate={"mode": mode})
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
                p = planner.plan(conn, cp, thread, messages)
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
