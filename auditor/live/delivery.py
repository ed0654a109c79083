"""Delivering corrections to running agents: the injector contract, the loop guards, the record.

A correction is a verdict that says `needsCorrection` with a message. An injector (a plugin,
see `hookspecs.register_injectors`) carries it to the agent; this module decides whether it
may be sent at all and records every attempt in the `injections` table, so that nothing is
delivered twice and every attempt is accounted for.

Loop guards, checked before every delivery:
- `user-wrote-again`: at an end of turn, a correction goes out only if nobody (the user, or a
  correction) has written in the thread since the checkpoint (docs/design.md);
- `already-delivered`: a verdict is delivered at most once, whatever the injector;
- `duplicate`: the same correction text is never sent twice to a thread;
- `too-many-corrections`: at most `max_consecutive` corrections (default 2) between two
  messages the user typed.
Two more guards live where their facts are: the core never audits right after a
course-correction message, whatever gate is installed (`checkpoints.loop_guard`), and the Stop
hooks never block again when `stop_hook_active` says the agent is already continuing because of
a hook.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

# Put in front of a correction delivered through a channel that carries only text (a Stop
# hook's `reason`), so that the transcript parsers can tell auditor's own messages apart and
# the gate never audits right after one.
CORRECTION_MARKER = "[auditor course-correction]"

DELIVERED, FAILED, SKIPPED, DRY_RUN = "delivered", "failed", "skipped", "dry-run"
# An injector that only stages a correction for a channel that hands it over later (the live
# hooks' outbox) says `staged`: nothing is recorded when it stages, and the channel records
# the hand-over, or the take-back, with `record` when it happens.
STAGED = "staged"


def taken_back(event: str) -> str:
    """The error recorded for a correction a live hook had ready and took back: the user wrote
    (at hook event `event`) before it was handed over. `auditor report deliveries` reads it."""
    return f"user-wrote-again: the user wrote ({event}) before it was handed over"


def cancelled(why: str, took: float) -> str:
    """The problem recorded for a live audit cancelled in flight (`why`: what stopped it)."""
    return f"cancelled: {why}, {took:.1f}s into the call"


MAX_CONSECUTIVE = 2
LEASE_SECONDS = 120.0


@dataclass
class Correction:
    """A correction waiting for delivery, with what injectors need to know about its thread."""

    verdict_id: int
    checkpoint_id: int
    thread_id: int
    thread: str  # the thread's native id (session id, Amp T-... id)
    agent: str
    message: str
    checkpoint_message: str  # native id of the message the checkpoint ends at
    observer: str
    model: str
    created_at: datetime | None = None
    cwd: str | None = None
    source_path: str | None = None  # the transcript file the thread was read from

    @property
    def text(self) -> str:
        """The message as sent through a text-only channel: marked as auditor's."""
        return f"{CORRECTION_MARKER} {self.message}"

    @property
    def message_hash(self) -> str:
        return hashlib.sha256(" ".join(self.message.split()).lower().encode()).hexdigest()

    def as_json(self) -> dict[str, Any]:
        """The correction as the JSON object `stdout` prints and `webhook` posts."""
        created = self.created_at
        if created is not None and created.tzinfo is None:
            created = created.replace(tzinfo=UTC)
        return {
            "type": "course-correction",
            "message": self.message,
            "thread": self.thread,
            "agent": self.agent,
            "cwd": self.cwd,
            "checkpoint_message": self.checkpoint_message,
            "verdict_id": self.verdict_id,
            "observer": self.observer,
            "model": self.model,
            "created_at": created.isoformat() if created else None,
        }


class HeldBack(Exception):
    """Raised by an injector whose own channel holds a correction back (a loop guard of that
    channel: the user wrote meanwhile, another correction waits to go out). Recorded as
    skipped, with the text as the reason, never as a failed attempt."""


class Injector(Protocol):
    """What an injector plugin registers (see `hookspecs.register_injectors`)."""

    name: str
    description: str
    live: bool  # delivers only from inside the agent's own hook (its output is the channel)
    # Optional: `staged = True` for an injector that only stages (see STAGED).

    def deliver(self, correction: Correction, options: dict[str, Any]) -> str:
        """Deliver `correction`; return a short description of the target, or raise."""
        ...


@dataclass
class Delivery:
    """What happened to one correction."""

    correction: Correction
    injector: str
    status: str  # delivered | failed | skipped | dry-run | staged
    target: str | None = None
    error: str | None = None  # why it failed, or the guard that held it back

    def as_json(self) -> dict[str, Any]:
        return {
            "verdict_id": self.correction.verdict_id,
            "thread": self.correction.thread,
            "injector": self.injector,
            "status": self.status,
            "target": self.target,
            "error": self.error,
        }


