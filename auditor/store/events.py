"""The event log: one row per thing auditor did, typed and timestamped, with the ids involved.

Writers call `record(conn, type, ...)` inside the transaction that does the work, so an event
exists exactly when its work was committed. Ids are kept as plain integers (no foreign keys):
the log outlives the rows it names. `auditor events` reads it back (`list_events`).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ..errors import AuditorError, UnknownName
from ..printable import printable
from .db import utcnow
from .dialect import iso_utc
from .sql_text import DriverSql, stored_json, stored_time

if TYPE_CHECKING:
    from sqlalchemy import Connection, Engine

# The types auditor writes, and what each means.
TYPES: dict[str, str] = {
    "ingested": "a transcript file was read into the store (subject: its path)",
    "gated": "a checkpoint's gate decision was made or changed (data: audit, reason, signals)",
    "audited": "an observer answered at a checkpoint (verdict_id; data: observer, model, cost)",
    "critiqued": "a second, more critical pass answered (verdict_id; data: critique_of)",
    "corrected": "a verdict asked for a correction (verdict_id; subject: the message)",
    "injected": "a correction was delivered to the agent (verdict_id; subject: the target)",
    "injection-failed": "delivering a correction failed (verdict_id; data: error)",
    "run-started": "an audit run started (run_id; data: observer, model)",
    "run-finished": "an audit run ended (run_id; data: status and totals)",
    "error": "something failed: a file that could not be read, an observer call, a run",
}
_TYPE = re.compile(r"[a-z][a-z0-9-]{0,31}")
MAX_SUBJECT = 300


def record(
    conn: Connection,
    type: str,
    *,
    run_id: int | None = None,
    thread_id: int | None = None,
    checkpoint_id: int | None = None,
    verdict_id: int | None = None,
    subject: str | None = None,
    data: dict[str, Any] | None = None,
    at: datetime | None = None,
) -> int:
    """Append one event inside `conn`'s transaction and return its id.

    `type` is one of `TYPES` (a plugin may add its own lower-case, dash-separated type).
    `subject` is a short human-readable text (cut to 300 characters; redact it first if it
    comes from a transcript); `data` small JSON-able details.
    """
    if not _TYPE.fullmatch(type):
        raise AuditorError(
            f"{type!r} is not a valid event type: use lower-case words joined by dashes."
        )
    if subject is not None and len(subject) > MAX_SUBJECT:
        subject = subject[: MAX_SUBJECT - 1] + "…"
    # Run on the driver: an ingest records an event per file, and SQLAlchemy's work for a
    # statement cost more than running it.
    db = DriverSql(conn)
    values = (
        stored_time(at or utcnow(), db.sqlite),
        type,
        run_id,
        thread_id,
        checkpoint_id,
        verdict_id,
        subject,
        stored_json(data or None),
    )
    return db.scalar(_INSERT_EVENT, values)


_INSERT_EVENT = (
    "INSERT INTO events (at, type, run_id, thread_id, checkpoint_id, verdict_id, subject, data) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING id"
)


def _shortened(problem: str, keep: int = 300) -> str:
    # The start of a problem says what went wrong and the end often where (a line number, the
    # formats tried): a long one keeps both ends rather than losing its first words.
    if len(problem) <= keep:
        return problem
    return problem[: keep - 80] + " ... " + problem[-75:]


def record_file(conn: Connection, result) -> None:
    """Record an ingested file (an `auditor.ingest.ingester.FileResult`); unchanged files are not logged."""
    if result.status == "skipped":
        return
    data = {"status": result.status, "format": result.format, "messages": result.messages}
    if result.errors:
        data["problems"] = len(result.errors)
        data["first_problem"] = _shortened(result.errors[0])
    record(
        conn, "error" if result.status == "failed" else "ingested", subject=result.path, data=data
    )


def gate_before(conn: Connection, checkpoint) -> tuple[bool, str] | None:
    """Return the stored gate decision of a checkpoint (audit, reason), None when it is new."""
    from sqlalchemy import select

    from . import schema as s  # here: an ingest, which records events, never loads the models

    c = s.Checkpoint.__table__
    row = conn.execute(
        select(c.c.gate_audit, c.c.gate_reason).where(
            c.c.thread_id == checkpoint.thread_id,
            c.c.message_native_id == checkpoint.message_id,
            c.c.kind == checkpoint.kind,
        )
    ).first()
    return None if row is None else (bool(row.gate_audit), row.gate_reason)


def record_gate(
    conn: Connection,
    before: tuple[bool, str] | None,
    decision,
    *,
    checkpoint_id: int,
    thread_id: int,
    run_id: int | None,
    signals: list,
) -> None:
    """Record a gate decision when the checkpoint is new or its decision changed."""
    if before == (decision.audit, decision.reason):
        return
    data: dict[str, Any] = {"audit": decision.audit, "reason": decision.reason}
    if signals:
        data["signals"] = [sig.name for sig in signals]
    if before is not None:
        data["was"] = before[1]
    record(
        conn, "gated", run_id=run_id, thread_id=thread_id, checkpoint_id=checkpoint_id, data=data
    )


def record_verdict(conn: Connection, verdict_id: int, row: dict[str, Any]) -> None:
    """Record an observer call from its verdict row: audited or critiqued, corrected, or error."""
    ids: dict[str, Any] = {
        "run_id": row.get("run_id"),
        "thread_id": row.get("thread_id"),
        "checkpoint_id": row.get("checkpoint_id"),
        "verdict_id": verdict_id,
    }
    data = {
        "observer": row.get("observer"),
        "model": row.get("model"),
        "cost_usd": row.get("cost_usd"),
    }
    if row.get("critique_of") is not None:
        data["critique_of"] = row["critique_of"]
    if row.get("status") != "ok":
        record(
            conn,
            "error",
            subject=row.get("problem"),
            data={**data, "status": row.get("status")},
            **ids,
        )
        return
    record(
        conn,
        "critiqued" if row.get("critique_of") is not None else "audited",
        data={**data, "needs_correction": bool(row.get("needs_correction"))},
        **ids,
    )
    if row.get("needs_correction"):
        record(conn, "corrected", subject=row.get("message"), data=data, **ids)


def list_events(
    engine: Engine,
    types: list[str] | None = None,
    limit: int | None = 50,
    since: datetime | None = None,
    thread_id: int | None = None,
    run_id: int | None = None,
) -> list[dict[str, Any]]:
    """Return events, newest first, as dicts; `types` must be known types (see `TYPES`)."""
    from sqlalchemy import select

    for t in types or ():
        if t not in TYPES:
            raise UnknownName("event type", t, list(TYPES))
    from . import schema as s

    e = s.Event.__table__
    q = select(e).order_by(e.c.id.desc())
    if types:
        q = q.where(e.c.type.in_(types))
    if since is not None:
        q = q.where(e.c.at >= since.astimezone(UTC).replace(tzinfo=None))
    if thread_id is not None:
        q = q.where(e.c.thread_id == thread_id)
    if run_id is not None:
        q = q.where(e.c.run_id == run_id)
    if limit:
        q = q.limit(limit)
    with engine.connect() as conn:
        rows = conn.execute(q).all()
    return [
        {
            "id": r.id,
            "at": iso_utc(r.at),
            "type": r.type,
            "run_id": r.run_id,
            "thread_id": r.thread_id,
            "checkpoint_id": r.checkpoint_id,
            "verdict_id": r.verdict_id,
            "subject": r.subject,
            "data": r.data,
        }
        for r in rows
    ]


def format_event(event: dict[str, Any]) -> str:
    """Return one line for a terminal: time, type, the ids involved, the subject."""
    ids = " ".join(
        f"{label}={event[key]}"
        for key, label in (
            ("run_id", "run"),
            ("thread_id", "thread"),
            ("checkpoint_id", "checkpoint"),
            ("verdict_id", "verdict"),
        )
        if event.get(key) is not None
    )
    at = event["at"][:19].replace("T", " ")
    parts = [f"{event['id']:>6}", at, f"{event['type']:<16}", ids]
    if event.get("subject"):
        parts.append(event["subject"])
    elif event.get("data"):
        parts.append(", ".join(f"{k}={v}" for k, v in event["data"].items()))
    return printable("  ".join(p for p in parts if p))
