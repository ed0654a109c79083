"""The session worker behind the hooks: audit in the background, stage corrections, cancel.

Started by `auditor.live.fast_path` (the hooks' fast path) as `auditor hook worker AGENT DIR`, one per
session, detached from the agent. It holds DIR/worker.lock while it runs, follows
DIR/events.jsonl, and for each thread of the session:

- on `PostToolUse` or `PostToolUseFailure` (a tool call came back) it reads the new tail of
  the transcript into the store and audits the tool round as an every-inference checkpoint;
  on `Stop`/`SubagentStop` it audits the end of the turn. The client writes its transcript
  after it runs the hook, so the worker waits, a bounded time, for what the event names: the
  result of the event's `tool_use_id`, the stop's `last_assistant_message`. Events that arrive
  while an audit is under way are coalesced: the latest one is audited next;
- on `UserPromptSubmit` it cancels the audits under way (each recorded as a `cancelled`
  verdict with the time it had run, and its cost when the answer came in anyway) and holds
  back every correction not yet handed over, unless the client wrote the prompt itself (a
  task notification), which changes nothing;
- on `SessionEnd` it finishes the audits under way and exits;
- a correction the loop guards let through is written to DIR/outbox, where the next hook
  event of the thread picks it up; hand-overs (DIR/sent) and take-backs (DIR/dropped) are
  recorded in the `injections` table like any other delivery.

It exits when the session ended or has been idle for `idle` seconds. Every audit is a run in the store,
recorded exactly as `auditor run` records it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import stat
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import fast_path as live

if TYPE_CHECKING:
    from ..audit.observer_audit import CheckpointNow

# The worker waits for events on its wake-up pipe (`fast_path.wake`: each hook event writes a
# byte into it), and looks at the spool LOOK seconds after its last look if nothing woke it,
# should a wake-up be missed (a hook of an older auditor). Without the pipe (no FIFO there) it
# looks every POLL seconds. An idle worker runs beside the user's agent for the whole session:
# looking 20 times a second cost ~5 ms of CPU a second.
POLL = 0.05  # seconds between looks at the spool without the wake-up pipe
LOOK = 0.5  # seconds between looks at the spool with it, when nothing wakes the worker
# Seconds between looks at a transcript the worker waits on: WATCH at first (it usually lags
# the hook by tens of milliseconds), each wait half as long again up to WATCH_MOST.
WATCH = 0.05
WATCH_MOST = 0.25
IDLE = 120.0  # seconds without an event before the worker exits
LAG = 5.0  # at most, seconds to wait for the transcript to hold what a hook event names
# A worker's lifetime has a ceiling: past it the worker finishes its audit under way and exits
# (the session's next hook event starts a new one), so nothing it holds lives for days.
LIFETIME = float(os.environ.get("AUDITOR_WORKER_LIFETIME") or 4 * 3600)


@dataclass
class WorkerOptions:
    deadline: float = 30.0  # seconds an observer call may take
    max_corrections: int = 2
    idle: float = IDLE
    lag: float = LAG


@dataclass
class _Audit:
    event: dict
    start: int  # where the event's line starts in events.jsonl
    offset: int  # where it ends: a prompt recorded from here on came after it
    task: asyncio.Task | None = None
    now: CheckpointNow | None = None  # its run, once the transcript holds the checkpoint
    cancelled: bool = False
    why: str = ""
    running: bool = False  # its task has begun (a task cancelled before it begins runs nothing)


@dataclass
class _Thread:
    current: _Audit | None = None
    waiting: _Audit | None = None  # the latest event that came in during `current`
    corrected: bool = False  # a correction went out since the user last wrote
    skipped: list = field(default_factory=list)


class Worker:
    """One session's worker (see the module docstring)."""

    def __init__(
        self,
        sdir: str,
        agent: str,
        engine,
        plugins,
        run_config,
        options: WorkerOptions | None = None,
        log=print,
    ):
        self.sdir, self.agent = sdir, agent
        self.engine, self.plugins = engine, plugins
        # Live audits follow docs/design.md ("When the observer steps in"): every completed tool round is a checkpoint, and an end
        # of turn the user already answered is never audited.
        self.run_config = replace(
            run_config,
            gate={**run_config.gate, "mode": "every-inference"},
            concurrency=1,
            agents=run_config.agents or [agent],  # the observer is chosen for its vendor
        )
        self.options = options or WorkerOptions()
        self.log = log
        self.threads: dict[str, _Thread] = {}
        self.offset, corrected = self._load_state()
        for thread in corrected:
            self.threads[thread] = _Thread(corrected=True)
        self.last_event = time.monotonic()
        self.done: dict[str, int] = {}
        self.ending = ""  # why the worker leaves before it is idle (SessionEnd, a new environment)
        self.expired = False  # past its lifetime: it takes no new event (see `handle`)
        self.env_mark = live.env_mark()
        # Each thread's stored messages as last loaded: an event loads only the rows stored
        # since (see `_messages`), so that its cost does not grow with the session; with the
        # message of the largest row id among them. Their long bodies stay in the store and
        # are read back when used (`auditor.store.kept_bodies`), so that what the worker holds
        # does not grow with the session's tool outputs.
        self._loaded: dict[int, tuple[list, Any]] = {}
        from ..store.kept_bodies import StoredBodies

        self.bodies = StoredBodies(engine)
        self._pipe: tuple[int, int] | None = None  # the wake-up pipe's two ends (`_listen`)

    # What the agent's format declares (`LiveHooks`), looked up at first use: the formats are
    # loaded while the observer's SDK is (`warm_up`), not before.
    @property
    def format_name(self) -> str:
        return self.plugins.live_agent(self.agent)[0]

    @property
    def injector_name(self) -> str:
        return self.plugins.live_agent(self.agent)[1].injector

    # -- the spool ------------------------------------------------------------------------
    def _path(self, *parts: str) -> str:
        return os.path.join(self.sdir, *parts)

    def _load_state(self) -> tuple[int, list[str]]:
        try:
            state = json.loads(Path(self._path("worker.state")).read_text())
            offset, corrected = int(state["offset"]), [str(t) for t in state["corrected"]]
        except FileNotFoundError:
            return 0, []
        except (OSError, ValueError, KeyError, TypeError) as exc:
            self._set_aside("worker.state", f"unreadable ({type(exc).__name__}: {exc})")
            return 0, []
        try:
            size = os.path.getsize(self._path(live.EVENTS))
        except OSError:
            size = 0
        if offset > size:  # the events were cut or replaced: what is there now is unread
            self.log(f"worker.state: offset {offset} past the events' end ({size}): from 0")
            offset = 0
        return offset, corrected

    # A damaged spool file (cut short by a full disk or a crash, edited by hand) is moved to
    # DIR/damaged with a line in the worker's log, so that the rest of the session goes on.
    ENTRY_KEYS = ("verdict_id", "checkpoint_id", "thread_id", "thread", "message", "checkpoint")

    def _set_aside(self, name: str, why: str) -> None:
        os.makedirs(self._path("damaged"), exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            os.replace(self._path(name), self._path("damaged", name.replace(os.sep, "-")))
            self.log(f"{name}: set aside in damaged/: {why}")

    def _entry(self, where: str, name: str) -> dict | None:
        """The correction in `where/name`, or None (a damaged one set aside)."""
        try:
            entry = json.loads(Path(self._path(where, name)).read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            self._set_aside(os.path.join(where, name), f"not JSON ({exc})")
            return None
        if not isinstance(entry, dict) or any(k not in entry for k in self.ENTRY_KEYS):
            self._set_aside(os.path.join(where, name), "not a correction (fields missing)")
            return None
        return entry

    def _save_state(self) -> None:
        """Persist how far the events are handled (before any audit still under way, so that
        a worker started after a crash takes it up again) and the threads just corrected."""
        under_way = [
            a.start for t in self.threads.values() for a in (t.current, t.waiting) if a is not None
        ]
        state = {
            "offset": min([self.offset, *under_way]),
            "corrected": sorted(n for n, t in self.threads.items() if t.corrected),
        }
        if state == getattr(self, "_saved", None):
            return
        tmp = self._path("worker.state.tmp")
        Path(tmp).write_text(json.dumps(state))
        os.replace(tmp, self._path("worker.state"))
        self._saved = state

    def _read_events(self) -> list[tuple[dict, int, int]]:
        try:
            with open(self._path(live.EVENTS), "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except FileNotFoundError:
            return []
        end = data.rfind(b"\n") + 1  # a line still being written waits for the next look
        out = []
        pos = self.offset
        for line in data[:end].splitlines(keepends=True):
            start, pos = pos, pos + len(line)
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict):
                out.append((event, start, pos))
        self.offset += end
        return out

    # -- recording hand-overs -------------------------------------------------------------
    def fold(self) -> None:
        """Record the hand-overs (sent/) and take-backs (dropped/) the hooks made."""
        from . import delivery as inject

        for where, status in (("sent", inject.DELIVERED), ("dropped", inject.SKIPPED)):
            try:
                names = sorted(os.listdir(self._path(where)))
            except FileNotFoundError:
                continue
            for name in names:
                path = self._path(where, name)
                entry = self._entry(where, name)
                if entry is None:
                    continue
                event = name.rsplit(".", 2)[-2] if name.count(".") >= 2 else "?"
                self._record_injection(entry, status, event)
                os.unlink(path)
                if status == inject.DELIVERED:
                    self.threads.setdefault(entry["thread"], _Thread()).corrected = True

    def _record_injection(self, entry: dict, status: str, event: str) -> None:
        from ..store.threads import load_messages
        from . import delivery as inject

        c = self._correction(entry)
        turn_key, _ = inject.turn_facts(
            load_messages(self.engine, c.thread_id), c.checkpoint_message
        )
        with self.engine.begin() as conn:
            if status == inject.DELIVERED:
                inject.record(conn, c, self.injector_name, status, turn_key, target=f"hook {event}")
            else:
                inject.record(
                    conn,
                    c,
                    self.injector_name,
                    status,
                    turn_key,
                    error=inject.taken_back(event),
                )
        self.log(f"verdict {c.verdict_id}: {status} at {event}")

    def _correction(self, entry: dict):
        from . import delivery as inject

        return inject.Correction(
            entry["verdict_id"],
            entry["checkpoint_id"],
            entry["thread_id"],
            entry["thread"],
            self.agent,
            entry["message"],
            entry["checkpoint"],
            entry["observer"],
            entry["model"],
        )

    # -- events ---------------------------------------------------------------------------
    def handle(self, events: list[tuple[dict, int, int]]) -> None:
        # A tool round whose turn has already ended in the same batch is left to that stop's
        # audit, which covers it (and which an agent may be waiting for at its Stop).
        stopped = {
            i: str(e.get("thread") or e.get("session_id") or "")
            for i, (e, _, _) in enumerate(events)
            if e.get("hook_event_name") in live.STOPS
        }
        for i, (event, start, end) in enumerate(events):
            name = event.get("hook_event_name")
            thread = str(event.get("thread") or event.get("session_id") or "")
            if self.expired:
                # Past its lifetime the worker takes no new event, or a session whose events
                # keep it busy (an observer that keeps failing, audits back to back) would keep
                # it for ever: this event and those after it are the next worker's, which the
                # session's next hook event starts once this one has finished what is under way.
                self.offset = start
                return
            if event.get("env") not in (None, self.env_mark):
                # A key or the store changed: this event and those after it are the next
                # worker's (its hook started it); this one finishes what is under way.
                self.offset = start
                if not self.ending.startswith("handed over"):
                    self.log(f"{name}: the environment changed; handing the session over")
                self.ending = "handed over to a worker with the new environment"
                return
            self.ending = ""  # an event after a SessionEnd: the session was resumed
            if name in live.TOOL_EVENTS and any(
                j > i and th == thread for j, th in stopped.items()
            ):
                continue
            if name == live.PROMPT:
                if not live.typed(event):
                    continue  # the client's own (a task notification): the user did not write
                self.cancel_all(f"the user wrote ({live.PROMPT})")
                live.drop_all(self.sdir)
                for t in self.threads.values():
                    t.corrected = False
                continue
            if name == live.SESSION_END:
                self.ending = "the session ended"  # exit once the audits under way are done
                continue
            if name not in (*live.TOOL_EVENTS, *live.STOPS):
                continue
            t = self.threads.setdefault(thread, _Thread())
            audit = _Audit(event, start, end)
            if t.current is None:
                self._start(thread, t, audit)
            else:
                t.waiting = audit  # the latest event wins; it runs when the current one ends

    def _start(self, thread: str, t: _Thread, audit: _Audit) -> None:
        t.current = audit
        audit.task = asyncio.get_running_loop().create_task(self._audit(thread, t, audit))

    def cancel_all(self, why: str) -> None:
        for thread, t in self.threads.items():
            t.waiting = None
            a = t.current
            if a is not None and a.task is not None and not a.task.done():
                a.cancelled = True
                a.why = why
                a.task.cancel()
                if not a.running:
                    # Started in the same look at the events as the prompt that cancels it
                    # (a stop and the next prompt, read together on a loaded machine): its
                    # task never runs, so its own clean-up does not either; done here.
                    t.current = None
                    self._mark_done(thread, a.offset)

    # -- one audit ------------------------------------------------------------------------
    def _audit_ceiling(self) -> float:
        """The longest one audit may take: the wait for the transcript (and for a tool
        round's answer to end), the observer's call with its retries (as `Caller.call` bounds
        it), and room for the store."""
        return self.options.lag + self.options.deadline * 5 + 60

    async def _audit(self, thread: str, t: _Thread, audit: _Audit) -> None:
        audit.running = True
        ceiling = self._audit_ceiling()
        try:
            await asyncio.wait_for(self._audit_inner(thread, t, audit), ceiling)
        except TimeoutError:
            self.log(f"audit at {audit.event.get('hook_event_name')}: given up after {ceiling:g} s")
            audit.why = f"no end within {ceiling:g} s"
            self._record_cancel(audit)
        except asyncio.CancelledError:
            self._record_cancel(audit)
        except Exception as exc:  # noqa: BLE001 - one failed audit must not end the worker
            from ..store.db import lock_timed_out, lock_wait, one_line

            said = one_line(exc)
            if lock_timed_out(exc):
                said = (
                    f"another process held the store's lock for {lock_wait():g} s ({said}); "
                    "the session's next event reads the transcript again"
                )
            self.log(f"audit at {audit.event.get('hook_event_name')} failed: {said}")
            if audit.now is not None and audit.now.auditor.summary.run_id is not None:
                try:
                    audit.now.auditor.recorder.finish_run("failed", said)
                except Exception:  # noqa: BLE001 - the audit's own failure is being reported; recording it must not hide it
                    pass
        finally:
            t.current = None
            self._mark_done(thread, audit.offset)
            nxt, t.waiting = t.waiting, None
            if nxt is not None:
                self._start(thread, t, nxt)

    def _mark_done(self, thread: str, offset: int) -> None:
        """Say how far the audits of `thread` are finished (`--rewake` waits on it)."""
        self.done[thread] = max(offset, self.done.get(thread, 0))
        tmp = self._path("done.json.tmp")
        Path(tmp).write_text(json.dumps(self.done))
        os.replace(tmp, self._path("done.json"))

    def _record_cancel(self, audit: _Audit) -> None:
        """Record a cancelled audit: its call as a `cancelled` verdict, its run as done."""
        now, why = audit.now, audit.why or "cancelled"
        if now is None:
            return
        from .delivery import cancelled

        took = now.took()
        if (vid := now.cut_short(cancelled(why, took), status="cancelled")) is not None:
            self.log(f"verdict {vid}: cancelled {took:.1f}s into the call ({why})")
        now.auditor.recorder.finish_run("done")

    async def _audit_inner(self, thread_native: str, t: _Thread, audit: _Audit) -> None:
        from ..audit.observer_audit import CheckpointNow
        from ..store.kept_bodies import BodyChanged

        event = audit.event
        name = event.get("hook_event_name")
        self.fold()  # a hand-over made since this audit was queued counts already
        if t.corrected:
            self.log(f"{name}: no audit right after a course correction (after-correction)")
            return
        if self._waiting(thread_native):
            # The correction would be held back anyway (one-per-gap): no call for it.
            self.log(f"{name}: no audit while a correction waits to go out (one-per-gap)")
            return
        path = event.get("transcript_path")
        if name == "SubagentStop" and event.get("agent_transcript_path"):
            path = event["agent_transcript_path"]
        for again in (False, True):
            found = await self._wait_for(thread_native, event, path)
            if found is not None and name not in live.STOPS and _stop_waiting(t):
                # The turn has ended meanwhile: its stop's audit covers this round, and the
                # agent (Codex's Stop handler) may be waiting for that one.
                self.log(f"{name}: the turn ended meanwhile; its end is audited instead")
                return
            if found is None:
                self.log(f"{name}: nothing to audit (the transcript has no matching checkpoint)")
                return
            thread, messages, cp = found
            now = audit.now = CheckpointNow(self.engine, self.plugins, self.run_config)
            note = {"hook": {"agent": self.agent, "live": True, **_trigger(event)}}
            try:
                checked = await now.audit(cp, thread, messages, note, lambda: self.options.deadline)
            except BodyChanged as exc:
                # A body read back is no longer in the store as loaded (another process
                # stored the transcript again): the thread is loaded again, as the store holds
                # it now, and the checkpoint looked for in it once more.
                now.auditor.recorder.finish_run("failed", str(exc))
                self._loaded.clear()
                self.bodies.clear()
                if again:
                    raise
                self.log(f"{name}: {exc}; loading the thread again")
                continue
            break
        if checked.verdict_id is None:
            self.log(f"{name}: {checked.why}")
            return
        now.auditor.recorder.finish_run("done")
        self._stage(thread, messages, cp, checked.verdict_id, audit)

    def _waiting(self, thread_native: str) -> bool:
        """True when a correction for `thread_native` waits in the outbox."""
        try:
            names = [n for n in os.listdir(self._path("outbox")) if n.endswith(".json")]
        except FileNotFoundError:
            return False
        for name in names:
            entry = self._entry("outbox", name)
            if entry is None:
                continue
            if entry.get("thread") == thread_native:
                return True
        return False

    async def _wait_for(self, thread_native: str, event: dict, path):
        """(thread, messages, checkpoint) once the transcript holds what `event` names, or None
        when it does not within `lag` seconds.

        A tool event names its call (`tool_use_id`): the checkpoint is the tool round holding
        its result, once every call of that round is answered and the model's answer is over
        (`lookup.response_open`: its next answer shows it, which may come after `lag`; that
        wait is bounded by the observer's `deadline`). A stop names the final message
        (`last_assistant_message`): the checkpoint is the end of turn, once the thread ends
        with that message. The file is read again only when it grew."""
        from . import lookup

        name = event.get("hook_event_name")
        began = time.monotonic()
        until = began + self.options.lag
        size = -1
        looks = 0
        pause = WATCH
        while True:
            now_size = _size(path)
            if now_size != size:
                size = now_size
                self._ingest(path)
                thread = lookup.find_thread(self.engine, self.agent, thread_native)
                if thread is not None:
                    messages = self._messages(thread.id)
                    if name in live.STOPS:
                        last = event.get("last_assistant_message")
                        cp = lookup.end_of_turn(thread.id, messages, last)
                    else:
                        call = event.get("tool_use_id")
                        cp = lookup.tool_round(thread.id, messages, call)
                        if cp is None and lookup.response_open(messages, call):
                            until = began + self.options.lag + self.options.deadline
                    if cp is not None:
                        if looks:  # how far the transcript lagged the hook (docs/live-hooks.md)
                            waited = (time.monotonic() - began) * 1000
                            self.log(f"{name}: the transcript caught up after {waited:.0f} ms")
                        return thread, messages, cp
            if time.monotonic() >= until:
                self.log(f"{name}: the transcript did not catch up in {self.options.lag:g} s")
                return None
            looks += 1
            await asyncio.sleep(min(pause, max(until - time.monotonic(), 0.0)))
            pause = min(pause * 1.5, WATCH_MOST)

    def _messages(self, thread_id: int) -> list:
        """The thread's stored messages, in order: those loaded before and the rows stored
        since. Everything is loaded again when the earlier rows changed (a rewritten file is
        read again under new row ids) or a new row sorts before the last one kept."""
        from ..store.kept_bodies import load_messages
        from ..store.sql_text import DriverSql

        if thread_id in self._loaded:
            kept, last = self._loaded[thread_id]
            # The earlier rows are all still there when the thread's count (kept up to date
            # with its rows) is what was loaded plus the rows stored since, and the last row
            # loaded is still the same message (SQLite gives a deleted row's id to the next
            # one stored: a file rewritten elsewhere can come back under the same ids). One
            # statement reads all three; the new rows are found from the largest ids down,
            # not through the thread.
            with self.engine.connect() as conn:
                count, since, native = DriverSql(conn).all(
                    "SELECT (SELECT message_count FROM threads WHERE id = ?), "
                    "(SELECT count(*) FROM messages WHERE id > ? AND thread_id + 0 = ?), "
                    "(SELECT native_id FROM messages WHERE id = ? AND thread_id = ?)",
                    (thread_id, last.id, thread_id, last.id, thread_id),
                )[0]
            if count == len(kept) + since and native == last.native_id:
                new = load_messages(self.engine, thread_id, self.bodies, after_id=last.id)
                if not new or new[0].seq >= kept[-1].seq:  # (seq, id) order: they come after
                    kept = kept + new
                    self._loaded[thread_id] = (kept, max([last, *new], key=_row_id))
                    self.bodies.compact(thread_id, kept)  # old turns' bodies left in the store
                    return kept
        kept = load_messages(self.engine, thread_id, self.bodies)
        if kept:
            self._loaded[thread_id] = (kept, max(kept, key=_row_id))
            self.bodies.compact(thread_id, kept)
        return kept

    def _ingest(self, path):
        """Read the new tail of the transcript at `path`; the ingest's summary (None: no file)."""
        from . import lookup

        done = lookup.ingest(self.engine, self.plugins, self.format_name, path)
        # Only a file read again from its start replaces the rows kept. A failed read does
        # not: the usual one is the agent's last line caught half written (the next read goes
        # on from its start), and the rows stored before it stand (`_messages` checks them).
        # Loading the thread whole at each such event made every formatter state a new one.
        if done is not None and any(f.reread for f in done.files):
            self._loaded.clear()  # rows were read again under new ids: load them whole
            self.bodies.clear()
        for f in done.files if done is not None else ():
            if f.unread:
                self.log(
                    f"{path}: read {lookup.READ_PER_EVENT >> 20} MB of it at this event; the "
                    f"other {f.unread:,} bytes at the session's next events"
                )
        return done

    def _stage(self, thread, messages: list, cp, verdict_id: int, audit: _Audit) -> None:
        """Hand a correction to the outbox injector, which stages it for the thread's next
        hook event once the loop guards let it through."""
        from ..store import schema as s
        from . import delivery as inject

        with self.engine.connect() as conn:
            v = conn.execute(s.Verdict.__table__.select().where(s.Verdict.id == verdict_id)).one()
        if v.status != "ok" or not v.needs_correction or not v.message:
            self.log(f"verdict {verdict_id}: {v.status}, no correction")
            return
        c = inject.Correction(
            verdict_id,
            v.checkpoint_id,
            thread.id,
            thread.native_id,
            self.agent,
            v.message,
            cp.message_id,
            v.observer,
            v.model,
        )
        self.fold()
        if self.threads.setdefault(thread.native_id, _Thread()).corrected:
            self.log(f"verdict {verdict_id}: held back (after-correction: one went out meanwhile)")
            return
        if os.path.exists(self._path("outbox", f"{verdict_id:012d}.json")):
            return  # staged already (the same checkpoint, audited once, seen again)
        options = {"spool": live.SessionSpool(self.sdir), "since": audit.offset, "kind": cp.kind}
        d = inject.deliver(
            self.engine,
            self.plugins.injector("outbox"),
            c,
            messages,
            options,
            max_consecutive=self.options.max_corrections,
        )
        if d.status == inject.STAGED:
            self.log(
                f"verdict {verdict_id}: correction ready for the next {thread.native_id} event"
            )
        else:
            self.log(f"verdict {verdict_id}: held back ({d.error})")

    # -- the loop -------------------------------------------------------------------------
    def warm_up(self) -> None:
        """Load the observer's SDK in the background while the first events are read: its
        import takes seconds on a loaded machine, and an agent may be waiting at its Stop."""
        import threading

        def load() -> None:
            from ..audit.observer_choice import choose_for

            c = self.run_config
            try:
                name = choose_for(self.plugins, c.observer, c.agents, c.allow_same_vendor).observer
                self.plugins.observer(name).check({})
            except Exception:  # noqa: BLE001 - the audit itself says what is wrong
                pass

        threading.Thread(target=load, daemon=True).start()

    def _listen(self) -> asyncio.Event | None:
        """Open the session's wake-up pipe (DIR/wake, made if missing) for the hooks to wake
        the worker through (`fast_path.wake`); the event set when one did, or None when there
        is no pipe to wait on (the worker then looks every POLL seconds)."""
        path = self._path(live.WAKE)
        try:
            with contextlib.suppress(FileExistsError):
                os.mkfifo(path, 0o600)
            reader = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
            if not stat.S_ISFIFO(os.fstat(reader).st_mode):
                os.close(reader)
                self.log(f"{path} is not a pipe: looking at the spool every {POLL:g} s")
                return None
            # Held open for writing too: a hook closing its end is then no end of file, which
            # would wake the loop at every turn.
            writer = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except (OSError, AttributeError) as exc:  # AttributeError: no os.mkfifo (Windows)
            self.log(f"no wake-up pipe ({exc}): looking at the spool every {POLL:g} s")
            return None
        woken = asyncio.Event()

        def drained() -> None:
            with contextlib.suppress(BlockingIOError):
                while os.read(reader, 4096):
                    pass
            woken.set()

        asyncio.get_running_loop().add_reader(reader, drained)
        self._pipe = (reader, writer)
        return woken

    def _unlisten(self) -> None:
        pipe = self._pipe
        if pipe is not None:
            asyncio.get_running_loop().remove_reader(pipe[0])
            for fd in pipe:
                os.close(fd)
            self._pipe = None

    async def serve(self) -> None:
        self.warm_up()
        woken = self._listen()
        try:
            await self._serve(woken)
        finally:
            self._unlisten()

    async def _serve(self, woken: asyncio.Event | None) -> None:
        born = time.monotonic()
        while True:
            if not self.expired and time.monotonic() - born > LIFETIME:
                self.expired = True
                self.ending = f"lifetime ceiling ({LIFETIME:g} s)"
            events = self._read_events()
            self.fold()  # first: a hand-over made at one of these events counts already
            if events:
                self.last_event = time.monotonic()
                self.handle(events)
            self._save_state()
            busy = any(t.current is not None for t in self.threads.values())
            if not busy and (self.ending or time.monotonic() - self.last_event > self.options.idle):
                return
            if woken is None:
                await asyncio.sleep(POLL)
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(woken.wait(), LOOK)
            woken.clear()


def _row_id(m) -> int:
    return m.id


def _stop_waiting(t: _Thread) -> bool:
    """True when the thread's turn ended while this audit was getting ready."""
    return t.waiting is not None and t.waiting.event.get("hook_event_name") in live.STOPS


def _trigger(event: dict) -> dict:
    """The fields of a hook event worth keeping with the run it started."""
    keep = ("session_id", "hook_event_name", "turn_id", "agent_id", "cwd")
    return {k: event[k] for k in keep if k in event}


def _size(path) -> int:
    try:
        return os.stat(path).st_size if isinstance(path, str) and path else -1
    except OSError:
        return -1


def run_worker(sdir: str, agent: str, engine_factory, plugins_factory, run_config, options) -> int:
    """Serve the session in `sdir` unless another worker does; return the exit status."""
    os.umask(0o077)  # the spool's files and folders are the user's alone (as the hook's)
    os.makedirs(sdir, exist_ok=True)
    path = os.path.join(sdir, "worker.lock")
    fd = _inherited_lock(path)
    takeover = os.environ.pop(live.TAKEOVER_ENV, None) is not None
    if fd is None:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        if not _lock(fd, TAKEOVER_WAIT if takeover else 0.0):
            return 0  # another worker serves this session
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())  # who serves it, for people and tests
    with open(os.path.join(sdir, "worker.env"), "w") as fh:
        fh.write(live.env_mark())  # the hooks compare their environment with it
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
    print(f"{stamp} worker {os.getpid()} serving {sdir}", flush=True)

    def log(text: str) -> None:
        now = time.time()
        print(
            f"{time.strftime('%H:%M:%S', time.localtime(now))}.{int(now % 1 * 1000):03d} {text}",
            flush=True,
        )

    opened = make_spool_private(sdir)
    if opened:
        log(
            f"the spool was readable by others: {opened} of its files and folders made yours "
            "alone (0600 / 0700)"
        )

    engine = engine_factory()
    small_page_cache(engine)
    worker = Worker(sdir, agent, engine, plugins_factory(), run_config, options, log)
    try:
        asyncio.run(worker.serve())
    finally:
        worker.bodies.close()
    log(f"{worker.ending}: exiting" if worker.ending else "idle: exiting")
    pruned = prune(os.path.dirname(sdir))
    if pruned:
        log(f"removed the spools of {pruned} session(s) idle for {KEEP_DAYS} days")
    return 0


TAKEOVER_WAIT = 120.0  # seconds a successor waits for the outgoing worker's lock

# SQLite's page cache on the worker's connections, in KiB. The store's connections keep up to
# 64 MiB of pages each (`auditor.store.db`: a cold ingest's index inserts stay in memory); a
# worker reads a few new lines at each event, and that cache filled with the session's pages
# as it grew: in-process on an 8-copy replica (25 MB of transcript), the worker's RSS from the
# first tenth of the events to the ninth grew 23.6 MB with it, 17.1 MB with 2 MiB, for the
# same CPU (19.4-20.0 s against 18.7-19.3 s in all).
WORKER_PAGE_CACHE_KIB = 2048


def small_page_cache(engine) -> None:
    """Give the connections of a SQLite `engine` a page cache of WORKER_PAGE_CACHE_KIB."""
    if engine.dialect.name != "sqlite":
        return
    from sqlalchemy import event

    def on_connect(dbapi_conn, _record) -> None:  # after the store's own settings
        dbapi_conn.execute(f"PRAGMA cache_size=-{WORKER_PAGE_CACHE_KIB}")

    event.listen(engine, "connect", on_connect)
    engine.dispose()  # the connections opened already (the migration's) are opened again


def _lock(fd: int, wait: float) -> bool:
    """Take the lock on `fd`, waiting up to `wait` seconds for it."""
    import fcntl

    until = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= until:
                return False
            time.sleep(0.1)


def _inherited_lock(path: str) -> int | None:
    """The session's worker lock as the hook that started this worker handed it over (an fd
    already holding the lock), or None."""
    raw = os.environ.pop(live.LOCK_FD_ENV, None)
    if not raw:
        return None
    try:
        fd = int(raw)
        same = os.fstat(fd).st_ino == os.stat(path).st_ino
    except (ValueError, OSError):
        return None
    if not same:
        return None
    os.set_inheritable(fd, False)
    return fd


def make_spool_private(sdir: str) -> int:
    """Make the spool the session's folder is in its owner's alone: one an older auditor made
    (folders 0755, files 0644) holds what the agents wrote. Return how many changed.

    Only folders auditor made are walked: the store's spool (BASE/STORE/AGENT/SESSION, STORE
    named by `state_root`) and, when BASE is auditor's default one, BASE and its parent. A BASE
    the user chose ($AUDITOR_STATE_DIR, perhaps a shared folder such as /tmp) is theirs to set,
    and so is everything in it but our own spool; a session folder outside that layout is
    tightened alone."""
    import re

    from ..owner_only import tighten, tighten_tree

    store = os.path.dirname(os.path.dirname(sdir))
    base = os.path.dirname(store)
    if not re.fullmatch(r"[0-9a-f]{8}", os.path.basename(store)):
        return tighten_tree(sdir)
    if not os.environ.get(live.STATE_ENV) and os.path.basename(base) == "live":
        return tighten_tree(base) + len(tighten([os.path.dirname(base)]))  # ~/.local/state/auditor
    return tighten_tree(store)


KEEP_DAYS = 7


def prune(agent_dir: str, days: float = KEEP_DAYS) -> int:
    """Remove the spools of sessions without an event for `days` and with no worker."""
    import shutil

    from .fast_path import worker_alive

    cutoff = time.time() - days * 86400
    n = 0
    for name in os.listdir(agent_dir):
        path = os.path.join(agent_dir, name)
        try:
            newest = max(os.path.getmtime(os.path.join(path, f)) for f in os.listdir(path))
        except (OSError, ValueError):
            continue
        if newest < cutoff and not worker_alive(path):
            shutil.rmtree(path, ignore_errors=True)
            n += 1
    return n
