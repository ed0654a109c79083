"""`auditor run --batch`: the gated checkpoints through the providers' batch APIs.

A batch run first collects: every batch of this observer and model that the store knows as
pending is polled, and a finished one has each answer recorded as a verdict (with its usage, at
the batch price, see `auditor.pricing.model_prices`); a request the batch did not answer (an error, expired,
cancelled) is recorded as an error verdict, which the next run sends again. Then (unless
`--collect`) it plans like any run and submits the checkpoints that still need an answer, in
batches of at most `batch_size` requests and BATCH_MAX_BYTES of prompt.

Nothing is billed twice:
- a checkpoint already answered, or waiting in a pending batch, is not submitted again;
- a batch is recorded (state `submitting`, with a unique label) before the provider is asked,
  and its provider id once the provider answers; when a run stops in between, the next run
  asks the provider for the batch by its label (Gemini's display name; for Anthropic, which
  names no batch, the only batch of that size created since) before anything is sent again;
- answers are recorded once: a request keeps the id of its verdict, and a collect stopped
  half-way finds the verdicts it already made.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from datetime import UTC, timedelta
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import func, or_, select, update

from ..errors import AuditorError, UnknownName
from ..store import schema as s
from ..store.db import utcnow
from .observe import BatchItem, BatchObserver, ObserveRequest
from .run_types import Job

if TYPE_CHECKING:
    from .observer_audit import Auditor

BATCH_MAX_BYTES = 15_000_000  # Gemini takes inline batches up to 20 MB
DEFAULT_BATCH_SIZE = 1000
OPEN = ("submitting", "pending")
METHODS = ("submit_batch", "find_batch", "poll_batch", "batch_answers")


@dataclass
class BatchReport:
    """What a batch run did, for its summary."""

    submitted: int = 0  # checkpoints sent in new batches
    batches: list[str] = field(default_factory=list)  # provider ids of the new batches
    collected: int = 0  # answers recorded from finished batches
    collected_usd: float = 0.0
    interactive_usd: float = 0.0  # what the collected answers would have cost one by one
    pending: int = 0  # checkpoints still waiting in unfinished batches
    waiting: int = 0  # checkpoints left out because they wait in a batch already
    est_usd: float = 0.0  # worst case of what was submitted, at the batch price

    def lines(self) -> list[str]:
        out = []
        if self.collected:
            out.append(
                f"batch: collected {self.collected} answers: ${self.collected_usd:.4f} at the "
                f"batch price (${self.interactive_usd:.4f} one by one)"
            )
        if self.submitted:
            out.append(
                f"batch: submitted {self.submitted} checkpoints in {len(self.batches)} "
                f"batch{'es' if len(self.batches) != 1 else ''} ({', '.join(self.batches)}), "
                f"at most ${self.est_usd:.4f}; "
                "`auditor run --batch` (or --collect) later records the answers"
            )
        if self.pending:
            out.append(f"batch: {self.pending} checkpoints wait in unfinished batches")
        return out


def _observer(auditor: Auditor) -> BatchObserver:
    obs = auditor.observing.backend
    if not all(callable(getattr(obs, m, None)) for m in METHODS):
        raise AuditorError(
            f"observer {auditor.observing.name!r} has no batch API; --batch works with gemini "
            "and claude"
        )
    return cast("BatchObserver", obs)


def _options(auditor: Auditor) -> dict[str, Any]:
    return {"model": auditor.observing.model, **auditor.config.observer_options}


def check(auditor: Auditor) -> None:
    """Raise unless the run's options and observer allow a batch run (also for a dry run)."""
    if auditor.config.critique:
        raise AuditorError("--critique does not combine with --batch (it needs the first answer)")
    _observer(auditor)


def run_batch(auditor: Auditor, collect_only: bool = False) -> BatchReport:
    """Collect finished batches, then (unless `collect_only`) submit what still needs a call."""
    check(auditor)
    report = BatchReport()
    auditor.summary.batch = report
    resolve_submitting(auditor)
    collect(auditor, report)
    if not collect_only:
        submit(auditor, report)
    with auditor.engine.connect() as conn:
        report.pending = _open_requests(conn, auditor)
    return report


