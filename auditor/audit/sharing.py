"""How a run shares its work with the other runs on the same store: a strategy passed in.

The run is given the strategy when it is made (`sharing_for` picks it for `auditor run`), and
the planner and the calls only ever ask it through `WorkSharing`: there is no branch on the
store's kind anywhere else.

Every run takes a lease on each observer call before making it, so that two runs never pay
for the same answer; leases are taken and given back through `auditor.store.leases.Leases`,
which retries each statement while a restarted server comes back. How the threads are shared
differs by store:

- `LocalSharing` (SQLite, and every run that is not `auditor run` on PostgreSQL): threads in
  the order of their ids, each call under an expiring lease in the claims table;
- `LeasedSharing` (`auditor run` on PostgreSQL): workers share the threads without a
  coordinator. A worker takes a thread's lease before planning it and gives it back, marked
  done, once its calls are made; a call is made under a lease of its own, a row lock taken with
  SKIP LOCKED and held by a connection of its own, so a worker that dies frees its work at once.
  A worker with no thread left to take helps with the threads others hold, from their last
  checkpoint back.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from sqlalchemy import Connection, select

from ..store import leases
from ..store import schema as s
from ..store.db import retry_lost, utcnow
from ..store.threads import load_messages
from .checkpoints import find_checkpoints
from .run_types import Job, Observing, RunConfig, RunSummary

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from .planner import Planner

TAKEN, HELD, DONE = "taken", "held", "done"  # what became of a thread's lease
WAIT_FOR_THREADS = 1.0  # seconds between looks at threads other workers hold
CLAIMS_KEPT = timedelta(days=1)  # how long an unheld claims row (a done mark) is kept


class WorkSharing(Protocol):
    """What the planner and the calls of a run ask of the way it shares work."""

    busiest_first: bool  # plan the threads with the most tool calls first

    def jobs(self, planner: Planner) -> Iterator[Job]:
        """The jobs of the threads this run takes, planned by `planner`."""
        ...

    def hold(self, job: Job) -> bool:
        """Take the lease on `job`'s call; False when another run holds it or it got answered
        (counted in the summary as busy or reused)."""
        ...

    def release(self, job: Job) -> None:
        """Give back the lease on `job`'s call."""
        ...

    def done(self, job: Job) -> None:
        """`job`'s call is over (made, or passed over): give back what it kept held."""
        ...

    def let_go_all(self) -> None:
        """Give back every lease still held (a run stopped early)."""
        ...

    def stop(self) -> None:
        """The run is over (it failed or was stopped): `jobs` waits for nothing more. Called
        from another thread than the one running `jobs`."""
        ...

    def held_elsewhere(self) -> list[Job]:
        """The calls another worker held when this run tried them, each given once: tried
        again once the rest is done (answered by then, or freed by a worker that died)."""
        ...


# What makes a run's sharing, from the run's parts: the store, what it observes with, its
# summary (counting busy and reused calls), its owner name and its leases' seconds.
Sharing = Callable[["Engine", Observing, RunSummary, str, float], WorkSharing]


class LocalSharing:
    """Threads in id order; each call under an expiring lease (the claims table)."""

    busiest_first = False

    def __init__(
        self, engine: Engine, observing: Observing, summary: RunSummary, owner: str, lease: float
    ):
        self.engine, self.observing, self.summary = engine, observing, summary
        self.owner, self.lease = owner, lease
        self.leases = leases.Leases(engine, owner, lease)

    def jobs(self, planner: Planner) -> Iterator[Job]:
        for thread in planner.threads(self.busiest_first):
            yield from planner.thread_jobs(thread)

    def hold(self, job: Job) -> bool:
        """The answer is checked again under the lease: another run may have recorded it
        since this one planned."""
        return retry_lost(self._claim, job)

    def _claim(self, job: Job) -> bool:
        with self.engine.begin() as conn:
            if not leases.take(conn, job.claim_key, job.checkpoint_id, self.owner, self.lease):
                self.summary.busy += 1
                return False
            job.answered = self.observing.already_answered(conn, job)
            if job.answered is not None:
                leases.release(conn, job.claim_key, self.owner)
                self.summary.reused += 1
                return False
        return True

    def release(self, job: Job) -> None:
        self.leases.give_back(job.claim_key)

    def done(self, job: Job) -> None:
        pass

    def let_go_all(self) -> None:
        pass

    def stop(self) -> None:
        pass  # its jobs never wait for another run

    def held_elsewhere(self) -> list[Job]:
        return []  # a call another run holds is left to it


