"""One observer's audit over the store, the one path from a planned checkpoint to its stored
verdict (`audit_checkpoint`), and one checkpoint audited at once (`CheckpointNow`, what the
live hooks do at an agent's event).

An `Auditor` is put together from its parts (`planner`, `caller`, `recorder` and the work
sharing it is given); `auditor run` (`auditor.audit.run`), the batch run, the dry run, the live
hooks, `auditor eval` and the schedule all make their audits from it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from sqlalchemy import Engine

from ..errors import AuditorError
from ..plugins import Plugins
from ..store import leases
from . import budget, critique
from .caller import Caller
from .observer_choice import Choice, choose_for
from .planner import Planner
from .recorder import Recorder
from .run_types import Job, Observing, RunConfig, RunSummary
from .sharing import LocalSharing, Sharing, WorkSharing

WAIT_FOR_HELD = 0.2  # seconds between looks at calls other workers hold (PostgreSQL)
DEFAULT_CONCURRENCY = 4  # calls in flight when neither the user nor the observer says


class Auditor:
    """One observer's audit over the store, made of its parts: the planner (which checkpoints
    need a call), the caller (the observer call, its budget and timeout), the recorder (the run
    and its verdicts) and the way the work is shared with other runs on the same store
    (`sharing`: by expiring leases unless the caller gives another way)."""

    def __init__(
        self,
        engine: Engine,
        plugins: Plugins,
        config: RunConfig,
        choice: Choice | None = None,
        sharing: Sharing = LocalSharing,
    ):
        from .prompt import load_prompt

        self.engine, self.plugins, self.config = engine, plugins, config
        self.choice = choice or choose_for(
            plugins, config.observer, config.agents, config.allow_same_vendor
        )
        self.why = self.choice.why
        backend = plugins.observer(self.choice.observer)
        self.observing = Observing(
            self.choice.observer,
            backend,
            config.model or backend.default_model,
            load_prompt(),
            critique.load_critique_prompt() if config.critique else None,
            self.choice.same_vendor,
        )
        # A CPU model answers one call at a time: calls queued behind it only time out.
        self.concurrency = max(
            1, config.concurrency or getattr(backend, "concurrency", 0) or DEFAULT_CONCURRENCY
        )
        self.summary = RunSummary(None, self.observing.name, self.observing.model)
        self.owner = leases.new_owner()
        self.planner = Planner(engine, plugins, config, self.observing, self.summary)
        self.recorder = Recorder(engine, config, self.observing, self.summary, self.owner)
        self.caller = Caller(
            self.observing, config.observer_options, config.timeout, self.summary, self.recorder
        )
        self.lease = config.lease or self.caller.timeout * 4 + 65
        self.sharing: WorkSharing = sharing(
            engine, self.observing, self.summary, self.owner, self.lease
        )

    def jobs(self) -> Iterator[Job]:
        """Gate every checkpoint (recording each decision) and yield the ones to send."""
        return self.sharing.jobs(self.planner)

    def set_budget(self) -> None:
        """Apply the run's spend caps (raise when the model has no price and that is not allowed)."""
        c, o = self.config, self.observing
        if c.budget is None and c.budget_per_day is None:
            self.caller.budget = None  # no cap: nothing is priced before the calls
            return
        prompts = [p for p in (o.prompt, o.critique_prompt) if p is not None]
        self.caller.budget = budget.for_run(
            self.engine,
            budget=c.budget,
            per_day=c.budget_per_day,
            least=[self.caller.worst_case(p.text, batch=c.batch or c.collect) for p in prompts],
            model=o.model,
            allow_unpriced=c.allow_unpriced,
            spent=lambda: self.summary.cost_usd,
            owner=self.owner,
            lease=self.lease,
        )

    def abandon(self, job: Job, error: str, took: float, status: str = "error") -> int:
        """Record the call of `job`, cut short after `took` seconds, and release its lease.

        `status` is `error` for a call that failed (a deadline passed) or `cancelled` for one
        given up on purpose (the user wrote meanwhile); return the verdict id.
        """
        verdict_id = self.recorder.record_verdict(job, None, error, took, status)
        self.sharing.release(job)
        return verdict_id

    async def execute(
        self,
        progress: Callable[[RunSummary], None] | None = None,
        asked_to_stop: Callable[[], bool] = lambda: False,
    ) -> RunSummary:
        """Make the calls of `jobs()`; once `asked_to_stop()` is true, the observer is found
        down (`reachability`) or the store's file deleted, no new call starts."""

        def should_stop() -> bool:
            return (
                asked_to_stop()
                or self.caller.reachability.down is not None
                or self.recorder.store_gone() is not None
                or (self.caller.budget is not None and self.caller.budget.spent_out())
            )

        queue: asyncio.Queue[Job | None] = asyncio.Queue(maxsize=max(2, self.concurrency * 2))
        workers_n = self.concurrency

        async def produce() -> None:
            sent = 0
            jobs = self.jobs()
            while not should_stop() and (self.config.limit is None or sent < self.config.limit):
                # Gate and format in a worker thread, so that answers keep being handled (and
                # new calls started) while the next checkpoints are prepared.
                job = await asyncio.to_thread(next, jobs, None)
                if job is None:
                    break
                await queue.put(job)
                sent += 1
                self.summary.queued = sent
                if progress:
                    progress(self.summary)
            self.summary.planning = False
            if progress:
                progress(self.summary)
            for _ in range(workers_n):
                await queue.put(None)

        async def work() -> None:
            while (job := await queue.get()) is not None:
                if should_stop():
                    continue
                try:
                    await audit_checkpoint(self, job)
                finally:
                    self.sharing.done(job)
                self.summary.finished += 1
                if progress:
                    progress(self.summary)

        try:
            await asyncio.gather(produce(), *(work() for _ in range(workers_n)))
        except BaseException:
            # The planning thread must end for the run to end (asyncio waits for it): it
            # stops waiting for other workers' threads.
            self.sharing.stop()
            raise
        # Calls other workers held (PostgreSQL): once they let go, each is answered (nothing
        # to do) or free again because its worker died (made here, so that none is lost).
        limit = asyncio.Semaphore(workers_n)

        async def again(job: Job) -> None:
            async with limit:
                if not should_stop():
                    await audit_checkpoint(self, job)

        while (waiting := self.sharing.held_elsewhere()) and not should_stop():
            await asyncio.sleep(WAIT_FOR_HELD)
            await asyncio.gather(*(again(job) for job in waiting))
        self.sharing.let_go_all()
        return self.summary