def _is_turn_start(m) -> bool:
    from ..audit.checkpoints import is_typed_user
    from ..model import SOURCE_COURSE_CORRECTION

    return is_typed_user(m) or m.source_type == SOURCE_COURSE_CORRECTION


def turn_facts(messages: list, checkpoint_message: str) -> tuple[str, bool]:
    """Return (turn key, whether someone wrote after the checkpoint) for a stored thread.

    The turn key is the native id of the last typed user message up to the checkpoint, so
    that corrections between two user messages share it. A checkpoint message that is not
    stored (the hook saw it before the transcript file did) counts as the thread's end.
    """
    from ..audit.checkpoints import is_typed_user

    index = next(
        (i for i, m in enumerate(messages) if m.native_id == checkpoint_message), len(messages) - 1
    )
    key = next((m.native_id for m in reversed(messages[: index + 1]) if is_typed_user(m)), "")
    wrote_after = any(_is_turn_start(m) for m in messages[index + 1 :])
    return key, wrote_after


def _guard(
    conn, c: Correction, turn_key: str, wrote_after: bool, max_consecutive: int
) -> str | None:
    """Return the name (and facts) of the guard that holds `c` back, or None."""
    from sqlalchemy import func, select

    from ..store import schema as s

    if wrote_after:
        return "user-wrote-again: the thread moved on after the checkpoint"
    i = s.Injection
    delivered = select(func.count()).where(i.status == DELIVERED)
    if conn.execute(delivered.where(i.verdict_id == c.verdict_id)).scalar():
        return "already-delivered"
    if conn.execute(
        delivered.where(i.thread_id == c.thread_id, i.message_hash == c.message_hash)
    ).scalar():
        return "duplicate: this text was already sent to the thread"
    n = conn.execute(delivered.where(i.thread_id == c.thread_id, i.turn_key == turn_key)).scalar()
    if n >= max_consecutive:
        return f"too-many-corrections: {n} since the user last wrote (max {max_consecutive})"
    return None


def record(
    conn, c: Correction, injector: str, status: str, turn_key: str, target=None, error=None
) -> int:
    """Record one attempt to deliver `c` in the injections table (and the events log)."""
    from ..store import events
    from ..store import schema as s
    from ..store.db import utcnow

    kind = {DELIVERED: "injected", FAILED: "injection-failed"}.get(status)
    if kind:
        events.record(
            conn,
            kind,
            thread_id=c.thread_id,
            checkpoint_id=c.checkpoint_id,
            verdict_id=c.verdict_id,
            subject=target or error,
            data={"injector": injector},
        )
    return conn.execute(
        s.Injection.__table__.insert()
        .values(
            verdict_id=c.verdict_id,
            thread_id=c.thread_id,
            injector=injector,
            target=target,
            turn_key=turn_key,
            message_hash=c.message_hash,
            status=status,
            error=error,
            created_at=utcnow(),
        )
        .returning(s.Injection.id)
    ).scalar_one()


def deliver(
    engine,
    injector: Injector,
    correction: Correction,
    messages: list,
    options: dict[str, Any] | None = None,
    *,
    max_consecutive: int = MAX_CONSECUTIVE,
    dry_run: bool = False,
) -> Delivery:
    """Apply the loop guards to `correction`, deliver it through `injector`, record the attempt.

    `messages` is the thread as stored (for the turn facts). Under a lease, so that two
    processes never deliver the same verdict; a dry run records nothing and delivers nothing.
    """
    from ..store import leases

    name = injector.name
    turn_key, wrote_after = turn_facts(messages, correction.checkpoint_message)
    if dry_run:
        with engine.connect() as conn:
            held = _guard(conn, correction, turn_key, wrote_after, max_consecutive)
        return Delivery(correction, name, SKIPPED if held else DRY_RUN, error=held)
    owner = leases.new_owner()
    key = hashlib.sha256(f"inject\0{correction.verdict_id}".encode()).hexdigest()
    with engine.begin() as conn:
        if not leases.take(conn, key, correction.checkpoint_id, owner, LEASE_SECONDS):
            return Delivery(
                correction, name, SKIPPED, error="busy: another process is delivering it"
            )
        held = _guard(conn, correction, turn_key, wrote_after, max_consecutive)
        if held:
            record(conn, correction, name, SKIPPED, turn_key, error=held)
            leases.release(conn, key, owner)
            return Delivery(correction, name, SKIPPED, error=held)
    try:
        try:
            target = injector.deliver(correction, dict(options or {}))
        except HeldBack as exc:
            with engine.begin() as conn:
                record(conn, correction, name, SKIPPED, turn_key, error=str(exc))
            return Delivery(correction, name, SKIPPED, error=str(exc))
        except Exception as exc:  # noqa: BLE001 - recorded as a failed attempt; a later inject retries it
            error = f"{type(exc).__name__}: {exc}"
            with engine.begin() as conn:
                record(conn, correction, name, FAILED, turn_key, error=error)
            return Delivery(correction, name, FAILED, error=error)
        if getattr(injector, "staged", False):
            return Delivery(correction, name, STAGED, target=target)
        with engine.begin() as conn:
            record(conn, correction, name, DELIVERED, turn_key, target=target)
        return Delivery(correction, name, DELIVERED, target=target)
    finally:
        with engine.begin() as conn:
            leases.release(conn, key, owner)