def _open_requests(conn, auditor: Auditor) -> int:
    b, r = s.Batch.__table__, s.BatchRequest.__table__
    q = (
        select(r.c.id)
        .join(b, b.c.id == r.c.batch_id)
        .where(b.c.state.in_(OPEN), r.c.verdict_id.is_(None))
        .where(b.c.observer == auditor.observing.name, b.c.model == auditor.observing.model)
    )
    return len(conn.execute(q).all())


def resolve_submitting(auditor: Auditor) -> None:
    """Find the provider id of batches a stopped run had begun to submit, else drop them."""
    obs, b = _observer(auditor), s.Batch.__table__
    with auditor.engine.connect() as conn:
        rows = conn.execute(
            select(b).where(
                b.c.state == "submitting",
                b.c.observer == auditor.observing.name,
                b.c.model == auditor.observing.model,
            )
        ).all()
    for row in rows:
        since = row.submitted_at
        if since.tzinfo is None:
            since = since.replace(tzinfo=UTC)
        try:
            candidates = obs.find_batch(
                row.label, row.requests, since - timedelta(minutes=1), _options(auditor)
            )
        except Exception as exc:  # noqa: BLE001 - the provider refuses (a model it does not serve, a key...)
            # Its checkpoints stay out of new batches: sending them again while the provider
            # may hold them could pay twice. The user decides (`auditor batch drop`).
            _note_error(auditor, row.id, exc)
            auditor.summary.messages.append(
                f"batch {row.label}: its submission did not finish, and auditor could not ask "
                f"{auditor.observing.name} whether it has it ({_why(exc)}); its {row.requests} "
                f"checkpoints wait for it. If {auditor.observing.name} never got it, `auditor "
                f"batch drop {row.label}` gives them to the next run."
            )
            continue
        with auditor.engine.connect() as conn:  # leave out the batches already recorded
            known = set(conn.scalars(select(b.c.provider_id).where(b.c.provider_id.is_not(None))))
        left = [c for c in candidates if c not in known]
        found = left[0] if len(left) == 1 else None
        values = (
            {"state": "pending", "provider_id": found}
            if found
            else {
                "state": "failed",
                "error": f"the provider has {len(left) or 'no'} batches that may be this one",
            }
        )
        with auditor.engine.begin() as conn:
            conn.execute(update(b).where(b.c.id == row.id).values(**values))
        auditor.summary.messages.append(
            f"batch {row.label}: a run stopped while submitting it; "
            + (f"the provider has it as {found}" if found else "the provider never got it")
        )


