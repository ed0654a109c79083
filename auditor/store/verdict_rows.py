"""Reading verdicts back: what each observer said at each checkpoint, what it cost, and whether
its correction reached the agent. `auditor verdicts` and `auditor show` print these."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, func, or_, select

from ..errors import UnknownName
from ..printable import printable
from . import schema as s
from .dialect import iso_utc
from .short_ids import first_form, shortest_forms

STATUSES = ("ok", "invalid", "error")


_iso = iso_utc


def list_verdicts(
    engine: Engine,
    *,
    corrections: bool = False,
    thread_id: int | None = None,
    observer: str | None = None,
    model: str | None = None,
    run_id: int | None = None,
    since: datetime | None = None,
    query: str | None = None,
    status: str | None = None,
    limit: int | None = 20,
) -> list[dict[str, Any]]:
    """Return verdicts newest first, as dicts, with their thread, checkpoint and delivery.

    `corrections`: only answers asking for a correction. `observer` must be one that answered
    in this store. `query`: a case-insensitive substring of the message or the problem.
    `delivery` of a correction is delivered, failed (every attempt failed), held back (a loop
    guard stopped it) or pending (not sent yet); None for a verdict that is no correction.
    """
    v, t, c = s.Verdict.__table__, s.Thread.__table__, s.Checkpoint.__table__
    if status is not None and status not in STATUSES:
        raise UnknownName("verdict status", status, list(STATUSES))
    with engine.connect() as conn:
        if observer is not None:
            known = set(conn.execute(select(v.c.observer).distinct()).scalars())
            if observer not in known:
                raise UnknownName("observer with verdicts in this store", observer, sorted(known))
        q = (
            select(
                v,
                t.c.native_id.label("thread_native_id"),
                t.c.agent,
                t.c.cwd,
                c.c.message_native_id,
                c.c.kind,
            )
            .join(t, t.c.id == v.c.thread_id)
            .join(c, c.c.id == v.c.checkpoint_id)
            .order_by(v.c.created_at.desc(), v.c.id.desc())
        )
        if corrections:
            q = q.where(v.c.status == "ok", v.c.needs_correction.is_(True))
        if thread_id is not None:
            q = q.where(v.c.thread_id == thread_id)
        if observer is not None:
            q = q.where(v.c.observer == observer)
        if model is not None:
            q = q.where(v.c.model == model)
        if run_id is not None:
            q = q.where(v.c.run_id == run_id)
        if since is not None:
            q = q.where(v.c.created_at >= since.astimezone(UTC).replace(tzinfo=None))
        if status is not None:
            q = q.where(v.c.status == status)
        if query:
            escaped = query.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            like = f"%{escaped}%"
            q = q.where(
                or_(
                    func.lower(v.c.message).like(like, escape="\\"),
                    func.lower(v.c.problem).like(like, escape="\\"),
                )
            )
        if limit:
            q = q.limit(limit)
        rows = conn.execute(q).all()
        deliveries = _deliveries(conn, [r.id for r in rows if r.needs_correction])
        every = conn.scalars(select(t.c.native_id)).all() if rows else []
    shorts = shortest_forms({r.thread_native_id for r in rows}, every)
    out = [_as_dict(r, deliveries) for r in rows]
    for d in out:
        d["thread_short_id"] = shorts[d["thread_native_id"]]
    return out


def _deliveries(conn, verdict_ids: list[int]) -> dict[int, dict[str, Any]]:
    """How delivering each correction went: its first delivery; else a loop guard's hold;
    else its latest failure, with the number of attempts."""
    if not verdict_ids:
        return {}
    i = s.Injection.__table__
    rows = conn.execute(
        select(i).where(i.c.verdict_id.in_(verdict_ids)).order_by(i.c.created_at, i.c.id)
    ).all()
    attempts: dict[int, list] = {}
    for r in rows:
        attempts.setdefault(r.verdict_id, []).append(r)
    out = {}
    for verdict_id, tries in attempts.items():
        chosen = (
            next((r for r in tries if r.status == "delivered"), None)
            or next((r for r in reversed(tries) if r.status == "skipped"), None)
            or tries[-1]
        )
        out[verdict_id] = {
            "status": "held back" if chosen.status == "skipped" else chosen.status,
            "injector": chosen.injector,
            "target": chosen.target,
            "at": _iso(chosen.created_at),
            "error": chosen.error,
            "attempts": len(tries),
        }
    return out


def _as_dict(r, deliveries: dict[int, dict[str, Any]]) -> dict[str, Any]:
    delivery = None
    if r.status == "ok" and r.needs_correction:
        delivery = deliveries.get(r.id) or {"status": "pending"}
    return {
        "id": r.id,
        "created_at": _iso(r.created_at),
        "run_id": r.run_id,
        "thread_id": r.thread_id,
        "thread_native_id": r.thread_native_id,
        "agent": r.agent,
        "cwd": r.cwd,
        "checkpoint_id": r.checkpoint_id,
        "message_id": r.message_native_id,
        "kind": r.kind,
        "observer": r.observer,
        "model": r.model,
        "prompt_version": r.prompt_version,
        "status": r.status,
        "needs_correction": r.needs_correction,
        "message": r.message,
        "problem": r.problem,
        "critique_of": r.critique_of,
        "latency_ms": r.latency_ms,
        "input_tokens": r.input_tokens,
        "output_tokens": r.output_tokens,
        "cached_tokens": r.cached_tokens,
        "thinking_tokens": r.thinking_tokens,
        "cost_usd": r.cost_usd,
        "delivery": delivery,
    }


@dataclass
class CheckpointNote:
    """What happened at one checkpoint of a thread: the signals that fire, the verdicts."""

    signals: list = field(default_factory=list)
    verdicts: list[dict[str, Any]] = field(default_factory=list)


def checkpoint_notes(
    engine: Engine, signals: Callable[[Any, Any, list], list], thread, messages: list
) -> dict[str, CheckpointNote]:
    """Return, by the native id of the message a checkpoint ends at, its signals (computed now,
    at each end of turn, by `signals(checkpoint, thread, messages up to it)`: the plugins' as
    `CheckpointPlanner.signals` asks them) and its stored verdicts (oldest first)."""
    from ..audit.checkpoints import find_checkpoints

    notes: dict[str, CheckpointNote] = {}
    for cp in find_checkpoints(thread.id, messages):
        found = signals(cp, thread, messages[: cp.index + 1])
        if found:
            notes.setdefault(cp.message_id, CheckpointNote()).signals = found
    for v in reversed(list_verdicts(engine, thread_id=thread.id, limit=None)):
        notes.setdefault(v["message_id"], CheckpointNote()).verdicts.append(v)
    return notes


def outcome(v: dict[str, Any]) -> str:
    """Say in a few words what a verdict was: correction, no correction, invalid or error."""
    if v["status"] == "error":
        return "error"
    if v["status"] == "invalid":
        return "invalid answer"
    kind = "second pass: " if v["critique_of"] else ""
    return kind + ("correction" if v["needs_correction"] else "no correction")


def cost_text(v: dict[str, Any]) -> str:
    """The verdict's cost, `unpriced` when the model is not in the price table."""
    return "unpriced" if v["cost_usd"] is None else f"${v['cost_usd']:.4f}"


