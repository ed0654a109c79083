"""The recorder of a run: its start and end, and each call's verdict with its usage and price.

`Recorder` writes what a run does (`recording`, `start_run`, `finish_run`) and what each call
brought back (`record_verdict`): the planner records the gate's decisions, the rest is here.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

from sqlalchemy import Engine

from ..errors import StoreGone
from ..store import events
from ..store import raw_answers as answers
from ..store import run_rows as runs
from ..store import schema as s
from ..store.db import file_gone, file_identity, retry_lost, utcnow
from .observe import ObserveResult, validate
from .run_types import Job, Observing, RunConfig, RunSummary


def price_of(
    model: str, usage, observer: str | None = None, batch: bool = False
) -> tuple[float | None, float | None]:
    """Return the USD and credits of a call's `usage` (None, None for a model without a price)."""
    from ..pricing.model_prices import cost, credits

    c = cost(model, usage, observer, batch=batch)
    if c.usd is None:
        return None, None
    return float(c.usd), float(credits(c.usd))


class Recorder:
    """Records one audit as a run of the store, with its verdicts and their figures."""

    def __init__(
        self,
        engine: Engine,
        config: RunConfig,
        observing: Observing,
        summary: RunSummary,
        owner: str,
    ):
        self.engine, self.config, self.observing = engine, config, observing
        self.summary, self.owner = summary, owner
        self._heartbeat: runs.Heartbeat | None = None
        self._store_file: tuple[int, int] | None = None  # SQLite: noticed if deleted mid-run

    # -- the run's lifecycle --------------------------------------------------------------
    @contextlib.contextmanager
    def recording(self, note: dict[str, Any] | None = None) -> Iterator[RunSummary]:
        """Record a run around the block and yield its summary.

        The run ends `failed` (with the error) when the block raises, `interrupted` on Ctrl-C
        or cancellation, else with `summary.status` (`done` unless the block set it).
        """
        self.start_run(note)
        try:
            yield self.summary
        except (KeyboardInterrupt, asyncio.CancelledError):
            self.finish_run("interrupted")
            raise
        except Exception as exc:
            self.finish_run("failed", f"{type(exc).__name__}: {exc}")
            raise
        self.finish_run(self.summary.status)

    def start_run(self, note: dict[str, Any] | None = None) -> int:
        """Record the start of a run (its config, plus `note`) and return its id.

        Runs whose process died are marked interrupted first, and the run beats until
        `finish_run`, so that a run killed outright is recognised as interrupted later.
        """
        self._store_file = file_identity(self.engine)
        with self.engine.begin() as conn:
            self.summary.run_id = runs.record_start(
                conn,
                owner=self.owner,
                observer=self.observing.name,
                model=self.observing.model,
                prompt=self.observing.prompt,
                dry_run=self.config.dry_run,
                config={**self.config.for_record(), **(note or {})},
                critique=self.config.critique,
            )
        self._heartbeat = runs.Heartbeat(self.engine, self.summary.run_id)
        return self.summary.run_id

    def finish_run(self, status: str, error: str | None = None) -> None:
        """Record the end of the run: `status` (done, interrupted, failed), totals, `error`."""
        if self._heartbeat is not None:
            self._heartbeat.stop()
        self.summary.status = status

        def record() -> None:
            with self.engine.begin() as conn:
                runs.record_end(conn, self.summary, error)

        retry_lost(record)

    def store_gone(self) -> StoreGone | None:
        """The error for a SQLite store deleted (or replaced) since the run started, None while
        it is there: writes go on into the deleted file's open handle and are lost with it."""
        if not file_gone(self.engine, self._store_file):
            return None
        sm = self.summary
        return StoreGone(
            f"The store {self.engine.url.database} was deleted during the run: the {sm.audited} "
            f"answers of run {sm.run_id} (cost ${sm.cost_usd:.4f}) went with it. Keep the "
            "store where nothing cleans it up, then run again"
        )

    def record_verdict(
        self,
        job: Job,
        result: ObserveResult | None,
        error: str | None,
        latency: float | None,
        failed: str = "error",
        batch: dict[str, Any] | None = None,
    ) -> int:
        """Store the outcome of one call and return the verdict id.

        A call without a result is stored with status `failed` (error or cancelled). `batch`
        holds the columns of an answer collected from a provider batch (its `batch_id`, the
        prompt it was sent with): it is priced at the batch price.
        """
        sm, o, prompt = self.summary, self.observing, job.prompt
        row: dict[str, Any] = {
            "checkpoint_id": job.checkpoint_id,
            "run_id": sm.run_id,
            "thread_id": job.thread_id,
            "observer": o.name,
            "model": o.model,
            "prompt_version": prompt.version,
            "prompt_hash": prompt.sha256,
            "input_hash": job.input_hash,
            "critique_of": job.critique_of,
            "same_vendor": o.same_vendor,
            "latency_ms": None if latency is None else int(latency * 1000),
            "created_at": utcnow(),
            **(batch or {}),
        }
        if result is None:
            row.update(status=failed, problem=error)
            sm.errors += failed == "error"
        else:
            verdict = validate(result)
            u = result.usage
            if u.cost_usd is not None:  # what the provider or CLI said the call cost
                from ..pricing.model_prices import credits

                usd: float | None = float(u.cost_usd)
                cr: float | None = float(credits(u.cost_usd))
            else:
                usd, cr = price_of(o.model, u, o.name, batch=bool(batch))
            if usd is None:
                sm.unpriced += 1
            else:
                sm.cost_usd += usd
            raw, raw_bytes = answers.keep(result.raw)
            row.update(
                status="ok" if verdict.valid else "invalid",
                raw=raw,
                raw_bytes=raw_bytes,
                needs_correction=verdict.needs_correction if verdict.valid else None,
                message=verdict.message,
                problem=verdict.problem,
                latency_ms=None if batch else int(result.latency_s * 1000),
                input_tokens=u.input,
                output_tokens=u.output,
                cached_tokens=u.cached,
                thinking_tokens=u.thinking,
                cache_write_tokens=u.cache_write,
                cost_usd=usd,
                credits=cr,
            )
            if verdict.valid and job.critique_of is not None:
                sm.critiques += 1
                sm.critique_corrections += bool(verdict.needs_correction)
            elif verdict.valid:
                sm.audited += 1
                sm.corrections += bool(verdict.needs_correction)
            else:
                sm.invalid += 1
                sm.messages.append(
                    f"thread {job.thread_id} at {job.message_id}: invalid answer: {verdict.problem}"
                )
        if error and result is None:
            sm.messages.append(f"thread {job.thread_id} at {job.message_id}: {error}")

        def insert() -> int:
            with self.engine.begin() as conn:
                new_id = conn.execute(
                    s.Verdict.__table__.insert().values(**row).returning(s.Verdict.id)
                ).scalar_one()
                events.record_verdict(conn, new_id, row)
            return new_id

        # A paid answer is kept through a restart of the store's server (PostgreSQL): lost
        # here, it would be paid again by the next run.
        verdict_id = retry_lost(insert)
        if row.get("needs_correction") and row["status"] == "ok":
            sm.found.append(
                {
                    "verdict_id": verdict_id,
                    "thread": job.thread_native_id,
                    "thread_id": job.thread_id,
                    "message_id": job.message_id,
                    "critique": job.critique_of is not None,
                    "message": row["message"],
                }
            )
        return verdict_id
