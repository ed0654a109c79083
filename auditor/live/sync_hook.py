"""The agents' Stop hooks: audit the turn that just ended and answer with its correction.

`auditor hook claude-code` (and `codex`) is run by the agent when it is about to stop, with a
JSON payload on stdin. The hook reads the new tail of the transcript into the store, finds the
checkpoint that just ended, and puts it through the same machinery as `auditor run` (gate,
formatter, observer, verdict, all recorded, under the same lease). When the verdict is a
correction that the loop guards let through, the injector of the agent prints
`{"decision": "block", "reason": ...}` and the agent goes on with it.

The hook fails open: whatever goes wrong (bad payload, unknown observer, missing key, server
error, a deadline passed) lets the agent stop normally, is recorded as a failed run or an
error verdict where the store can be reached, and exits 0.
"""

from __future__ import annotations

import hashlib
import signal
import time
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self, TextIO

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import FrameType

    from sqlalchemy import Engine

    from ..audit.observer_audit import CheckpointNow
    from ..plugins import Plugins

DEADLINE = 30.0
LAG_WAIT = 0.5
MARGIN = 1.0  # seconds kept after the observer call to record it and answer


@dataclass
class HookOptions:
    deadline: float = DEADLINE  # seconds for the whole hook; past it the agent stops normally
    max_corrections: int = 2  # corrections in a row between two messages the user typed
    lag_wait: float = LAG_WAIT  # seconds to wait for a transcript file that lags the payload


@dataclass
class HookOutcome:
    """What the hook did: `blocked` (a correction was printed), `silent`, `skipped` or `failed`."""

    status: str
    detail: str
    run_id: int | None = None
    verdict_id: int | None = None
    timings: dict[str, float] = field(default_factory=dict)
    recorded: bool = True  # False: a failure the store could not take in time (say it elsewhere)


class DeadlinePassed(Exception):
    pass


@dataclass
class _Payload:
    session: str
    thread: str  # native id of the thread the hook is about
    transcript: Path | None
    last_message: str | None
    event: str
    active: bool  # stop_hook_active: the agent already goes on because of a Stop hook
    info: dict[str, Any]


def _payload(agent: str, raw: str) -> _Payload:
    import orjson

    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"the hook input on stdin is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError("the hook input on stdin is not a JSON object")  # noqa: TRY004 - bad input, not a bug
    session = data.get("session_id")
    if not isinstance(session, str) or not session:
        raise ValueError("the hook input has no session_id")
    event = str(data.get("hook_event_name") or "Stop")
    path = data.get("transcript_path")
    thread = session
    if event == "SubagentStop" and agent == "claude-code" and data.get("agent_id"):
        thread = f"{session}/agent-{data['agent_id']}"
        path = data.get("agent_transcript_path") or path
    if path is not None:
        from .transcript_places import refusal

        why = refusal(agent, "transcript_path", path)
        if why is not None:
            raise ValueError(why)
    transcript = Path(path).expanduser() if isinstance(path, str) and path else None
    last = data.get("last_assistant_message")
    info = {
        k: data[k]
        for k in ("session_id", "hook_event_name", "turn_id", "agent_id", "cwd")
        if k in data
    }
    last = last if isinstance(last, str) and last.strip() else None
    return _Payload(
        session, thread, transcript, last, event, data.get("stop_hook_active") is True, info
    )