def delivery_text(v: dict[str, Any]) -> str | None:
    """Whether a correction reached the agent: `delivered by claude-code at ...`, or why not."""
    d = v["delivery"]
    if d is None:
        return None
    if d["status"] == "pending":
        # Said only where the loop guards were asked (`auditor.live.delivery.preview`).
        if d.get("will_hold"):
            return f"not delivered; `auditor inject` will hold it back: {d['will_hold']}"
        if d.get("checked"):
            return "not delivered yet (`auditor inject` sends it)"
        return "not delivered yet"
    at = (d["at"] or "")[:19].replace("T", " ")
    if d["status"] == "delivered":
        return f"delivered by {d['injector']} {at}"
    if d["status"] == "held back":
        return f"held back by a loop guard: {d['error']}"
    return f"delivery failed ({d['attempts']} attempts): {d['error']}"


def facts(v: dict[str, Any]) -> str:
    """Who answered, in which run, at what cost and how fast, and whether it was delivered."""
    parts = [f"{v['observer']} {v['model']}"]
    if v["run_id"] is not None:
        parts.append(f"run {v['run_id']}")
    parts.append(cost_text(v))
    if v["latency_ms"] is not None:
        parts.append(f"{v['latency_ms'] / 1000:.1f} s")
    if delivered := delivery_text(v):
        parts.append(delivered)
    return " · ".join(parts)


def format_verdict(v: dict[str, Any]) -> str:
    """Render a verdict as a few lines of plain text for `auditor verdicts`."""
    when = (v["created_at"] or "")[:19].replace("T", " ")
    lines = [
        f"## verdict {v['id']} · {when} · {outcome(v)}",
        f"thread {v.get('thread_short_id') or first_form(v['thread_native_id'])} ({v['agent']}, id {v['thread_id']}) "
        f"at message {v['message_id']} ({v['kind']})",
        facts(v),
    ]
    text = v["message"] if v["status"] == "ok" else v["problem"]
    if text:
        lines.append("")
        lines += ["> " + line if line else ">" for line in printable(text).splitlines()]
    return "\n".join(lines)
