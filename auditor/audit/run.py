"""`auditor run`: gate -> format -> observe -> record, over the stored threads.

The run is idempotent and resumable: a checkpoint already answered by the same observer,
model and prompt over the same rendered thread content is never sent again, and each verdict
is committed as soon as it arrives, so a run killed at any moment loses nothing answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Engine, select

from ..errors import AuditorError, ObserverDown, StoreGone
from ..plugins import Plugins
from ..store import events, leases
from ..store import raw_answers as answers
from ..store import run_rows as runs
from ..store import schema as s
from ..store.db import (
    connection_lost,
    file_gone,
    file_identity,
    lost_store,
    retry_lost,
    upsert,
    utcnow,
)
from ..store.signal_rows import store_signals
from ..store.threads import find_thread, load_messages
from . import budget, critique
from .checkpoint_plan import formatter_for, gate_config, plan
from .checkpoints import Checkpoint, find_checkpoints
from .observe import MAX_OUTPUT_TOKENS, ObserveRequest
from .observer_choice import Choice, choose_for
from .reachability import Reachability
from .recorder import RunRecords, price_of
from .run_types import Job, RunConfig, RunInterrupted, RunSummary
from .sharing import HELD, PLAN_CHUNK, TAKEN, ThreadSharing

WAIT_FOR_HELD = 0.2  # seconds between looks at calls other workers hold (PostgreSQL)
WAIT_FOR_THREADS = 1.0  # seconds between looks at threads other workers hold (PostgreSQL)
CLAIMS_KEPT = timedelta(days=1)  # PostgreSQL: how long an unheld claims row (a done mark) is kept
CHARS_PER_TOKEN = 4  # rough estimate used only by --dry-run
DEFAULT_CONCURRENCY = 4  # calls in flight when neither the user nor the observer says
DEFAULT_TIMEOUT = 120.0  # seconds per call when neither the user nor the observer says
EST_OUTPUT_TOKENS = 80


class Auditor(RunRecords, ThreadSharing):
    """One run over the store."""

    def __init__(
        self, engine: Engine, plugins: Plugins, config: RunConfig, choice: Choice | None = None
    ):
        from .prompt import load_prompt

        self.engine, self.plugins, self.config = engine, plugins, config
        self.choice = choice or choose_for(
            plugins, config.observer, config.agents, config.allow_same_vendor
        )
        self.observer_name, self.why = self.choice.observer, self.choice.why
        self.observer = plugins.observer(self.observer_name)
        self.model = config.model or self.observer.default_model
        # A CPU model answers one call at a time: calls queued behind it only time out.
        self.concurrency = max(
            1,
            config.concurrency or getattr(self.observer, "concurrency", 0) or DEFAULT_CONCURRENCY,
        )
        self.prompt = load_prompt()
        self.critique_prompt = critique.load_critique_prompt() if config.critique else None
        self.gate_config = gate_config(config.gate)
        self.formatter = formatter_for(config.formatter, self.observer, self.prompt.text)
        self.summary = RunSummary(None, self.observer_name, self.model)
        self.owner = leases.new_owner()
        self._held: dict[str, Any] = {}  # PostgreSQL: claim key -> the connection holding it
        self._helping: set[str] = set()  # PostgreSQL: helper leases (run_share.ThreadSharing._help)
        self._waiting: list[Job] = []  # PostgreSQL: jobs another worker held when tried
        self._open: dict[str, int] = {}  # PostgreSQL: thread lease -> calls not yet made
        self._lock = threading.Lock()
        # PostgreSQL, in `execute`: threads and calls shared with other workers by row locks.
        self._share_threads = False
        self.reachability = Reachability(self.observer_name)
        self.store_file = file_identity(engine)  # SQLite: noticed if deleted mid-run
        self._heartbeat: runs.Heartbeat | None = None
        self.budget: budget.Budget | None = None
        # A CPU model on a busy machine takes minutes where an API answers in seconds.
        self.timeout = float(
            config.timeout or getattr(self.observer, "timeout", 0) or DEFAULT_TIMEOUT
        )
        self.lease = config.lease or self.timeout * 4 + 65

    # -- planning (sync, cheap) -----------------------------------------------------------
    def _threads(self) -> list[Any]:  # rows of the threads table
        if self.config.threads:
            found = [find_thread(self.engine, t) for t in self.config.threads]
            return [t for t in found if self.config.agents is None or t.agent in self.config.agents]
        t = s.Thread.__table__
        # Workers sharing the store take the threads with the most tool calls (the most
        # checkpoints) first, so that no worker starts a long thread when the others are done.
        order = (t.c.tool_call_count.desc(), t.c.id) if self._share_threads else (t.c.id,)
        q = select(t).order_by(*order)
        if self.config.agents is not None:
            q = q.where(t.c.agent.in_(self.config.agents))
        if self.config.since:
            q = q.where(t.c.ended_at >= self.config.since.astimezone(UTC).replace(tzinfo=None))
        with self.engine.connect() as conn:
            return list(conn.execute(q).all())

    def jobs(self) -> Iterator[Job]:
        """Gate every checkpoint (recording each decision) and yield the ones to send.

        On PostgreSQL, workers running at once share the threads: each takes a thread's lease
        (`leases.hold`) before planning it and keeps it until its calls are made, then marks
        it done (for the thread as it stands); a thread another worker holds, or finished
        since this run began, is skipped. Once none is left to take, the worker helps with the
        threads others hold (`_help`). Held ones are looked at again at the end: done by then,
        or left by a worker that died (their lease free), then planned here.
        """
        waiting: list = []
        for thread in self._threads():
            status = self._take_thread(thread) if self._share_threads else TAKEN
            if status == HELD:
                waiting.append(thread)
            if status == TAKEN:
                yield from self._thread_jobs(thread)
        for thread in waiting:
            yield from self._help(thread)
        while waiting:
            time.sleep(WAIT_FOR_THREADS)
            keys = {self._thread_key(t): t for t in waiting}
            gone, free = leases.unheld(self.engine, list(keys))
            waiting = [t for key, t in keys.items() if key not in gone and key not in free]
            for key in gone | free:  # done, or left by a worker that died or stopped
                status = self._take_thread(keys[key])
                if status == TAKEN:
                    yield from self._thread_jobs(keys[key])
                elif status == HELD:
                    waiting.append(keys[key])

    def _thread_jobs(self, thread) -> Iterator[Job]:
        """Plan `thread`'s checkpoints a few at a time (one transaction each), so that its first
        calls start while the rest is planned, and no transaction stays open between them.
        Shared with other workers, checkpoints they answered are passed over unrendered
        (`_passed_over`)."""
        messages = load_messages(self.engine, thread.id)
        checkpoints = find_checkpoints(thread.id, messages, self.gate_config["mode"])
        key = self._thread_key(thread)
        shared = key in self._held  # its lease is given back once its calls are made
        known = self._checkpoint_rows(thread.id) if shared else {}
        if shared:
            with self._lock:
                self._open[key] = 1  # planning counts as one call until it is over
        for start in range(0, len(checkpoints), PLAN_CHUNK):
            chunk = checkpoints[start : start + PLAN_CHUNK]
            skip = self._passed_over(chunk, known) if shared else set()
            planned = retry_lost(self._plan_chunk, chunk, skip, thread, messages)
            for job in planned:
                if job is None or job.answered is not None:
                    continue
                if shared:
                    with self._lock:
                        self._open[key] += 1
                    job.thread_lease = key
                yield job
        if shared:  # not when the run stopped early: `let_go_all` gives the lease back
            self._done_with(key)

    def _plan_chunk(self, chunk: list[Checkpoint], skip: set, thread, messages: list) -> list:
        """Plan `chunk` in one transaction (run again whole if the store's server went away)."""
        counts = self.summary.counts()
        try:
            with self.engine.begin() as conn:
                return [
                    self.plan_checkpoint(conn, cp, thread, messages)
                    for cp in chunk
                    if (cp.message_id, cp.kind) not in skip
                ]
        except Exception:
            self.summary.restore_counts(counts)  # nothing of the chunk was committed
            raise

    def plan_checkpoint(self, conn, cp: Checkpoint, thread, messages: list) -> Job | None:
        """Plan one checkpoint with `auditor.audit.checkpoint_plan.plan`, record the decision, return its job.

        Return None when the gate says no. A job whose `answered` is set needs no call: a
        verdict for the same observer, model, prompt and content exists (counted as reused).
        """
        self.summary.checkpoints += 1
        config = self.config
        p = plan(
            conn,
            self.plugins,
            cp,
            thread,
            messages,
            gate=config.gate,
            formatter=self.formatter,
            signals=config.signals,
        )
        if config.dry_run:
            # A dry run writes nothing: no checkpoint, signal or event, so the next run finds
            # the store, and logs its own decisions, as if no dry run had been.
            cp_id = self._stored_checkpoint(conn, cp)
        else:
            before = events.gate_before(conn, cp)
            cp_id = self._record_checkpoint(conn, cp, p.decision)
            store_signals(conn, cp_id, thread.id, p.signals)
            events.record_gate(
                conn,
                before,
                p.decision,
                checkpoint_id=cp_id,
                thread_id=thread.id,
                run_id=self.summary.run_id,
                signals=p.signals,
            )
        if not p.decision.audit or p.user is None:
            code = p.decision.code
            self.summary.gated_out[code] = self.summary.gated_out.get(code, 0) + 1
            return None
        self.summary.gated_in += 1
        job = Job(
            cp_id,
            thread.id,
            cp.message_id,
            p.user,
            self._input_hash(p.user),
            signals=p.signals,
            thread_native_id=thread.native_id,
        )
        if config.critique and critique.strong_signals(p.signals, config.critique_min_score):
            self.summary.critique_candidates += 1
        job.answered = self._already_answered(conn, job)
        if job.answered is not None:
            self.summary.reused += 1
            # Answered by an earlier run: its second pass may still be owed.
            return self._critique_job(job, job.answered, conn) or job
        return job

    def _input_hash(self, user: str, prompt=None) -> str:
        return hashlib.sha256(f"{(prompt or self.prompt).sha256}\0{user}".encode()).hexdigest()

    def _prompt_for(self, job: Job):
        return self.critique_prompt if job.critique_of is not None else self.prompt

    def _critique_job(self, job: Job, first: int | None, conn=None) -> Job | None:
        """Return the second-pass job owed after verdict `first`, or None.

        Owed with `--critique` when `first` is an ok, silent verdict and a signal at the
        checkpoint scored at least `critique_min_score`, unless it was already made.
        """
        if not self.config.critique or first is None or job.critique_of is not None:
            return None
        strong = critique.strong_signals(job.signals, self.config.critique_min_score)
        if not strong:
            return None
        v = s.Verdict.__table__
        with self.engine.connect() if conn is None else contextlib.nullcontext(conn) as c:
            row = c.execute(select(v.c.status, v.c.needs_correction).where(v.c.id == first)).first()
            if row is None or row.status != "ok" or row.needs_correction:
                return None
            user = critique.render(job.user, strong)
            follow = Job(
                job.checkpoint_id,
                job.thread_id,
                job.message_id,
                user,
                self._input_hash(user, self.critique_prompt),
                signals=job.signals,
                critique_of=first,
                thread_native_id=job.thread_native_id,
            )
            follow.answered = self._already_answered(c, follow)
        return None if follow.answered is not None else follow

    @staticmethod
    def _stored_checkpoint(conn, cp: Checkpoint) -> int:
        """The id of `cp` as an earlier run stored it, 0 when none did."""
        c = s.Checkpoint
        found = conn.scalar(
            select(c.id).where(
                c.thread_id == cp.thread_id,
                c.message_native_id == cp.message_id,
                c.kind == cp.kind,
            )
        )
        return found or 0

    def _record_checkpoint(self, conn, cp: Checkpoint, decision) -> int:
        values = {
            "thread_id": cp.thread_id,
            "message_native_id": cp.message_id,
            "kind": cp.kind,
            "tool_calls": cp.tool_calls,
            "file_edits": cp.file_edits,
            "gate_audit": decision.audit,
            "gate_reason": decision.reason,
            "gate_code": decision.code,
            "gated_at": utcnow(),
            "run_id": self.summary.run_id,
        }
        stmt = upsert(conn, s.Checkpoint.__table__).values(**values)
        stmt = stmt.on_conflict_do_update(
            index_elements=["thread_id", "message_native_id", "kind"],
            set_={
                k: v
                for k, v in values.items()
                if k not in ("thread_id", "message_native_id", "kind")
            },
        )
        return conn.execute(stmt.returning(s.Checkpoint.id)).scalar_one()

    def _already_answered(self, conn, job: Job) -> int | None:
        """Return the id of a verdict that answers `job` already, if any."""
        v = s.Verdict
        return conn.execute(
            select(v.id)
            .where(
                v.checkpoint_id == job.checkpoint_id,
                v.observer == self.observer_name,
                v.model == self.model,
                v.prompt_hash == self._prompt_for(job).sha256,
                v.input_hash == job.input_hash,
                v.status.in_(("ok", "invalid")),
                v.critique_of.is_(None)
                if job.critique_of is None
                else v.critique_of == job.critique_of,
            )
            .limit(1)
        ).scalar()

    # -- leases ---------------------------------------------------------------------------
    def claim(self, job: Job) -> bool:
        """Take the lease on `job`'s call; False when another run holds it or it got answered.

        The answer is checked again under the lease, because another run may have recorded
        it since this one planned.
        """
        return retry_lost(self._claim, job)

    def _claim(self, job: Job) -> bool:
        with self.engine.begin() as conn:
            if not leases.take(conn, job.claim_key, job.checkpoint_id, self.owner, self.lease):
                self.summary.busy += 1
                return False
            job.answered = self._already_answered(conn, job)
            if job.answered is not None:
                leases.release(conn, job.claim_key, self.owner)
                self.summary.reused += 1
                return False
        return True

    def release(self, job: Job) -> None:
        """Give up the lease on `job`'s call (taken by `claim`)."""
        conn = self._held.pop(job.claim_key, None)
        if conn is not None:  # taken by `_hold`
            try:
                leases.let_go(conn, job.claim_key)
            except Exception as exc:
                if not connection_lost(exc):
                    raise
                # The server ended the connection, and with it the row lock that was the
                # lease: nothing is left to give back (the row goes with `forget_old`).
            return

        def give_back() -> None:
            with self.engine.begin() as conn:
                leases.release(conn, job.claim_key, self.owner)

        retry_lost(give_back)

    async def call(self, job: Job, deadline: float | None = None) -> int | None:
        """Make the observer call of `job` under a lease and record it; return the verdict id.

        Return None when another run holds the lease or the call got answered meanwhile
        (`job.answered` then names the verdict). Past `deadline` seconds the call is
        abandoned and recorded as an error.
        """
        estimate = self._reserve_for(job)
        reservation = None
        if estimate is not None and self.budget is not None:
            reservation = await self.budget.reserve(estimate)
            if reservation is None:
                self.summary.over_budget += 1
                return None
        try:
            if not (self._hold(job) if self._share_threads else self.claim(job)):
                return None
            try:
                verdict_id = await self._call(job, deadline)
            finally:
                self.release(job)
        finally:
            if reservation is not None and self.budget is not None:
                await self.budget.release(reservation)
        follow = self._critique_job(job, verdict_id)
        if follow is not None:
            await self.call(follow, deadline)
        return verdict_id

    def _reserve_for(self, job: Job) -> float | None:
        """Return the USD to reserve for `job`'s call under the budget (None: nothing to reserve,
        no budget or, allowed with --allow-unpriced, a model without a price)."""
        if self.budget is None:
            return None
        usd = budget.estimate_usd(
            self.model,
            self.observer_name,
            self._prompt_for(job).text + job.user,
            MAX_OUTPUT_TOKENS,
        )
        return None if usd is None else float(usd)

    def set_budget(self) -> None:
        """Apply the run's spend caps (raise when the model has no price and that is not allowed)."""
        c = self.config
        self.budget = budget.for_run(
            self.engine,
            budget=c.budget,
            per_day=c.budget_per_day,
            model=self.model,
            provider=self.observer_name,
            allow_unpriced=c.allow_unpriced,
            spent=lambda: self.summary.cost_usd,
            owner=self.owner,
            lease=self.lease,
        )
        if self.budget is not None:
            prompts = [p for p in (self.prompt, self.critique_prompt) if p is not None]
            batch = bool(c.batch or c.collect)
            least = [
                budget.estimate_usd(
                    self.model, self.observer_name, p.text, MAX_OUTPUT_TOKENS, batch=batch
                )
                for p in prompts
            ]
            known = [float(usd) for usd in least if usd is not None]
            self.budget.floor = min(known) if known else None

    async def _call(self, job: Job, deadline: float | None = None) -> int:
        request = ObserveRequest(
            self._prompt_for(job).text, job.user, self.model, timeout=self.timeout
        )
        options = {"model": self.model, **self.config.observer_options}
        limit = self.timeout * 4 + 5
        if deadline is not None and deadline < limit:
            limit = deadline
        started = time.monotonic()
        try:
            result = await asyncio.wait_for(self.observer.observe(request, options), timeout=limit)
        except asyncio.CancelledError:
            # Ctrl-C: the call is given up, not waited for (nothing recorded; a resumed run
            # sends it again), and the summary says so.
            self.summary.abandoned += 1
            raise
        except Exception as exc:  # noqa: BLE001 - recorded as an error verdict; the run goes on
            took = time.monotonic() - started
            error = answers.cut_text(f"{type(exc).__name__}: {exc}", answers.PROBLEM_LIMIT)
            if isinstance(exc, TimeoutError) and took >= limit * 0.99:
                error = f"deadline exceeded: no answer within {limit:g}s"
            elif not str(exc).strip():  # an exception without a word (TimeoutError())
                what = "timed out" if isinstance(exc, TimeoutError) else "failed"
                error = (
                    f"{type(exc).__name__}: the {self.observer_name} call {what} after "
                    f"{took:.1f}s (--timeout {self.timeout:g}s), saying nothing more"
                )
            self.reachability.failed(exc, error)
            return self.record_verdict(job, None, error, took)
        self.reachability.answered()
        return self.record_verdict(job, result, None, time.monotonic() - started)

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
                or self.reachability.down is not None
                or file_gone(self.engine, self.store_file)
                or (self.budget is not None and self.budget.spent_out())
            )

        queue: asyncio.Queue[Job | None] = asyncio.Queue(maxsize=max(2, self.concurrency * 2))
        workers_n = self.concurrency
        self._share_threads = self.engine.dialect.name == "postgresql"
        self._started = utcnow()  # threads other workers finish from now on are theirs
        if self._share_threads:  # rows no worker started in the last day can need
            leases.forget_old(self.engine, datetime.now(UTC) - CLAIMS_KEPT)

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
                    await self.call(job)
                finally:
                    self._done_with(job.thread_lease)
                    self._done_helping(job)
                self.summary.finished += 1
                if progress:
                    progress(self.summary)

        await asyncio.gather(produce(), *(work() for _ in range(workers_n)))
        # Calls other workers held (PostgreSQL): once they let go, each is answered (nothing
        # to do) or free again because its worker died (made here, so that none is lost).
        limit = asyncio.Semaphore(workers_n)

        async def again(job: Job) -> None:
            async with limit:
                if not should_stop():
                    await self.call(job)

        while self._waiting and not should_stop():
            waiting, self._waiting = self._waiting, []
            await asyncio.sleep(WAIT_FOR_HELD)
            await asyncio.gather(*(again(job) for job in waiting))
        self.let_go_all()
        return self.summary

    def dry_run(self) -> RunSummary:
        """Gate and format everything, call no model, and estimate tokens, cost and time; under
        a budget count only the calls it would let start."""
        if self.config.batch or self.config.collect:
            from .batch import check

            check(self)  # refused as the run itself would be
        self.set_budget()  # refused as the run would be: a budget on a model without a price
        room = self.budget.limit if self.budget is not None else None
        batch = self.config.batch or self.config.collect
        chars = 0
        sent = 0
        expected = 0.0  # what the calls counted so far are expected to cost
        for job in self.jobs():
            if self.config.limit is not None and sent >= self.config.limit:
                break
            prompt = len(self.prompt.text) + len(job.user)
            if room is not None:
                # As the run reserves each call's worst case before it starts, against what
                # was spent: a call that does not fit is left out.
                worst = budget.estimate_usd(
                    self.model,
                    self.observer_name,
                    self.prompt.text + job.user,
                    MAX_OUTPUT_TOKENS,
                    batch=batch,
                )
                if worst is not None and expected + float(worst) > room:
                    self.summary.over_budget += 1
                    continue
                one, _ = price_of(self.model, self._guess(prompt, 1), self.observer_name, batch)
                expected += one or 0.0
            chars += prompt
            sent += 1
        self.summary.est_input_tokens = chars // CHARS_PER_TOKEN
        usage = self._guess(chars, sent)
        usd, _ = price_of(self.model, usage, self.observer_name, batch=batch)
        self.summary.est_cost_usd, self.summary.batch_price = usd, batch
        self.summary.audited = sent
        if self.summary.over_budget and self.budget is not None:
            cap = f"${self.budget.limit:.4f}"
            if self.budget.why == "--budget":
                cap = f"--budget {cap}"
            else:
                cap = f"the {cap} budget_per_day leaves today ({self.budget.why})"
            self.summary.budget_note = (
                f"{self.summary.over_budget} left out: each call's worst case would cross {cap}"
            )
        self._estimate_time(sent)
        return self.summary

    @staticmethod
    def _guess(chars: int, calls: int):
        """The usage of `calls` calls whose prompts hold `chars` characters, as a dry run guesses it."""
        from .observe import ObserverUsage

        return ObserverUsage(input=chars // CHARS_PER_TOKEN, output=EST_OUTPUT_TOKENS * calls)

    def _estimate_time(self, calls: int) -> None:
        """How long `calls` calls would take, `concurrency` at a time (a batch: not known)."""
        if self.config.batch or self.config.collect or not calls:
            return
        from .answer_times import answer_seconds

        found = answer_seconds(self.engine, self.observer, self.observer_name, self.model, 50)
        if found is None:
            return
        seconds, self.summary.est_seconds_source = found
        self.summary.est_call_seconds, self.summary.est_at_once = seconds, self.concurrency
        self.summary.est_seconds = seconds * -(-calls // self.concurrency)


def run(
    engine: Engine,
    plugins: Plugins,
    config: RunConfig,
    progress: Callable[[RunSummary], None] | None = None,
    announce: Callable[[str], None] = lambda line: print(line, file=sys.stderr),
    should_stop: Callable[[], bool] = lambda: False,
) -> RunSummary:
    """Run an audit (or a dry run) and return its summary.

    Once `should_stop()` turns true no new observer call starts; the calls in flight finish
    and are recorded, and the run is marked interrupted.
    """
    from .run_observers import merge, observer_plan

    plan = observer_plan(engine, plugins, config)
    for why in plan.refused.values():
        announce(why)
    auditors = [Auditor(engine, plugins, c, choice) for choice, c in plan.audits]
    for a in auditors:
        who = f" for {', '.join(a.config.agents)} threads" if a.config.agents else ""
        announce(f"observer: {a.observer_name}{who} ({a.why}), model {a.model}")
    if config.dry_run:
        return merge([a.dry_run() for a in auditors], plan.refused)
    for a in auditors:
        a.ensure_usable()
    done: list[RunSummary] = []
    for a in auditors:
        if config.budget is not None:  # the run's cap covers all its observers
            spent = sum(x.cost_usd for x in done)
            a.config = replace(a.config, budget=max(0.0, config.budget - spent))
        done.append(_audit(a, progress, should_stop, done, plan.refused))
        if should_stop():
            break
    return merge(done, plan.refused)


def _audit(
    auditor: Auditor,
    progress: Callable[[RunSummary], None] | None,
    should_stop: Callable[[], bool],
    before: list[RunSummary],
    refused: dict[str, str],
) -> RunSummary:
    """Make the calls of one observer's audit, recorded as a run of its own."""
    config = auditor.config
    auditor.set_budget()
    if auditor.budget is not None and auditor.budget.spent_out() and not before:
        # Planning every checkpoint only to refuse each call took minutes: say it at once.
        raise AuditorError(auditor.budget.too_small(auditor.model))
    try:
        with auditor.recording() as summary:
            if config.batch or config.collect:
                from .batch import run_batch

                run_batch(auditor, collect_only=config.collect)
            else:
                asyncio.run(auditor.execute(progress, should_stop))
                if (down := auditor.reachability.down) is not None:
                    raise ObserverDown(down)  # the run is recorded failed, with this line
            if auditor.budget is not None:
                summary.budget_note = auditor.budget.report(summary.unpriced)
            if should_stop():
                summary.status = "interrupted"
    except KeyboardInterrupt:  # recorded as interrupted; the caller gets what was done
        from .run_observers import merge

        raise RunInterrupted(merge([*before, auditor.summary], refused)) from None
    except Exception as exc:
        engine = auditor.engine
        if file_gone(engine, auditor.store_file):
            raise store_gone(engine, auditor.summary) from exc
        if connection_lost(exc):  # after `retry_lost` waited for the server to come back
            raise lost_store(exc) from exc
        raise
    if file_gone(auditor.engine, auditor.store_file):
        raise store_gone(auditor.engine, summary)
    return summary


def store_gone(engine: Engine, summary: RunSummary) -> StoreGone:
    """The one line for a SQLite store deleted while the run wrote to it."""
    return StoreGone(
        f"The store {engine.url.database} was deleted during the run: the {summary.audited} "
        f"answers of run {summary.run_id} (cost ${summary.cost_usd:.4f}) went with it. Keep the "
        "store where nothing cleans it up, then run again"
    )