async def audit_checkpoint(
    audit: Auditor, job: Job, *, deadline: float | None = None
) -> int | None:
    """Make the observer call of a planned checkpoint and record its verdict; return its id.

    The one path from a job to a stored verdict, for `auditor run`, the Stop hook and the live
    worker alike: reserve the call's worst case under the budget, take the call's lease, ask
    the observer (within `deadline` seconds, when given) and record what came back, give the
    lease and the reservation back; then the second pass it calls for (`--critique`).

    Return None when the budget has no room for it, another run holds its lease, or it got
    answered meanwhile (`job.answered` then names the verdict).
    """
    reservation = await audit.caller.reserve_for(job)
    if reservation is False:
        return None
    try:
        if not audit.sharing.hold(job):
            return None
        try:
            verdict_id = await audit.caller.call(job, deadline)
        finally:
            audit.sharing.release(job)
    finally:
        await audit.caller.give_back(reservation)
    follow = audit.planner.critique_job(job, verdict_id)
    if follow is not None:
        await audit_checkpoint(audit, follow, deadline=deadline)
    return verdict_id


class CheckpointNow:
    """One checkpoint audited at once, as a run of its own: what the live hooks do at an
    agent's event (the `--sync` hook in its own process, the worker for each event it serves).

    `audit` records the run, plans the checkpoint (the gate's decision is recorded), checks the
    observer only when a call is due and makes it through `audit_checkpoint`. With a verdict the
    run is left open (the hook delivers it, then finishes the run); every other outcome finishes
    it here. The call under way is known, so that a hook cut short records it (`cut_short`).
    """

    def __init__(self, engine: Engine, plugins: Plugins, config: RunConfig):
        self.auditor = Auditor(engine, plugins, config)
        self.job: Job | None = None  # the observer call under way
        self.started = 0.0
        self.call_seconds = 0.0  # how long the call took, once made

    async def audit(
        self, cp, thread, messages: list, note: dict, deadline: Callable[[], float]
    ) -> Checked:
        """Audit `cp` of `thread`; `deadline()` gives the seconds the call may take (or raises
        when none are left), asked just before the call."""
        a = self.auditor
        a.recorder.start_run(note)
        checked = await self._verdict(cp, thread, messages, deadline)
        if checked.verdict_id is None:
            a.recorder.finish_run(*(("failed", checked.why) if checked.failed else ("done",)))
        return checked

    async def _verdict(self, cp, thread, messages: list, deadline: Callable[[], float]) -> Checked:
        a = self.auditor
        with a.engine.begin() as conn:
            job = a.planner.plan_checkpoint(conn, cp, thread, messages)
        if job is None:
            return Checked(None, f"gate: {next(iter(a.summary.gated_out), 'gated out')}")
        if job.answered is None:
            try:
                a.caller.ensure_usable()  # only now: a gated-out stop never needs the SDK
            except AuditorError as exc:
                return Checked(None, str(exc), failed=True)
            self.job, self.started = job, time.monotonic()
            job.answered = await audit_checkpoint(a, job, deadline=deadline()) or job.answered
            self.job, self.call_seconds = None, self.took()
        if job.answered is None and a.summary.over_budget:
            return Checked(None, "the call does not fit in the budget")
        if job.answered is None:
            return Checked(None, "another auditor process is auditing this checkpoint")
        return Checked(job.answered)

    def took(self) -> float:
        """Seconds since the call under way started."""
        return time.monotonic() - self.started

    def cut_short(self, error: str, status: str = "error") -> int | None:
        """Record the call under way as cut short (`error`; `cancelled` when given up on
        purpose) and return the verdict id; None when no call is under way or its verdict was
        stored already: a deadline can pass after the observer's answer was recorded and before
        the call was noted done, and that paid answer is the checkpoint's verdict."""
        job, self.job = self.job, None
        if job is None or self._stored(job):
            return None
        return self.auditor.abandon(job, error, self.took(), status)

    def _stored(self, job: Job) -> bool:
        from sqlalchemy import select

        from ..store import schema as s

        v = s.Verdict.__table__.c
        with self.auditor.engine.connect() as conn:
            found = conn.execute(
                select(v.id).where(
                    v.run_id == self.auditor.summary.run_id,
                    v.checkpoint_id == job.checkpoint_id,
                    v.critique_of.is_(None)
                    if job.critique_of is None
                    else v.critique_of == job.critique_of,
                )
            ).first()
        return found is not None


@dataclass
class Checked:
    """What auditing one checkpoint at once came to: its verdict, or why there is none."""

    verdict_id: int | None
    why: str = ""
    failed: bool = False  # the observer cannot be used