def pending(
    engine, run_id: int | None = None, verdict_ids: list[int] | None = None
) -> list[Correction]:
    """Return the corrections no injector has delivered or held back yet, oldest first."""
    from sqlalchemy import exists, select

    from ..store import schema as s

    v, t, c, f, i = s.Verdict, s.Thread, s.Checkpoint, s.SourceFile, s.Injection
    handled = exists().where(i.verdict_id == v.id, i.status.in_((DELIVERED, SKIPPED)))
    q = (
        select(
            v.id,
            v.checkpoint_id,
            v.thread_id,
            t.native_id,
            t.agent,
            v.message,
            c.message_native_id,
            v.observer,
            v.model,
            v.created_at,
            t.cwd,
            f.path,
        )
        .join(t, t.id == v.thread_id)
        .join(c, c.id == v.checkpoint_id)
        .outerjoin(f, f.id == t.source_file_id)
        .where(v.status == "ok", v.needs_correction.is_(True), v.message.is_not(None), ~handled)
        .order_by(v.id)
    )
    if run_id is not None:
        q = q.where(v.run_id == run_id)
    if verdict_ids is not None:
        q = q.where(v.id.in_(verdict_ids))
    with engine.connect() as conn:
        return [Correction(*row) for row in conn.execute(q).all()]


def preview(
    engine, verdict_ids: list[int], max_consecutive: int = MAX_CONSECUTIVE
) -> dict[int, str | None]:
    """Return, for each pending correction among `verdict_ids`, the loop guard that would hold
    it back at the next `auditor inject` (None: it would be sent). Records nothing."""
    from ..store.threads import load_messages

    out: dict[int, str | None] = {}
    threads: dict[int, list] = {}
    corrections = pending(engine, verdict_ids=verdict_ids) if verdict_ids else []
    with engine.connect() as conn:
        for c in corrections:
            if c.thread_id not in threads:
                threads[c.thread_id] = load_messages(engine, c.thread_id)
            turn_key, wrote_after = turn_facts(threads[c.thread_id], c.checkpoint_message)
            out[c.verdict_id] = _guard(conn, c, turn_key, wrote_after, max_consecutive)
    return out


def inject_pending(
    engine,
    injector: Injector,
    options: dict[str, Any] | None = None,
    *,
    run_id: int | None = None,
    max_consecutive: int = MAX_CONSECUTIVE,
    dry_run: bool = False,
) -> list[Delivery]:
    """Deliver every pending correction (of one run, or all) through `injector`."""
    from ..store.threads import load_messages

    out: list[Delivery] = []
    threads: dict[int, list] = {}
    for correction in pending(engine, run_id):
        if correction.thread_id not in threads:
            threads[correction.thread_id] = load_messages(engine, correction.thread_id)
        out.append(
            deliver(
                engine,
                injector,
                correction,
                threads[correction.thread_id],
                options,
                max_consecutive=max_consecutive,
                dry_run=dry_run,
            )
        )
    return out


def check_pending(engine, verdicts: list[dict[str, Any]]) -> None:
    """Mark each pending correction among `verdicts` (`list_verdicts` rows) with what the loop
    guards would do at the next `auditor inject`: a correction is said to go out only where
    they would let it (`will_hold`: the guard that holds it back, else None)."""
    waiting = [v for v in verdicts if (v.get("delivery") or {}).get("status") == "pending"]
    held = preview(engine, [v["id"] for v in waiting])
    for v in waiting:
        v["delivery"] = {**v["delivery"], "checked": True, "will_hold": held.get(v["id"])}