class Hook:
    """One run of a Stop hook."""

    def __init__(
        self, agent: str, engine_factory, plugins_factory, run_config, options: HookOptions
    ):
        self.agent = agent
        self.format_name = self.injector_name = ""  # as the agent's format declares (`run`)
        self.engine_factory, self.plugins_factory = engine_factory, plugins_factory
        if run_config.agents is None:  # the observer is chosen for this agent's vendor
            run_config = replace(run_config, agents=[agent])
        self.run_config, self.options = run_config, options
        self.started = time.monotonic()
        self.wait_until = self.started + options.deadline  # no wait for the store goes past it
        self.timings: dict[str, float] = {}
        self.engine: Engine | None = None  # opened by `run`
        self.plugins: Plugins | None = None
        self.now: CheckpointNow | None = None  # the audit, with the call under way

    def _lap(self, name: str, since: float) -> float:
        now = time.monotonic()
        self.timings[name] = self.timings.get(name, 0.0) + (now - since)
        return now

    @property
    def store(self) -> Engine:
        """The store, once `run` has opened it."""
        assert self.engine is not None, "the hook has not opened the store yet"
        return self.engine

    @property
    def registry(self) -> Plugins:
        """The plugins, once `run` has loaded them."""
        assert self.plugins is not None, "the hook has not loaded the plugins yet"
        return self.plugins

    def remaining(self) -> float:
        return self.options.deadline - (time.monotonic() - self.started)

    def _call_time(self) -> float:
        """The seconds the observer call may take: what is left of the deadline, less room to
        record and deliver its answer."""
        seconds = self.remaining() - MARGIN
        if seconds <= 0:
            raise DeadlinePassed(
                f"deadline exceeded: no time left for the observer call within {self.options.deadline:g}s"
            )
        return seconds

    # -- the steps ------------------------------------------------------------------------
    def _ingest(self, path: Path | None) -> None:
        from .lookup import ingest

        ingest(self.store, self.registry, self.format_name, path)

    def _guidance(self, p: _Payload, thread) -> None:
        """Read the instruction files of the agent's directory from disk, as they are now."""
        from ..ingest import guidance

        cwd = p.info.get("cwd")
        with self.store.begin() as conn:
            for where in dict.fromkeys(
                d for d in (cwd if isinstance(cwd, str) else None, thread.cwd) if d
            ):
                guidance.collect_disk(conn, thread.id, where, self.agent)

    def _messages(self, p: _Payload, thread) -> list:
        """The stored thread, waiting a little for a transcript file that lags the payload."""
        from ..model import Block
        from ..store.threads import StoredMessage, load_messages
        from .lookup import caught_up

        messages = load_messages(self.store, thread.id)
        if p.last_message is None:
            return messages
        waited = 0.0
        while not caught_up(messages, p.last_message) and waited < self.options.lag_wait:
            time.sleep(0.1)
            waited += 0.1
            self._ingest(p.transcript)
            messages = load_messages(self.store, thread.id)
        if caught_up(messages, p.last_message):
            return messages
        # The file has not caught up: judge the turn with the message the agent handed over.
        digest = hashlib.sha256(p.last_message.encode()).hexdigest()[:16]
        seq = (messages[-1].seq + 1) if messages else 0
        messages.append(
            StoredMessage(
                0,
                f"hook:{digest}",
                "assistant",
                "agent",
                datetime.now(UTC),
                None,
                seq,
                [Block("text", text=p.last_message)],
            )
        )
        return messages

    def run(self, raw: str, stream: TextIO) -> HookOutcome:
        t = time.monotonic()
        try:
            p = _payload(self.agent, raw)
        except ValueError:
            self.engine = self.engine_factory(self.wait_until)  # so that the bad input is recorded
            raise
        if p.active:
            return HookOutcome(
                "skipped", "stop_hook_active: the agent already goes on because of a Stop hook"
            )
        self.engine = self.engine_factory(self.wait_until)
        self.plugins = self.plugins_factory()
        self.format_name, hooks = self.plugins.live_agent(self.agent)
        self.injector_name = hooks.injector
        t = self._lap("open", t)
        self._ingest(p.transcript)
        t = self._lap("ingest", t)
        from .lookup import end_of_turn, find_thread

        thread = find_thread(self.store, self.agent, p.thread)
        if thread is None:
            return HookOutcome(
                "skipped", f"thread {p.thread} is not in the store (transcript: {p.transcript})"
            )
        self._guidance(p, thread)
        messages = self._messages(p, thread)
        t = self._lap("load", t)
        cp = end_of_turn(thread.id, messages)
        if cp is None:
            return HookOutcome("skipped", "the thread does not end with an end of turn")
        return self._audit(p, thread, messages, cp, stream, t)

    def _audit(
        self, p: _Payload, thread, messages: list, cp, stream: TextIO, t: float
    ) -> HookOutcome:
        import asyncio

        from ..audit.observer_audit import CheckpointNow

        now = self.now = CheckpointNow(self.store, self.registry, self.run_config)
        a = now.auditor
        note = {"hook": {"agent": self.agent, **p.info}}
        checked = asyncio.run(now.audit(cp, thread, messages, note, self._call_time))
        if now.call_seconds:
            self.timings["observer"] = now.call_seconds
        t = self._lap("gate+format", t + now.call_seconds)
        if checked.verdict_id is None:
            status = "failed" if checked.failed else "silent"
            return HookOutcome(status, checked.why, a.summary.run_id)
        outcome = self._deliver(p, thread, messages, cp, checked.verdict_id, stream)
        a.recorder.finish_run(
            "failed" if outcome.status == "failed" else "done",
            outcome.detail if outcome.status == "failed" else None,
        )
        outcome.run_id = a.summary.run_id
        self._lap("deliver", t)
        return outcome

    def _deliver(
        self, p: _Payload, thread, messages: list, cp, verdict_id: int, stream: TextIO
    ) -> HookOutcome:
        from ..store import schema as s
        from ..store.threads import load_messages
        from . import delivery as inject
        from .lookup import same_text

        with self.store.connect() as conn:
            v = conn.execute(s.Verdict.__table__.select().where(s.Verdict.id == verdict_id)).one()
        if v.status == "error":
            return HookOutcome(
                "failed", f"observer call failed: {v.problem}", verdict_id=verdict_id
            )
        if v.status != "ok" or not v.needs_correction:
            detail = "no correction" if v.status == "ok" else f"invalid answer: {v.problem}"
            return HookOutcome("silent", detail, verdict_id=verdict_id)
        # The user may have written while the observer thought (docs/design.md): read what came since.
        self._ingest(p.transcript)
        stored = [m for m in messages if m.id]  # without a stand-in for a lagging file
        stored += load_messages(
            self.store, thread.id, after_id=max((m.id for m in stored), default=0)
        )
        ref = cp.message_id
        if p.last_message and not any(m.native_id == ref for m in stored):
            # The turn was judged on the payload's message; the file may have it by now.
            ref = next(
                (
                    m.native_id
                    for m in reversed(stored)
                    if m.role == "assistant" and same_text(m, p.last_message)
                ),
                ref,
            )
        correction = inject.Correction(
            verdict_id,
            v.checkpoint_id,
            thread.id,
            thread.native_id,
            thread.agent,
            v.message,
            ref,
            v.observer,
            v.model,
            v.created_at,
            thread.cwd,
            str(p.transcript) if p.transcript else None,
        )
        injector = self.registry.injector(self.injector_name)
        d = inject.deliver(
            self.store,
            injector,
            correction,
            stored,
            {"stream": stream},
            max_consecutive=self.options.max_corrections,
        )
        if d.status == inject.DELIVERED:
            return HookOutcome("blocked", v.message, verdict_id=verdict_id)
        return HookOutcome(
            "failed" if d.status == inject.FAILED else "silent",
            f"correction not delivered: {d.error}",
            verdict_id=verdict_id,
        )


