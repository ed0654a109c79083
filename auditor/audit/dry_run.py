"""`auditor run --dry-run`: plan everything, call no model, and estimate what the run would do.

Every checkpoint is gated and formatted as the run would (nothing is recorded, see
`Planner.plan_checkpoint`); the tokens, the cost and the time of the calls are estimated, and
under a budget only the calls it would let start are counted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .observe import ObserverUsage
from .recorder import price_of
from .run_types import RunSummary

if TYPE_CHECKING:
    from .observer_audit import Auditor

CHARS_PER_TOKEN = 4  # a rough estimate: the prompts are not tokenized
EST_OUTPUT_TOKENS = 80


def estimate(auditor: Auditor) -> RunSummary:
    """Gate and format one observer's checkpoints and estimate its calls."""
    config, summary = auditor.config, auditor.summary
    batch = bool(config.batch or config.collect)
    if batch:
        from .batch import check

        check(auditor)  # refused as the run itself would be
    auditor.set_budget()  # refused as the run would be: a budget on a model without a price
    cap, o = auditor.caller.budget, auditor.observing
    room = cap.limit if cap is not None else None
    chars = 0
    sent = 0
    expected = 0.0  # what the calls counted so far are expected to cost
    for job in auditor.jobs():
        if config.limit is not None and sent >= config.limit:
            break
        prompt = len(o.prompt.text) + len(job.user)
        if room is not None:
            # As the run reserves each call's worst case before it starts, against what was
            # spent: a call that does not fit is left out.
            worst = auditor.caller.worst_case(o.prompt.text + job.user, batch=batch)
            if worst is not None and expected + float(worst) > room:
                summary.over_budget += 1
                continue
            one, _ = price_of(o.model, _guess(prompt, 1), o.name, batch)
            expected += one or 0.0
        chars += prompt
        sent += 1
    summary.est_input_tokens = chars // CHARS_PER_TOKEN
    usd, _ = price_of(o.model, _guess(chars, sent), o.name, batch=batch)
    summary.est_cost_usd, summary.batch_price = usd, batch
    summary.audited = sent
    if summary.over_budget and cap is not None:
        limit = f"${cap.limit:.4f}"
        if cap.why == "--budget":
            limit = f"--budget {limit}"
        else:
            limit = f"the {limit} budget_per_day leaves today ({cap.why})"
        summary.budget_note = (
            f"{summary.over_budget} left out: each call's worst case would cross {limit}"
        )
    if not batch and sent:
        _estimate_time(auditor, sent)
    return summary


def _guess(chars: int, calls: int) -> ObserverUsage:
    """The usage of `calls` calls whose prompts hold `chars` characters, as a dry run guesses it."""
    return ObserverUsage(input=chars // CHARS_PER_TOKEN, output=EST_OUTPUT_TOKENS * calls)


def _estimate_time(auditor: Auditor, calls: int) -> None:
    """How long `calls` calls would take, `concurrency` at a time (a batch: not known)."""
    from .answer_times import answer_seconds

    o, summary, at_once = auditor.observing, auditor.summary, auditor.concurrency
    found = answer_seconds(auditor.engine, o.backend, o.name, o.model, 50)
    if found is None:
        return
    seconds, summary.est_seconds_source = found
    summary.est_call_seconds, summary.est_at_once = seconds, at_once
    summary.est_seconds = seconds * -(-calls // at_once)