def collect(auditor: Auditor, report: BatchReport) -> None:
    """Poll this observer's pending batches and record the answers of the finished ones."""
    from ..pricing.model_prices import cost

    obs, b, r = _observer(auditor), s.Batch.__table__, s.BatchRequest.__table__
    options = _options(auditor)
    with auditor.engine.connect() as conn:
        batches = conn.execute(
            select(b)
            .where(
                b.c.state == "pending",
                b.c.observer == auditor.observing.name,
                b.c.model == auditor.observing.model,
            )
            .order_by(b.c.id)
        ).all()
    for batch in batches:
        try:
            status = obs.poll_batch(batch.provider_id, options)
        except Exception as exc:  # noqa: BLE001 - gone at the provider, a key that changed...: say, go on
            _note_error(auditor, batch.id, exc)
            auditor.summary.messages.append(
                f"batch {batch.provider_id}: could not poll it ({_why(exc)}); its answers are "
                "collected by a later run, or `auditor batch drop "
                f"{batch.label}` gives its checkpoints to the next run."
            )
            continue
        with auditor.engine.begin() as conn:
            conn.execute(
                update(b)
                .where(b.c.id == batch.id)
                .values(polled_at=utcnow(), provider_state=status.state)
            )
        if not status.done:
            continue
        try:
            answers = obs.batch_answers(batch.provider_id, options)
        except Exception as exc:  # noqa: BLE001 - whatever the SDK raised, a later run tries again
            _note_error(auditor, batch.id, exc)
            auditor.summary.messages.append(
                f"batch {batch.provider_id}: finished, but its answers could not be read "
                f"({_why(exc)}); a later run tries again."
            )
            continue
        with auditor.engine.connect() as conn:
            requests = conn.execute(
                select(r).where(r.c.batch_id == batch.id).order_by(r.c.position)
            ).all()
        by_key = {a.key: a for a in answers if a.key is not None}
        by_index = {a.index: a for a in answers if a.index is not None}
        for req in requests:
            if req.verdict_id is not None:
                continue
            answer = by_key.get(req.custom_id) or by_index.get(req.position)
            if answer is not None and answer.key not in (None, req.custom_id):
                answer = None  # in order, but not this request's answer
            verdict_id = _recorded(auditor, batch.id, req)
            if verdict_id is None:
                job = _job(auditor, req)
                extra = {
                    "batch_id": batch.id,
                    "prompt_hash": req.prompt_hash,
                    "prompt_version": None
                    if req.prompt_hash != auditor.observing.prompt.sha256
                    else auditor.observing.prompt.version,
                }
                if answer is not None and answer.result is not None:
                    verdict_id = auditor.recorder.record_verdict(
                        job, answer.result, None, None, batch=extra
                    )
                    report.collected += 1
                    usage = answer.result.usage
                    at_batch = cost(
                        auditor.observing.model, usage, auditor.observing.name, batch=True
                    ).usd
                    one_by_one = cost(auditor.observing.model, usage, auditor.observing.name).usd
                    report.collected_usd += float(at_batch or 0)
                    report.interactive_usd += float(one_by_one or 0)
                else:
                    error = (answer.error if answer else None) or (
                        f"the batch ended ({status.state}) without an answer for this request"
                    )
                    verdict_id = auditor.recorder.record_verdict(
                        job, None, error, None, batch=extra
                    )
            with auditor.engine.begin() as conn:
                conn.execute(update(r).where(r.c.id == req.id).values(verdict_id=verdict_id))
        with auditor.engine.begin() as conn:
            conn.execute(
                update(b).where(b.c.id == batch.id).values(state="collected", collected_at=utcnow())
            )


def _why(exc: BaseException) -> str:
    """An SDK error in one line: its type and the start of its text."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:200]}{'…' if len(text) > 200 else ''}"


def _note_error(auditor: Auditor, batch_id: int, exc: BaseException) -> None:
    """Keep the provider's latest refusal on the batch row, for `auditor batch list`."""
    b = s.Batch.__table__
    with auditor.engine.begin() as conn:
        conn.execute(update(b).where(b.c.id == batch_id).values(error=_why(exc)))


def list_batches(engine, limit: int | None = 50) -> list[dict[str, Any]]:
    """Return the batches the store knows, newest first, with their checkpoints still waiting."""
    from ..store.dialect import iso_utc

    b, r = s.Batch.__table__, s.BatchRequest.__table__
    waiting = (
        select(r.c.batch_id, func.count().label("waiting"))
        .where(r.c.verdict_id.is_(None))
        .group_by(r.c.batch_id)
        .subquery()
    )
    q = (
        select(b, waiting.c.waiting)
        .outerjoin(waiting, waiting.c.batch_id == b.c.id)
        .order_by(b.c.id.desc())
    )
    if limit:
        q = q.limit(limit)
    with engine.connect() as conn:
        rows = conn.execute(q).all()
    return [
        {
            "id": row.id,
            "label": row.label,
            "provider_id": row.provider_id,
            "observer": row.observer,
            "model": row.model,
            "state": row.state,
            "provider_state": row.provider_state,
            "requests": row.requests,
            "waiting": int(row.waiting or 0) if row.state in OPEN else 0,
            "est_usd": row.est_usd,
            "submitted_at": iso_utc(row.submitted_at),
            "error": row.error,
        }
        for row in rows
    ]