def record_failure(hook: Hook, error: str) -> int | None:
    """Record a hook that failed: an error verdict for a call cut short, and a failed run."""
    from ..store import schema as s
    from ..store.db import utcnow

    engine, agent, run_config = hook.store, hook.agent, hook.run_config
    auditor = hook.now.auditor if hook.now is not None else None
    if hook.now is not None:
        hook.now.cut_short(error)
    if auditor is not None and auditor.summary.run_id is not None:
        auditor.recorder.finish_run("failed", error)
        return auditor.summary.run_id
    with engine.begin() as conn:
        return conn.execute(
            s.Run.__table__.insert()
            .values(
                started_at=utcnow(),
                ended_at=utcnow(),
                status="failed",
                observer=(auditor.observing.name if auditor else run_config.observer) or "",
                model=(auditor.observing.model if auditor else run_config.model) or "",
                config={**run_config.for_record(), "hook": {"agent": agent}},
                error=error,
            )
            .returning(s.Run.id)
        ).scalar_one()


def run_hook(
    agent: str,
    raw: str,
    stream: TextIO,
    *,
    engine_factory,
    plugins_factory,
    run_config,
    options: HookOptions | None = None,
) -> HookOutcome:
    """Run the Stop hook of `agent` on the payload `raw`; never raise.

    Whatever the outcome, the agent may stop unless a block was written to `stream`. Errors
    are recorded (a failed run, or an error verdict for a failed observer call) when the
    store can take them before the deadline; otherwise `recorded` is False. The store is
    opened with `engine_factory(wait_until)`: no wait for its locks may go past `wait_until`.
    """
    options = options or HookOptions()
    hook = Hook(agent, engine_factory, plugins_factory, run_config, options)
    watchdog = Watchdog(options.deadline)
    try:
        with watchdog:
            outcome = hook.run(raw, stream)
    except BaseException as exc:  # noqa: BLE001 - fail open, whatever it was
        if isinstance(exc, KeyboardInterrupt):
            error = "interrupted"
        else:
            error = str(exc) if isinstance(exc, DeadlinePassed) else _describe(exc)
        outcome = HookOutcome("failed", error)
        if hook.engine is not None:
            try:
                if isinstance(exc, (DeadlinePassed, KeyboardInterrupt)):
                    # Cut short mid-statement, a pooled connection may be unusable (PostgreSQL:
                    # its transaction aborted): the failure is recorded on a fresh one.
                    hook.engine.dispose()
                outcome.run_id = record_failure(hook, error)
            except Exception as again:  # noqa: BLE001 - the store itself is the problem
                outcome.detail += f" (and it could not be recorded: {_describe(again)})"
                outcome.recorded = False
        else:
            outcome.recorded = False
    outcome.timings = {**hook.timings, "total": time.monotonic() - hook.started}
    return outcome


