"""The planner of a run: which checkpoints need an observer call, each gated and recorded.

`Planner` walks the threads a run looks at, plans each checkpoint with
`auditor.audit.checkpoint_plan.CheckpointPlanner` (signals -> gate -> format), records the gate's decision
and yields a `Job` for each call still to make; it also says which second pass (`--critique`)
a first answer calls for. It calls no model and holds no lease: the way the run shares its
work (`auditor.audit.sharing`) decides which threads it plans.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from datetime import UTC
from typing import Any

from sqlalchemy import Connection, Engine, select

from ..plugins import Plugins
from ..store import events
from ..store import schema as s
from ..store.db import retry_lost, upsert, utcnow
from ..store.signal_rows import store_signals
from ..store.threads import find_thread, load_messages
from . import critique
from .checkpoint_plan import CheckpointPlanner, formatter_for
from .checkpoints import Checkpoint, GateDecision, find_checkpoints
from .run_types import Job, Observing, RunConfig, RunSummary

PLAN_CHUNK = 8  # checkpoints planned in one transaction


class Planner:
    """Plans the checkpoints of a run (see the module docstring)."""

    def __init__(
        self,
        engine: Engine,
        plugins: Plugins,
        config: RunConfig,
        observing: Observing,
        summary: RunSummary,
    ):
        self.engine, self.config = engine, config
        self.observing, self.summary = observing, summary
        self.checkpoints = CheckpointPlanner(
            plugins,
            gate=config.gate,
            formatter=formatter_for(config.formatter, observing.backend, observing.prompt.text),
            signals=config.signals,
        )

    def threads(self, busiest_first: bool = False) -> list[Any]:
        """The rows of the threads the run looks at; with `busiest_first`, those with the most
        tool calls (the most checkpoints) first."""
        config = self.config
        if config.threads:
            found = [find_thread(self.engine, t) for t in config.threads]
            return [t for t in found if config.agents is None or t.agent in config.agents]
        t = s.Thread.__table__
        order = (t.c.tool_call_count.desc(), t.c.id) if busiest_first else (t.c.id,)
        q = select(t).order_by(*order)
        if config.agents is not None:
            q = q.where(t.c.agent.in_(config.agents))
        if config.since:
            q = q.where(t.c.ended_at >= config.since.astimezone(UTC).replace(tzinfo=None))
        with self.engine.connect() as conn:
            return list(conn.execute(q).all())

    def thread_jobs(
        self, thread, passed_over: Callable[[list[Checkpoint]], set] | None = None
    ) -> Iterator[Job]:
        """Plan `thread`'s checkpoints a few at a time (one transaction each), so that its first
        calls start while the rest is planned, and no transaction stays open between them.
        The (message, kind) that `passed_over` returns for a chunk are left out unrendered."""
        messages = retry_lost(load_messages, self.engine, thread.id)
        checkpoints = find_checkpoints(thread.id, messages, self.checkpoints.gate_config["mode"])
        for start in range(0, len(checkpoints), PLAN_CHUNK):
            chunk = checkpoints[start : start + PLAN_CHUNK]
            skip = passed_over(chunk) if passed_over is not None else set()
            planned = retry_lost(self._plan_chunk, chunk, skip, thread, messages)
            for job in planned:
                if job is not None and job.answered is None:
                    yield job

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

    def plan_checkpoint(
        self, conn: Connection, cp: Checkpoint, thread, messages: list
    ) -> Job | None:
        """Plan one checkpoint (`CheckpointPlanner.plan`), record the decision, return its job.

        Return None when the gate says no. A job whose `answered` is set needs no call: a
        verdict for the same observer, model, prompt and content exists (counted as reused).
        """
        self.summary.checkpoints += 1
        config = self.config
        p = self.checkpoints.plan(conn, cp, thread, messages)
        if config.dry_run:
            # A dry run writes nothing: no checkpoint, signal or event, so the next run finds
            # the store, and logs its own decisions, as if no dry run had been.
            cp_id = _stored_checkpoint(conn, cp)
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
            self.observing.input_hash(p.user),
            self.observing.prompt,
            signals=p.signals,
            thread_native_id=thread.native_id,
        )
        if config.critique and critique.strong_signals(p.signals, config.critique_min_score):
            self.summary.critique_candidates += 1
        job.answered = self.observing.already_answered(conn, job)
        if job.answered is not None:
            self.summary.reused += 1
            # Answered by an earlier run: its second pass may still be owed.
            return self.critique_job(job, job.answered, conn) or job
        return job

    def critique_job(
        self, job: Job, first: int | None, conn: Connection | None = None
    ) -> Job | None:
        """Return the second-pass job owed after verdict `first`, or None.

        Owed with `--critique` when `first` is an ok, silent verdict and a signal at the
        checkpoint scored at least `critique_min_score`, unless it was already made.
        """
        if not self.config.critique or first is None or job.critique_of is not None:
            return None
        strong = critique.strong_signals(job.signals, self.config.critique_min_score)
        if not strong:
            return None
        second = self.observing.critique_prompt
        if second is None:  # loaded whenever --critique is given
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
                self.observing.input_hash(user, second),
                second,
                signals=job.signals,
                critique_of=first,
                thread_native_id=job.thread_native_id,
            )
            follow.answered = self.observing.already_answered(c, follow)
        return None if follow.answered is not None else follow

    def _record_checkpoint(self, conn: Connection, cp: Checkpoint, decision: GateDecision) -> int:
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


def _stored_checkpoint(conn: Connection, cp: Checkpoint) -> int:
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
