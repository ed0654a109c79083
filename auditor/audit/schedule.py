"""Scheduled runs: `auditor run --every 15m` repeats ingest + run until it is stopped.

The first Ctrl-C (or SIGTERM) asks for a clean stop: no new observer call starts, the calls in
flight finish and are recorded, and the loop ends. A second Ctrl-C stops at once (everything
already answered is stored anyway). Overlapping work, e.g. a tick and a slow run started in
another terminal, is kept apart by the leases of `auditor.store.leases`.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Self


class Stopper:
    """Turn the first SIGINT/SIGTERM into a stop request and the second into KeyboardInterrupt."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self._previous: dict[int, Any] = {}

    def requested(self) -> bool:
        return self.event.is_set()

    def _handle(self, signum, frame) -> None:
        if self.event.is_set():
            raise KeyboardInterrupt
        self.event.set()

    def __enter__(self) -> Self:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def repeat(
    interval: float,
    tick: Callable[[int], None],
    stopper: Stopper,
    on_error: Callable[[int, Exception], None],
    clock: Callable[[], float] = time.monotonic,
) -> int:
    """Call `tick(n)` every `interval` seconds until `stopper` says stop; return the ticks run.

    Ticks start on a fixed grid from the first one; a tick that overruns its slot is followed
    at once by the next (missed slots are not made up). A tick that raises is reported through
    `on_error` and the schedule goes on.
    """
    start = clock()
    n = 0
    while not stopper.requested():
        n += 1
        try:
            tick(n)
        except Exception as exc:  # noqa: BLE001 - one bad tick must not end the schedule
            on_error(n, exc)
        if stopper.requested():
            break
        elapsed = clock() - start
        wait = (
            interval - (elapsed % interval) if elapsed >= n * interval else n * interval - elapsed
        )
        stopper.event.wait(wait)
    return n


def run_every(
    engine,
    plugins,
    config,
    every: timedelta | str,
    sources: list[str],
    report: Callable[[str], None],
) -> int:
    """Ingest `sources` then run an audit with `config`, every `every`, until stopped.

    Return the number of ticks run. Raise AuditorError before the first tick when the
    observer cannot be used at all (a missing key would fail every tick the same way).
    """
    from datetime import datetime

    from ..durations import format_duration, parse_duration
    from ..ingest.ingester import ingest
    from .observer_audit import Auditor
    from .run import run

    span = parse_duration(every) if isinstance(every, str) else every
    auditor = Auditor(engine, plugins, config)
    auditor.caller.ensure_usable()
    report(
        f"every {format_duration(span)}: ingest {', '.join(sources) if sources else 'nothing (no sources configured)'}, "
        f"then audit with {auditor.observing.name} {auditor.observing.model}. Ctrl-C stops after the calls in flight."
    )

    with Stopper() as stopper:

        def tick(n: int) -> None:
            parts = [f"tick {n} {datetime.now().strftime('%H:%M:%S')}"]
            if sources:
                got = ingest(engine, plugins, sources)
                parts.append(
                    f"ingested {got.new} new and {got.grown} grown files ({got.messages} messages)"
                )
            if stopper.requested():
                return
            s = run(
                engine, plugins, config, announce=lambda line: None, should_stop=stopper.requested
            )
            parts.append(
                f"run {s.run_id}: {s.audited} audited, {s.corrections} corrections, {s.errors} errors, "
                f"{s.reused} already answered, {s.busy} left to another run"
            )
            if s.budget_note:
                parts.append(s.budget_note)
            report("; ".join(parts))

        return repeat(
            span.total_seconds(),
            tick,
            stopper,
            on_error=lambda n, exc: report(f"tick {n} failed: {exc}"),
        )