class LeasedSharing:
    """Threads and calls shared with other workers by row locks (PostgreSQL)."""

    busiest_first = True  # so that no worker starts a long thread when the others are done

    def __init__(
        self, engine: Engine, observing: Observing, summary: RunSummary, owner: str, lease: float
    ):
        self.engine, self.observing, self.summary = engine, observing, summary
        self.leases = leases.Leases(engine, owner, lease)
        self._waiting: list[Job] = []  # calls another worker held when tried (`hold`)
        self._held: dict[str, Connection] = {}  # lease key -> the connection holding its row lock
        self._helping: set[str] = set()  # helper leases taken (`_help`), until their calls are over
        self._open: dict[str, int] = {}  # thread lease -> calls not yet made
        self._lock = threading.Lock()
        self._started = utcnow()  # threads other workers finish from now on are theirs
        # Set when the run is over: `jobs` stops waiting for threads other workers hold. A
        # run whose calls failed would otherwise never end: asyncio waits for the thread that
        # runs `jobs`, and that thread would wait for the other workers, which may wait for
        # the leases this run still holds.
        self._stopped = threading.Event()
        # Rows no worker started in the last day can need.
        leases.forget_old(engine, datetime.now(UTC) - CLAIMS_KEPT)

    def jobs(self, planner: Planner) -> Iterator[Job]:
        """Each thread is planned under its lease (`leases.hold`), kept until its calls are
        made, then marked done (for the thread as it stands); a thread another worker holds,
        or finished since this run began, is skipped. Once none is left to take, the worker
        helps with the threads others hold (`_help`). Held ones are looked at again at the end:
        done by then, or left by a worker that died (their lease free), then planned here."""
        waiting: list = []
        for thread in planner.threads(self.busiest_first):
            status = self._take_thread(thread)
            if status == HELD:
                waiting.append(thread)
            if status == TAKEN:
                yield from self._thread_jobs(planner, thread)
        for thread in waiting:
            yield from self._help(planner, thread)
        while waiting and not self._stopped.wait(WAIT_FOR_THREADS):
            keys = {self._thread_key(t): t for t in waiting}
            gone, free = self.leases.unheld(list(keys))
            waiting = [t for key, t in keys.items() if key not in gone and key not in free]
            for key in gone | free:  # done, or left by a worker that died or stopped
                status = self._take_thread(keys[key])
                if status == TAKEN:
                    yield from self._thread_jobs(planner, keys[key])
                elif status == HELD:
                    waiting.append(keys[key])

    def _thread_jobs(self, planner: Planner, thread) -> Iterator[Job]:
        """The thread's jobs, under its lease, given back once its calls are made;
        checkpoints other workers answered are passed over unrendered (`_passed_over`)."""
        key = self._thread_key(thread)
        known = self._checkpoint_rows(thread.id)
        with self._lock:
            self._open[key] = 1  # planning counts as one call until it is over
        for job in planner.thread_jobs(thread, lambda chunk: self._passed_over(chunk, known)):
            with self._lock:
                self._open[key] += 1
            job.thread_lease = key
            yield job
        # Not reached when the run stopped early: `let_go_all` gives the lease back.
        self._done_with(key)

    def _help(self, planner: Planner, thread) -> Iterator[Job]:
        """The calls of a thread another worker holds that nobody has made or taken yet, from
        its last checkpoint back (its holder goes from the first on), so that a long thread is
        not left to one worker. Checkpoints gated out, answered or held are passed over
        unrendered, and helpers take the rest one each; a call is still made only under its
        own lock (`hold`)."""
        from .planner import PLAN_CHUNK

        thread_key = self._thread_key(thread)
        gone, free = self.leases.unheld([thread_key])
        if gone or free:  # finished, or left by a worker that died: `jobs` takes it over
            return
        messages = retry_lost(load_messages, self.engine, thread.id)
        checkpoints = find_checkpoints(thread.id, messages, planner.checkpoints.gate_config["mode"])
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
                if not self.leases.take(key):
                    continue  # another helper took it
                job = retry_lost(self._plan_one, planner, cp, thread, messages)
                if job is None or job.answered is not None:
                    self.leases.give_back(key)
                    continue
                job.helping = key
                with self._lock:
                    self._helping.add(key)  # until its call is over (`done`)
                yield job

    def _plan_one(self, planner: Planner, cp, thread, messages: list) -> Job | None:
        counts = self.summary.counts()
        try:
            with self.engine.begin() as conn:  # one checkpoint a transaction: no lock waits
                return planner.plan_checkpoint(conn, cp, thread, messages)
        except Exception:
            self.summary.restore_counts(counts)  # nothing of it was committed
            raise

    def _checkpoint_rows(self, thread_id: int) -> dict[tuple[str, str], Any]:
        """The thread's recorded checkpoints by (message, kind): id and the gate's decision
        (read again while a restarted server comes back, as every statement here)."""
        return retry_lost(self._read_checkpoint_rows, thread_id)

    def _read_checkpoint_rows(self, thread_id: int) -> dict[tuple[str, str], Any]:
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
        answered = retry_lost(self._answered, ids)
        if helping:
            answered |= self.leases.taken(ids)
        return {
            (r.message_native_id, r.kind)
            for r in rows
            if r.id in answered or (helping and not r.gate_audit)
        }

    def _answered(self, ids: list[int]) -> set[int]:
        v, o = s.Verdict, self.observing
        with self.engine.connect() as conn:
            return set(
                conn.execute(
                    select(v.checkpoint_id).where(
                        v.checkpoint_id.in_(ids),
                        v.observer == o.name,
                        v.model == o.model,
                        v.prompt_hash == o.prompt.sha256,
                        v.status.in_(("ok", "invalid")),
                        v.critique_of.is_(None),
                        v.created_at >= self._started,
                    )
                ).scalars()
            )

    def done(self, job: Job) -> None:
        self._done_with(job.thread_lease)
        if job.helping:  # give back the helper's lease on its checkpoint (taken in `_help`)
            with self._lock:
                ours = job.helping in self._helping
                self._helping.discard(job.helping)
            if ours:
                self.leases.give_back(job.helping)

    def _thread_key(self, thread) -> str:
        """The thread as it stands (its messages) with this run's observer, model and prompt."""
        o = self.observing
        text = (
            f"thread\0{thread.id}\0{thread.message_count}\0{thread.ended_at}\0"
            f"{o.name}\0{o.model}\0{o.prompt.sha256}"
        )
        return hashlib.sha256(text.encode()).hexdigest()

    def _take_thread(self, thread) -> str:
        """TAKEN (its lease is ours now), HELD (another worker has it) or DONE (by another
        worker, a moment ago)."""
        key = self._thread_key(thread)
        conn = self.leases.hold(key)
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
            self.leases.finish(conn, key)

    def let_go_all(self) -> None:
        with self._lock:
            held, self._held = self._held, {}
            helping, self._helping = self._helping, set()
        for key, conn in held.items():
            self.leases.let_go(conn, key)
        for key in helping:
            self.leases.give_back(key)

    def hold(self, job: Job) -> bool:
        """A row lock taken with SKIP LOCKED, held through the call (see `leases.hold`). A job
        another worker holds waits (`held_elsewhere`) and is tried again once the rest is done:
        answered by then, or freed by a worker that died."""
        conn = self.leases.hold(job.claim_key, job.checkpoint_id)
        if conn is None:
            self.summary.busy += 1
            if not job.helping:  # the holder of a thread being helped makes what is left
                self._waiting.append(job)
            return False
        job.answered = self.observing.already_answered(conn, job)
        if job.answered is not None:
            self.leases.let_go(conn, job.claim_key)
            self.summary.reused += 1
            return False
        self._held[job.claim_key] = conn
        return True

    def release(self, job: Job) -> None:
        conn = self._held.pop(job.claim_key, None)
        if conn is None:  # an expiring lease
            self.leases.give_back(job.claim_key)
            return
        self.leases.let_go(conn, job.claim_key)

    def stop(self) -> None:
        self._stopped.set()

    def held_elsewhere(self) -> list[Job]:
        waiting, self._waiting = self._waiting, []
        return waiting


def sharing_for(engine: Engine, config: RunConfig) -> Sharing:
    """The sharing of `auditor run`'s calls: by row locks on PostgreSQL, where workers on
    several machines share one store; by expiring leases on SQLite. A dry run and a batch run
    take no thread: they plan every thread, as one run at a time does."""
    calls = not (config.dry_run or config.batch or config.collect)
    return LeasedSharing if calls and engine.dialect.name == "postgresql" else LocalSharing
