"""`auditor run`: gate -> format -> observe -> record, over the stored threads.

The run is idempotent and resumable: a checkpoint already answered by the same observer,
model and prompt over the same rendered thread content is never sent again, and each verdict
is committed as soon as it arrives, so a run killed at any moment loses nothing answered.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Iterator

from sqlalchemy import Engine, select, update

from . import schema as s
from .checkpoints import Checkpoint, find_checkpoints
from .errors import AuditorError
from .observe import ObserveRequest, ObserveResult, validate
from .plugins import Plugins
from .threads import find_thread, load_messages

CHARS_PER_TOKEN = 4  # rough estimate used only by --dry-run
EST_OUTPUT_TOKENS = 80


@dataclass
class RunConfig:
    observer: str | None = None
    model: str | None = None
    observer_options: dict[str, Any] = field(default_factory=dict)
    threads: list[str] = field(default_factory=list)
    since: datetime | None = None
    limit: int | None = None
    concurrency: int = 4
    timeout: float = 120.0
    dry_run: bool = False
    gate: dict[str, Any] = field(default_factory=dict)
    formatter: dict[str, Any] = field(default_factory=dict)

    def for_record(self) -> dict[str, Any]:
        out = asdict(self)
        out["observer_options"] = {k: v for k, v in self.observer_options.items() if "key" not in k}
        out["since"] = self.since.isoformat() if self.since else None
        return out


@dataclass
class RunSummary:
    run_id: int | None
    observer: str
    model: str
    checkpoints: int = 0
    gated_in: int = 0
    gated_out: dict[str, int] = field(default_factory=dict)
    audited: int = 0
    reused: int = 0
    corrections: int = 0
    invalid: int = 0
    errors: int = 0
    cost_usd: float = 0.0
    unpriced: int = 0
    est_input_tokens: int = 0
    est_cost_usd: float | None = None
    status: str = "done"
    messages: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Job:
    checkpoint_id: int
    thread_id: int
    message_id: str
    user: str
    input_hash: str


def _now() -> datetime:
    return datetime.now(timezone.utc)


def choose_observer(plugins: Plugins, name: str | None) -> tuple[str, str]:
    """Return (observer name, why it was chosen) following the documented fallback order."""
    if name:
        plugins.observer(name)
        return name, "chosen with --observer"
    configured = os.environ.get("AUDITOR_OBSERVER")
    if configured:
        plugins.observer(configured)
        return configured, "from AUDITOR_OBSERVER"
    available = plugins.observers()
    if "gemini" in available and (os.environ.get("GEMINI_API_KEY") or os.environ.get("GOOGLE_API_KEY")):
        return "gemini", "GEMINI_API_KEY is set"
    if "claude" in available and os.environ.get("ANTHROPIC_API_KEY"):
        return "claude", "ANTHROPIC_API_KEY is set"
    if "embedded" in available:
        return "embedded", "no API key is set, so the offline embedded model is used (its verdicts are for trying the pipeline)"
    if not available:
        raise AuditorError("No observer backend is installed. Install one: pip install 'auditor[gemini]'")
    first = sorted(available)[0]
    return first, "the only installed observer"


def _price(model: str, usage) -> tuple[float | None, float | None]:
    from .prices import cost, credits

    c = cost(model, usage)
    if c.usd is None:
        return None, None
    return float(c.usd), float(credits(c.usd))


class Auditor:
    """One run over the store."""

    def __init__(self, engine: Engine, plugins: Plugins, config: RunConfig):
        from .prompt import load_prompt

        self.engine, self.plugins, self.config = engine, plugins, config
        self.observer_name, self.why = choose_observer(plugins, config.observer)
        self.observer = plugins.observer(self.observer_name)
        self.model = config.model or self.observer.default_model
        self.prompt = load_prompt()
        self.gate_config = {"mode": "end-turn", **config.gate}
        self.summary = RunSummary(None, self.observer_name, self.model)

    # -- planning (sync, cheap) -----------------------------------------------------------
    def _threads(self) -> list[s.Thread]:
        if self.config.threads:
            return [find_thread(self.engine, t) for t in self.config.threads]
        t = s.Thread.__table__
        q = select(t).order_by(t.c.id)
        if self.config.since:
            q = q.where(t.c.ended_at >= self.config.since.astimezone(timezone.utc).replace(tzinfo=None))
        with self.engine.connect() as conn:
            return list(conn.execute(q).all())

    def plan(self) -> Iterator[Job]:
        """Gate every checkpoint (recording each decision) and yield the ones to send."""
        mode = self.gate_config.get("mode", "end-turn")
        for thread in self._threads():
            messages = load_messages(self.engine, thread.id)
            checkpoints = find_checkpoints(thread.id, messages, mode)
            if not checkpoints:
                continue
            jobs: list[Job] = []
            with self.engine.begin() as conn:
                for cp in checkpoints:
                    self.summary.checkpoints += 1
                    upto = messages[: cp.index + 1]
                    decision = self.plugins.gate(cp, thread, upto, self.gate_config)
                    cp_id = self._record_checkpoint(conn, cp, decision)
                    if not decision.audit:
                        key = decision.reason.split(" (")[0]
                        self.summary.gated_out[key] = self.summary.gated_out.get(key, 0) + 1
                        continue
                    self.summary.gated_in += 1
                    user = self.plugins.render_checkpoint(cp, thread, upto, self.config.formatter)
                    job = Job(cp_id, thread.id, cp.message_id, user, self._input_hash(user))
                    if self._already_answered(conn, job):
                        self.summary.reused += 1
                        continue
                    jobs.append(job)
            yield from jobs

    def _input_hash(self, user: str) -> str:
        return hashlib.sha256(f"{self.prompt.sha256}\0{user}".encode()).hexdigest()

    def _record_checkpoint(self, conn, cp: Checkpoint, decision) -> int:
        from .ingest import _insert

        values = {
            "thread_id": cp.thread_id,
            "message_native_id": cp.message_id,
            "kind": cp.kind,
            "tool_calls": cp.tool_calls,
            "file_edits": cp.file_edits,
            "gate_audit": decision.audit,
            "gate_reason": decision.reason,
            "gated_at": _now(),
            "run_id": self.summary.run_id,
        }
        stmt = _insert(conn, s.Checkpoint.__table__).values(**values)
        stmt = stmt.on_conflict_do_update(
            index_elements=["thread_id", "message_native_id", "kind"],
            set_={k: v for k, v in values.items() if k not in ("thread_id", "message_native_id", "kind")},
        )
        return conn.execute(stmt.returning(s.Checkpoint.id)).scalar_one()

    def _already_answered(self, conn, job: Job) -> bool:
        v = s.Verdict
        found = conn.execute(
            select(v.id).where(
                v.checkpoint_id == job.checkpoint_id,
                v.observer == self.observer_name,
                v.model == self.model,
                v.prompt_hash == self.prompt.sha256,
                v.input_hash == job.input_hash,
                v.status.in_(("ok", "invalid")),
            ).limit(1)
        ).first()
        return found is not None

    # -- executing ------------------------------------------------------------------------
    def _start_run(self) -> None:
        with self.engine.begin() as conn:
            self.summary.run_id = conn.execute(
                s.Run.__table__.insert()
                .values(
                    started_at=_now(),
                    status="running",
                    observer=self.observer_name,
                    model=self.model,
                    prompt_version=self.prompt.version,
                    prompt_hash=self.prompt.sha256,
                    dry_run=self.config.dry_run,
                    config=self.config.for_record(),
                )
                .returning(s.Run.id)
            ).scalar_one()

    def _finish_run(self, status: str, error: str | None = None) -> None:
        self.summary.status = status
        sm = self.summary
        with self.engine.begin() as conn:
            conn.execute(
                update(s.Run)
                .where(s.Run.id == sm.run_id)
                .values(
                    ended_at=_now(), status=status, checkpoints=sm.checkpoints, gated_in=sm.gated_in,
                    audited=sm.audited, reused=sm.reused, corrections=sm.corrections,
                    invalid=sm.invalid, errors=sm.errors, cost_usd=sm.cost_usd, error=error,
                )
            )

    def _record_verdict(self, job: Job, result: ObserveResult | None, error: str | None, latency: float) -> None:
        sm = self.summary
        row: dict[str, Any] = {
            "checkpoint_id": job.checkpoint_id,
            "run_id": sm.run_id,
            "thread_id": job.thread_id,
            "observer": self.observer_name,
            "model": self.model,
            "prompt_version": self.prompt.version,
            "prompt_hash": self.prompt.sha256,
            "input_hash": job.input_hash,
            "latency_ms": int(latency * 1000),
            "created_at": _now(),
        }
        if result is None:
            row.update(status="error", problem=error)
            sm.errors += 1
        else:
            verdict = validate(result)
            u = result.usage
            usd, cr = _price(self.model, u)
            if usd is None:
                sm.unpriced += 1
            else:
                sm.cost_usd += usd
            row.update(
                status="ok" if verdict.valid else "invalid",
                needs_correction=verdict.needs_correction if verdict.valid else None,
                message=verdict.message,
                problem=verdict.problem,
                raw=_jsonable(result.raw),
                latency_ms=int(result.latency_s * 1000),
                input_tokens=u.input,
                output_tokens=u.output,
                cached_tokens=u.cached,
                thinking_tokens=u.thinking,
                cache_write_tokens=u.cache_write,
                cost_usd=usd,
                credits=cr,
            )
            if verdict.valid:
                sm.audited += 1
                sm.corrections += bool(verdict.needs_correction)
            else:
                sm.invalid += 1
                sm.messages.append(f"thread {job.thread_id} at {job.message_id}: invalid answer: {verdict.problem}")
        if error and result is None:
            sm.messages.append(f"thread {job.thread_id} at {job.message_id}: {error}")
        with self.engine.begin() as conn:
            conn.execute(s.Verdict.__table__.insert().values(**row))

    async def _call(self, job: Job) -> None:
        request = ObserveRequest(self.prompt.text, job.user, self.model, timeout=self.config.timeout)
        options = {"model": self.model, **self.config.observer_options}
        started = time.monotonic()
        try:
            result = await asyncio.wait_for(
                self.observer.observe(request, options), timeout=self.config.timeout * 4 + 5
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # recorded as an error verdict; the run goes on
            self._record_verdict(job, None, f"{type(exc).__name__}: {exc}", time.monotonic() - started)
            return
        self._record_verdict(job, result, None, time.monotonic() - started)

    async def execute(self, progress: Callable[[RunSummary], None] | None = None) -> RunSummary:
        queue: asyncio.Queue[Job | None] = asyncio.Queue(maxsize=max(2, self.config.concurrency * 2))
        workers_n = max(1, self.config.concurrency)

        async def produce() -> None:
            sent = 0
            for job in self.plan():
                if self.config.limit is not None and sent >= self.config.limit:
                    break
                await queue.put(job)
                sent += 1
            for _ in range(workers_n):
                await queue.put(None)

        async def work() -> None:
            while (job := await queue.get()) is not None:
                await self._call(job)
                if progress:
                    progress(self.summary)

        await asyncio.gather(produce(), *(work() for _ in range(workers_n)))
        return self.summary

    def dry_run(self) -> RunSummary:
        """Gate and format everything, call no model, and estimate tokens and cost."""
        from .observe import ObserverUsage

        chars = 0
        sent = 0
        for job in self.plan():
            if self.config.limit is not None and sent >= self.config.limit:
                break
            chars += len(self.prompt.text) + len(job.user)
            sent += 1
        self.summary.est_input_tokens = chars // CHARS_PER_TOKEN
        usage = ObserverUsage(input=self.summary.est_input_tokens, output=EST_OUTPUT_TOKENS * sent)
        usd, _ = _price(self.model, usage)
        self.summary.est_cost_usd = usd
        self.summary.audited = sent
        return self.summary


def _jsonable(raw: Any) -> Any:
    if raw is None or isinstance(raw, (dict, list, str, int, float, bool)):
        return raw
    return repr(raw)


def run(
    engine: Engine,
    plugins: Plugins,
    config: RunConfig,
    progress: Callable[[RunSummary], None] | None = None,
    announce: Callable[[str], None] = lambda line: print(line, file=sys.stderr),
) -> RunSummary:
    """Run an audit (or a dry run) and return its summary."""
    auditor = Auditor(engine, plugins, config)
    announce(f"observer: {auditor.observer_name} ({auditor.why}), model {auditor.model}")
    if config.dry_run:
        return auditor.dry_run()
    problem = auditor.observer.check({"model": auditor.model, **config.observer_options})
    if problem:
        raise AuditorError(f"observer {auditor.observer_name!r} cannot be used: {problem}")
    auditor._start_run()
    try:
        asyncio.run(auditor.execute(progress))
    except (KeyboardInterrupt, asyncio.CancelledError):
        auditor._finish_run("interrupted")
        raise
    except Exception as exc:
        auditor._finish_run("failed", f"{type(exc).__name__}: {exc}")
        raise
    auditor._finish_run("done")
    return auditor.summary