def drop_batch(engine, ident: str) -> tuple[str, int]:
    """Stop waiting for the open batch `ident` (its label, provider id or row id): its
    checkpoints without an answer go to the next run. Return (its label, those checkpoints).

    Only for a batch the provider never got or will never answer: if it does answer, the
    checkpoints sent again are paid twice, and its answers are not collected.
    """
    b, r = s.Batch.__table__, s.BatchRequest.__table__
    conds = [b.c.label == ident, b.c.provider_id == ident]
    if ident.isdigit():
        conds.append(b.c.id == int(ident))
    with engine.begin() as conn:
        rows = conn.execute(select(b).where(or_(*conds))).all()
        if not rows:
            known = conn.scalars(select(b.c.label).where(b.c.state.in_(OPEN))).all()
            raise UnknownName("batch", ident, list(known))
        (row,) = rows
        if row.state not in OPEN:
            raise AuditorError(
                f"batch {row.label} is {row.state}, not waiting: there is nothing to drop"
            )
        left = conn.scalar(
            select(func.count()).where(r.c.batch_id == row.id, r.c.verdict_id.is_(None))
        )
        conn.execute(update(b).where(b.c.id == row.id).values(state="dropped"))
    return row.label, int(left or 0)


def _job(auditor: Auditor, req) -> Job:
    """The job of a batch request, to record its answer (the batch row holds the prompt's hash)."""
    prompt = auditor.observing.prompt
    return Job(req.checkpoint_id, req.thread_id, req.message_native_id, "", req.input_hash, prompt)


def _recorded(auditor: Auditor, batch_id: int, req) -> int | None:
    """The verdict a collect stopped half-way already made for `req`, if any."""
    v = s.Verdict.__table__
    with auditor.engine.connect() as conn:
        return conn.execute(
            select(v.c.id).where(
                v.c.batch_id == batch_id,
                v.c.checkpoint_id == req.checkpoint_id,
                v.c.input_hash == req.input_hash,
            )
        ).scalar()


def _waiting(conn, auditor: Auditor, job) -> bool:
    """Tell whether `job` waits in an open batch (then it is not submitted again)."""
    b, r = s.Batch.__table__, s.BatchRequest.__table__
    q = (
        select(r.c.id)
        .join(b, b.c.id == r.c.batch_id)
        .where(
            b.c.state.in_(OPEN),
            b.c.observer == auditor.observing.name,
            b.c.model == auditor.observing.model,
            r.c.verdict_id.is_(None),
            r.c.checkpoint_id == job.checkpoint_id,
            r.c.input_hash == job.input_hash,
        )
        .limit(1)
    )
    return conn.execute(q).first() is not None


def submit(auditor: Auditor, report: BatchReport) -> None:
    """Plan, then submit every job that needs a call, in batches."""
    size = auditor.config.batch_size or DEFAULT_BATCH_SIZE
    chunk: list = []
    chunk_bytes = 0
    budget = auditor.caller.budget
    limit = auditor.config.limit
    taken = 0
    try:
        for job in auditor.jobs():
            if limit is not None and taken >= limit:
                break
            prompt = auditor.observing.prompt.text + job.user
            priced = auditor.caller.worst_case(prompt, batch=True)
            est = float(priced or 0)  # unknown: allowed with --allow-unpriced only
            job_bytes = len(prompt.encode("utf-8", "surrogatepass"))
            # Full: submit before claiming the next, so a failed submission holds no lease.
            if chunk and (len(chunk) >= size or chunk_bytes + job_bytes > BATCH_MAX_BYTES):
                done, chunk, chunk_bytes = chunk, [], 0
                try:
                    _submit_chunk(auditor, done, report)
                finally:
                    _give_back(budget, done)
            if not auditor.sharing.hold(job):
                continue
            # Under the lease: another run may have put it in a batch since it was planned.
            with auditor.engine.connect() as conn:
                waiting = _waiting(conn, auditor, job)
            over = budget is not None and (
                auditor.summary.cost_usd + report.est_usd + est > budget.limit
            )
            row = None  # budget_per_day: held until the batch row counts the estimate
            if not waiting and not over and budget is not None and budget.day is not None:
                row, _ = budget.day.take(est)
                over = row is None
            if waiting or over:
                auditor.sharing.release(job)
                if waiting:
                    report.waiting += 1
                elif budget is not None:  # `over` is only ever set under a budget
                    budget.refuse(est)
                    auditor.summary.over_budget += 1
                continue
            taken += 1
            report.est_usd += est
            chunk.append((job, est, row))
            chunk_bytes += job_bytes
    except BaseException:
        for job, _, _ in chunk:  # claimed, never recorded in a batch: free for the next run
            auditor.sharing.release(job)
        _give_back(budget, chunk)
        raise
    if chunk:
        try:
            _submit_chunk(auditor, chunk, report)
        finally:
            _give_back(budget, chunk)


