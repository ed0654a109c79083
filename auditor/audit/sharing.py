"""How `auditor run` workers on one PostgreSQL store share the work, without a coordinator.

`ThreadSharing` is the part of `auditor.audit.run.Auditor` that holds leases (`auditor.store.leases`): a
worker takes a thread's lease before planning it and gives it back, marked done, once its calls
are made; a call is made under a lease of its own, a row lock taken with SKIP LOCKED and held
by a connection of its own, so a worker that dies frees its work at once. A worker with no
thread left to take helps with the threads others hold, from their last checkpoint back.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import select

from ..store import leases
from ..store import schema as s
from ..store.db import connection_lost, retry_lost
from ..store.threads import load_messages
from .checkpoints import find_checkpoints
from .run_types import Job, RunSummary

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from .prompt import Prompt

PLAN_CHUNK = 8  # checkpoints planned in one transaction
TAKEN, HELD, DONE = "taken", "held", "done"  # what became of a thread's lease


class ThreadSharing:
    """The leases of a run's threads and calls (mixed into `Auditor`, which sets these)."""

    engine: Engine
    summary: RunSummary
    owner: str
    observer_name: str
    model: str
    prompt: Prompt
    gate_config: dict[str, Any]
    _held: dict[str, Any]  # lease key -> the connection holding its row lock
    _helping: set[str]  # helper leases taken (`_help`), until their calls are over
    lease: float  # seconds an expiring lease lasts
    _open: dict[str, int]  # thread lease -> calls not yet made
    _waiting: list[Job]  # calls another worker held when tried
    _lock: threading.Lock
    _started: datetime
    plan_checkpoint: Any  # Auditor.plan_checkpoint
    _already_answered: Any  # Auditor._already_answered

    def _help(self, thread) -> Iterator[Job]:
        """The calls of a thread another worker holds that nobody has made or taken yet, from
        its last checkpoint back (its holder goes from the first on), so that a long thread is
        not left to one worker. Checkpoints gated out, answered or held are passed over
        unrendered, and helpers take the rest one each; a call is still made only under its
        own lock (`_hold`)."""
        thread_key = self._thread_key(thread)
        gone, free = leases.unheld(self.engine, [thread_key])
        if gone or free:  # finished, or left by a worker that died: `jobs` takes it over
            return
        messages = load_messages(self.engine, thread.id)
        checkpoints = find_checkpoints(thread.id, messages, self.gate_config["mode"])
        known = self._checkpoint_rows(thread.id)
        last_first = list(reversed(checkpoints))
        for start in range(0, len(last_first), PLAN_CHUNK):
            chunk = last_first[start : start + PLAN_CHUNK]
            skip = self._passed_over(chunk, known, helping=True)
            for cp in chunk:
                if (cp.message_id, cp.kind) in skip:
                    continue
                # An expiring lease (no connection held): only helpers look at it, and the
                # holder of the thread makes whatever a helper that died left.
                at = f"help\0{thread_key}\0{cp.message_id}\0{cp.kind}"
                key = hashlib.sha256(at.encode()).hexdigest()
                with self.engine.begin() as conn:
                    if not leases.take(conn, key, None, self.owner, self.lease):
                        continue  # another helper took it
                with self.engine.begin() as conn:  # one checkpoint a transaction: no lock waits
                    job = self.plan_checkpoint(conn, cp, thread, messages)
                if job is None or job.answered is not None:
                    self._let_go_help(key)
                    continue
                job.helping = key
                with self._lock:
                    self._helping.add(key)  # until its call is over (`_done_helping`)
                yield job

    def _checkpoint_rows(self, thread_id: int) -> dict[tuple[str, str], Any]:
        """The thread's recorded checkpoints by (message, kind): id and the gate's decision."""
        c = s.Checkpoint.__table__
        q = select(c.c.id, c.c.message_native_id, c.c.kind, c.c.gate_audit)
        with self.engine.connect() as conn:
            rows = conn.execute(q.where(c.c.thread_id == thread_id)).all()
        return {(r.message_native_id, r.kind): r for r in rows}

    def _passed_over(self, chunk: list, known: dict, helping: bool = False) -> set:
        """The (message, kind) of `chunk`'s checkpoints other workers answered since this run
        began: no need to render them. Helping, also those whose call a worker holds now and
        those the gate held back (the holder of the thread makes a held call that its worker
        dies before making). Two statements a chunk, a fraction of rendering one checkpoint."""
        rows = [
            known[(cp.message_id, cp.kind)] for cp in chunk if (cp.message_id, cp.kind) in known
        ]
        ids = [r.id for r in rows]
        v = s.Verdict
        with self.engine.connect() as conn:
            answered = set(
                conn.execute(
                    select(v.checkpoint_id).where(
                        v.checkpoint_id.in_(ids),
                        v.observer == self.observer_name,
                        v.model == self.model,
                        v.prompt_hash == self.prompt.sha256,
                        v.status.in_(("ok", "invalid")),
                        v.critique_of.is_(None),
                        v.created_at >= self._started,
                    )
                ).scalars()
            )
        if helping:
            answered |= leases.taken(self.engine, ids)
        return {
            (r.message_native_id, r.kind)
            for r in rows
            if r.id in answered or (helping and not r.gate_audit)
        }

    def _done_helping(self, job: Job) -> None:
        """Give back the helper's lease on `job`'s checkpoint (taken in `_help`)."""
        if job.helping:
            with self._lock:
                ours = job.helping in self._helping
                self._helping.discard(job.helping)
            if ours:
                self._let_go_help(job.helping)

    def _let_go_help(self, key: str) -> None:
        with self.engine.begin() as conn:
            leases.release(conn, key, self.owner)

    def _thread_key(self, thread) -> str:
        """The thread as it stands (its messages) with this run's observer, model and prompt."""
        text = (
            f"thread\0{thread.id}\0{thread.message_count}\0{thread.ended_at}\0"
            f"{self.observer_name}\0{self.model}\0{self.prompt.sha256}"
        )
        return hashlib.sha256(text.encode()).hexdigest()

    def _take_thread(self, thread) -> str:
        """TAKEN (its lease is ours now), HELD (another worker has it) or DONE (by another
        worker, a moment ago)."""
        key = self._thread_key(thread)
        conn = retry_lost(leases.hold, self.engine, key, None, self.owner)
        if conn is None:
            return HELD
        if leases.is_done(conn, key, self._started):
            conn.close()
            return DONE
        self._held[key] = conn
        return TAKEN

    def _done_with(self, key: str | None) -> None:
        """One call of the thread leased as `key` is over: give the lease back after the last."""
        if key is None:
            return
        with self._lock:
            self._open[key] -= 1
            last = self._open[key] <= 0
            conn = self._held.pop(key, None) if last else None
        if conn is not None:
            try:
                leases.finish(conn, key)
            except Exception as exc:
                if not connection_lost(exc):
                    raise
                # The server ended the lease's connection (a restart): the lock went with it;
                # the done mark is written on a new one once the server is back.
                retry_lost(lambda: leases.finish(self.engine.connect(), key))

    def let_go_all(self) -> None:
        """Give back every lease still held (a run stopped early)."""
        with self._lock:
            held, self._held = self._held, {}
            helping, self._helping = self._helping, set()
        for key, conn in held.items():
            try:
                leases.let_go(conn, key)
            except Exception as exc:
                if not connection_lost(exc):
                    raise  # else the lock, the lease itself, ended with the connection
        for key in helping:
            self._let_go_help(key)

    def _hold(self, job: Job) -> bool:
        """`claim` for a call on PostgreSQL: a row lock taken with SKIP LOCKED, held through the call
        (see `leases.hold`). A job another worker holds waits in `_waiting` and is tried again
        once the rest is done: answered by then, or freed by a worker that died."""
        conn = retry_lost(leases.hold, self.engine, job.claim_key, job.checkpoint_id, self.owner)
        if conn is None:
            self.summary.busy += 1
            if not job.helping:  # the holder of a thread being helped makes what is left
                self._waiting.append(job)
            return False
        job.answered = self._already_answered(conn, job)
        if job.answered is not None:
            leases.let_go(conn, job.claim_key)
            self.summary.reused += 1
            return False
        self._held[job.claim_key] = conn
        return True
