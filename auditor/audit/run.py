"""`auditor run`: gate -> format -> observe -> record, over the stored threads.

The run is idempotent and resumable: a checkpoint already answered by the same observer,
model and prompt over the same rendered thread content is never sent again, and each verdict
is committed as soon as it arrives, so a run killed at any moment loses nothing answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from sqlalchemy import Engine

from ..errors import AuditorError, ObserverDown
from ..plugins import Plugins
from ..store.db import connection_lost, lost_store
from .observer_audit import Auditor, audit_checkpoint
from .run_types import Job, RunConfig, RunInterrupted, RunSummary
from .sharing import sharing_for


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


def run(
    engine: Engine,
    plugins: Plugins,
    config: RunConfig,
    progress: Callable[[RunSummary], None] | None = None,
    announce: Callable[[str], None] = lambda line: print(line, file=sys.stderr),
    should_stop: Callable[[], bool] = lambda: False,
) -> RunSummary:
    """Run an audit and return its summary: for each observer (`observers`), its jobs planned
    and their calls made through `audit_checkpoint`, each verdict recorded as it comes; or, as
    `config` asks, a dry run (`auditor.audit.dry_run`) or a batch through the providers' batch
    APIs (`auditor.audit.batch`).

    Once `should_stop()` turns true no new observer call starts; the calls in flight finish
    and are recorded, and the run is marked interrupted.
    """
    from .run_observers import merge

    auditors, refused = observers(engine, plugins, config, announce, check=not config.dry_run)
    if config.dry_run:
        from .dry_run import estimate

        return merge([estimate(a) for a in auditors], refused)
    done: list[RunSummary] = []
    for auditor in auditors:
        done.append(_calls(auditor, config.budget, done, refused, progress, should_stop))
        if should_stop():
            break
    return merge(done, refused)


def _calls(
    auditor: Auditor,
    budget_of_run: float | None,
    before: list[RunSummary],
    refused: dict[str, str],
    progress: Callable[[RunSummary], None] | None,
    should_stop: Callable[[], bool],
) -> RunSummary:
    """Make one observer's calls (or submit them in batches), recorded as a run of its own."""
    config = auditor.config
    with recorded(auditor, budget_of_run, before, refused, should_stop) as summary:
        if config.batch or config.collect:
            from .batch import run_batch

            run_batch(auditor, collect_only=config.collect)
        else:
            asyncio.run(auditor.execute(progress, should_stop))
            if (down := auditor.caller.reachability.down) is not None:
                raise ObserverDown(down)  # the run is recorded failed, with this line
    return summary


def observers(
    engine: Engine,
    plugins: Plugins,
    config: RunConfig,
    announce: Callable[[str], None],
    check: bool = True,
) -> tuple[list[Auditor], dict[str, str]]:
    """One audit per observer (`run_observers.observer_plan`), each said with why it was
    chosen, and the agents none may audit; with `check`, each observer is checked usable."""
    from .run_observers import observer_plan

    plan = observer_plan(engine, plugins, config)
    for why in plan.refused.values():
        announce(why)
    sharing = sharing_for(engine, config)
    auditors = [Auditor(engine, plugins, c, choice, sharing) for choice, c in plan.audits]
    for a in auditors:
        who = f" for {', '.join(a.config.agents)} threads" if a.config.agents else ""
        announce(f"observer: {a.observing.name}{who} ({a.why}), model {a.observing.model}")
    for a in auditors if check else ():
        a.caller.ensure_usable()
    return auditors, plan.refused


@contextlib.contextmanager
def recorded(
    auditor: Auditor,
    budget_of_run: float | None,
    before: list[RunSummary],
    refused: dict[str, str],
    should_stop: Callable[[], bool],
) -> Iterator[RunSummary]:
    """One observer's audit, recorded as a run of its own around the block: under its share of
    the run's budget (what the observers `before` it left), interrupted when stopped, and one
    clear error when the store went away under it."""
    if budget_of_run is not None:  # the run's cap covers all its observers
        left = max(0.0, budget_of_run - sum(x.cost_usd for x in before))
        auditor.config = auditor.recorder.config = replace(auditor.config, budget=left)
    auditor.set_budget()
    cap = auditor.caller.budget
    if cap is not None and cap.spent_out() and not before:
        # Planning every checkpoint only to refuse each call took minutes: say it at once.
        raise AuditorError(cap.too_small(auditor.observing.model))
    failed: Exception | None = None
    try:
        with auditor.recorder.recording() as summary:
            yield summary
            if cap is not None:
                summary.budget_note = cap.report(summary.unpriced)
            if should_stop():
                summary.status = "interrupted"
    except KeyboardInterrupt:  # recorded as interrupted; the caller gets what was done
        from .run_observers import merge

        raise RunInterrupted(merge([*before, auditor.summary], refused)) from None
    except Exception as exc:  # noqa: BLE001 - raised again below, or as what it means
        failed = exc
    if (gone := auditor.recorder.store_gone()) is not None:
        raise gone from failed
    if failed is not None:
        if connection_lost(failed):  # after `retry_lost` waited for the server to come back
            raise lost_store(failed) from failed
        raise failed