def _describe(exc: BaseException) -> str:
    """One line for an error: the driver's own message, without SQLAlchemy's SQL dump."""
    orig = getattr(exc, "orig", None)  # sqlalchemy.exc.DBAPIError
    if isinstance(orig, Exception):
        exc = orig
    return f"{type(exc).__name__}: {exc}"


class Watchdog:
    """Raise DeadlinePassed in the main thread once `seconds` have passed (a backstop: the
    observer call has its own, shorter timeout). Does nothing outside the main thread.

    The alarm repeats every REPEAT seconds until the block is left: an exception raised while
    Python runs a finalizer or a weakref callback (SQLAlchemy's, say) is printed and dropped,
    and the next alarm raises it again where it can propagate."""

    REPEAT = 0.1

    def __init__(self, seconds: float):
        self.seconds = max(0.05, seconds)
        self.previous: Callable[[int, FrameType | None], Any] | int | None = None
        self.armed = False

    def _expire(self, signum, frame):
        if self.armed:
            raise DeadlinePassed(f"deadline exceeded: the hook ran past {self.seconds:g}s")

    def __enter__(self) -> Self:
        import threading

        if hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGALRM, self._expire)
            self.armed = True
            signal.setitimer(signal.ITIMER_REAL, self.seconds, self.REPEAT)
        return self

    def __exit__(self, *exc) -> None:
        if self.armed:
            self.armed = False  # first: an alarm from here on raises nothing
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(
                signal.SIGALRM, self.previous if self.previous is not None else signal.SIG_DFL
            )
