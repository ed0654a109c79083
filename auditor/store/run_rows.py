"""Runs and their heartbeat: a run that was killed (SIGKILL, a crash, a machine gone down)
never writes its end, so each run beats while it works and a run that stopped beating, or
whose process is gone, is marked interrupted wherever runs are listed or a new one starts."""

from __future__ import annotations

import contextlib
import threading
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, overload

from sqlalchemy import Connection, Engine, select, text, update
from sqlalchemy.exc import OperationalError

from . import events, leases
from . import schema as s
from .db import utcnow

if TYPE_CHECKING:
    from ..audit.run_types import RunSummary

HEARTBEAT = 60.0  # seconds between two beats of a working run
STALE = 5 * HEARTBEAT  # a run silent that long has stopped, wherever it ran


@overload
def _aware(when: datetime) -> datetime: ...
@overload
def _aware(when: None) -> None: ...
def _aware(when: datetime | None) -> datetime | None:
    return when.replace(tzinfo=UTC) if when is not None and when.tzinfo is None else when


class Heartbeat:
    """Write `heartbeat_at` of run `run_id` every `every` seconds until `stop()`."""

    def __init__(self, engine: Engine, run_id: int, every: float = HEARTBEAT):
        self.engine, self.run_id, self.every = engine, run_id, every
        self._stopped = threading.Event()
        self._thread = threading.Thread(
            target=self._beat, name=f"run-{run_id}-heartbeat", daemon=True
        )
        self._thread.start()

    def _beat(self) -> None:
        r = s.Run.__table__
        while not self._stopped.wait(self.every):
            # The store locked for longer than the busy timeout: the next beat may pass.
            with contextlib.suppress(OperationalError), self.engine.begin() as conn:
                conn.execute(
                    update(r)
                    .where(r.c.id == self.run_id, r.c.status == "running")
                    .values(heartbeat_at=utcnow())
                )

    def stop(self) -> None:
        self._stopped.set()


def mark_interrupted(conn: Connection) -> list[int]:
    """Mark interrupted the runs still `running` whose process is gone or that stopped beating
    STALE seconds ago; return their ids."""
    r = s.Run.__table__
    now = utcnow()
    marked = []
    # Written as the partial index `ix_runs_running` is, so that it is used whatever the
    # driver does with parameters: the table grows by a run at each live audit.
    for run in conn.execute(select(r).where(text("runs.status = 'running'"))).all():
        last = _aware(run.heartbeat_at or run.started_at)
        gone = run.owner is not None and leases.dead(run.owner)
        if not gone and last is not None and now - last < timedelta(seconds=STALE):
            continue
        why = (
            f"process {run.owner.split(':')[1]} is gone"
            if gone
            else f"no heartbeat for {int((now - last).total_seconds())} s"
            if last is not None
            else "it never beat"
        )
        error = f"stopped without finishing ({why}; killed or crashed): last heard of at {last:%Y-%m-%d %H:%M:%S} UTC"
        done = conn.execute(
            update(r)
            .where(r.c.id == run.id, r.c.status == "running")
            .values(status="interrupted", ended_at=last, error=error)
        )
        if done.rowcount:
            marked.append(run.id)
            events.record(
                conn, "run-finished", run_id=run.id, subject=error, data={"status": "interrupted"}
            )
    return marked


def record_start(
    conn: Connection,
    *,
    owner: str,
    observer: str,
    model: str,
    prompt: Any,
    dry_run: bool,
    config: dict[str, Any],
    critique: bool,
) -> int:
    """Record a run starting now with `observer`, `model` and `prompt` (its version and
    hash), and its run-started event; return its id. Runs whose process died are marked
    interrupted first, so that none stays `running`."""
    mark_interrupted(conn)
    now = utcnow()
    run_id = conn.execute(
        s.Run.__table__.insert()
        .values(
            started_at=now,
            status="running",
            owner=owner,
            heartbeat_at=now,
            observer=observer,
            model=model,
            prompt_version=prompt.version,
            prompt_hash=prompt.sha256,
            dry_run=dry_run,
            config=config,
        )
        .returning(s.Run.id)
    ).scalar_one()
    events.record(
        conn,
        "run-started",
        run_id=run_id,
        data={"observer": observer, "model": model, "critique": critique},
    )
    return run_id


def record_end(conn: Connection, summary: RunSummary, error: str | None = None) -> None:
    """Record the end of run `summary.run_id`: its status and totals, `error`, and the
    run-finished (or, for a failed run, error) event."""
    sm = summary
    conn.execute(
        update(s.Run)
        .where(s.Run.id == sm.run_id)
        .values(
            ended_at=utcnow(),
            status=sm.status,
            checkpoints=sm.checkpoints,
            gated_in=sm.gated_in,
            audited=sm.audited,
            reused=sm.reused,
            corrections=sm.corrections,
            invalid=sm.invalid,
            errors=sm.errors,
            cost_usd=sm.cost_usd,
            error=error,
        )
    )
    events.record(
        conn,
        "run-finished" if sm.status != "failed" else "error",
        run_id=sm.run_id,
        subject=error,
        data={
            "status": sm.status,
            "audited": sm.audited,
            "corrections": sm.corrections,
            "critiques": sm.critiques,
            "errors": sm.errors,
            "cost_usd": sm.cost_usd,
        },
    )


def list_runs(engine: Engine, limit: int | None = 20) -> list[dict[str, Any]]:
    """Return the latest runs, newest first, after marking the killed ones interrupted."""
    r = s.Run.__table__
    with engine.begin() as conn:
        mark_interrupted(conn)
        rows = conn.execute(select(r).order_by(r.c.id.desc()).limit(limit)).mappings().all()
    out = []
    for row in rows:
        item = {k: v for k, v in row.items() if k != "config"}
        for k in ("started_at", "ended_at", "heartbeat_at"):
            item[k] = _aware(row[k]).isoformat() if row[k] is not None else None
        item["hook"] = ((row["config"] or {}).get("hook") or {}).get("agent")
        out.append(item)
    return out
