"""`auditor run`: gate -> format -> observe -> record, over the stored threads.

The run is idempotent and resumable: a checkpoint already answered by the same observer,
model and prompt over the same rendered thread content is never sent again, and each verdict
is committed as soon as it arrives, so a run killed at any moment loses nothing answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Callable, Iterator
from dataclasses import replace

from sqlalchemy import Engine

from ..errors import AuditorError, ObserverDown
from ..plugins import Plugins
from ..store.db import connection_lost, lost_store
from .observer_audit import Auditor
from .run_types import RunConfig, RunInterrupted, RunSummary
from .sharing import sharing_for


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