def _give_back(budget, chunk: list) -> None:
    """Delete the chunk's budget_per_day reservations: its batch row (est_usd) counts them now,
    or it was never recorded."""
    for _, _, row in chunk:
        if row is not None:
            budget.day.give_back(row)


def _submit_chunk(auditor: Auditor, jobs: list, report: BatchReport) -> None:
    """Record the batch, submit it, record its provider id; release the jobs' leases.

    `jobs` holds (job, worst-case USD at the batch price, its reservation) triples.
    """
    b, r = s.Batch.__table__, s.BatchRequest.__table__
    label = f"auditor-{utcnow():%Y%m%d%H%M%S}-{secrets.token_hex(4)}"
    est = sum(e for _, e, _ in jobs)
    jobs = [job for job, _, _ in jobs]
    items = [
        BatchItem(
            f"cp{job.checkpoint_id}-{job.input_hash[:16]}",
            ObserveRequest(auditor.observing.prompt.text, job.user, auditor.observing.model),
        )
        for job in jobs
    ]
    try:
        with auditor.engine.begin() as conn:
            batch_id = conn.execute(
                b.insert()
                .values(
                    observer=auditor.observing.name,
                    model=auditor.observing.model,
                    label=label,
                    state="submitting",
                    requests=len(jobs),
                    est_usd=est,
                    run_id=auditor.summary.run_id,
                    submitted_at=utcnow(),
                )
                .returning(b.c.id)
            ).scalar_one()
            conn.execute(
                r.insert(),
                [
                    {
                        "batch_id": batch_id,
                        "position": i,
                        "custom_id": item.key,
                        "checkpoint_id": job.checkpoint_id,
                        "thread_id": job.thread_id,
                        "message_native_id": job.message_id,
                        "prompt_hash": auditor.observing.prompt.sha256,
                        "input_hash": job.input_hash,
                    }
                    for i, (job, item) in enumerate(zip(jobs, items, strict=True))
                ],
            )
    finally:
        for job in jobs:  # recorded in the batch now, or free for the next run
            auditor.sharing.release(job)
    try:
        provider_id = _observer(auditor).submit_batch(items, label, _options(auditor))
    except Exception as exc:  # noqa: BLE001 - whatever the SDK raised, the run stops with one line
        # The provider may have the batch all the same: the next run asks it by label.
        _note_error(auditor, batch_id, exc)
        raise AuditorError(
            f"batch {label}: submitting {len(jobs)} requests failed ({type(exc).__name__}: "
            f"{exc}); the next run asks {auditor.observing.name} whether it has the batch before "
            "sending these checkpoints again"
        ) from None
    with auditor.engine.begin() as conn:
        conn.execute(
            update(b).where(b.c.id == batch_id).values(state="pending", provider_id=provider_id)
        )
    report.submitted += len(jobs)
    report.batches.append(provider_id)
