"""The built-in signals: cheap local checks on the turn that ends at a checkpoint.

- `goal-drift`: the user's message that opened the turn against the thread's goal (its first
  typed message): explicit change phrases ("actually", "instead", "new plan"...) plus word-set
  divergence (1 - Jaccard), weighted; fires at `threshold` (docs/design.md, Signals).
- `tool-loop`: the same tool with the same normalised input `min_repeats` times in the turn,
  or an edit that reverses an earlier one.
- `error-cascade`: `min_run` failed tool results in a row (error flag, non-zero exit code,
  traceback, test failures); stronger when the turn ends still failing.
- `claimed-success-after-failure`: the agent's final text claims success ("all tests pass",
  "done", "fixed") without owning up to a failure, while the last check it ran (test, build,
  lint), or else its last command or edit, failed.
- `skipped-requirement-hint`: the user asked for something checkable ("add tests", "run lint",
  "update the docs", "commit") and the turn shows no matching tool activity.
- `sensitive-data`: tool results classified SECRET / SENSITIVE / NORMAL; only the
  classification and a redacted excerpt are kept.

Every option can be changed through the run's signal config (`auditor run --signal
tool-loop.min_repeats=4`); `disabled` lists signals not to compute. A turn is the messages
after the last message a person typed (or the last course correction).
"""

from __future__ import annotations

import functools
from typing import Any

from auditor.api import hookimpl

# Each signal and the module computing it. The modules (their patterns compiled at import) are
# loaded at the first checkpoint, not by every command: every command loads every plugin.
NAMES = [
    "goal-drift",
    "tool-loop",
    "error-cascade",
    "claimed-success-after-failure",
    "skipped-requirement-hint",
    "sensitive-data",
]


@functools.cache
def _checks() -> dict[str, tuple[dict[str, Any], Any]]:
    """Each signal's default options and the function computing it, by name."""
    from .signals_sensitive import SENSITIVE_DATA, sensitive_data
    from .signals_text import GOAL_DRIFT, SKIPPED_REQUIREMENT, goal_drift, skipped_requirement
    from .signals_tools import (
        CLAIMED_SUCCESS,
        ERROR_CASCADE,
        TOOL_LOOP,
        claimed_success,
        error_cascade,
        tool_loop,
    )

    return {
        "goal-drift": (GOAL_DRIFT, goal_drift),
        "tool-loop": (TOOL_LOOP, tool_loop),
        "error-cascade": (ERROR_CASCADE, error_cascade),
        "claimed-success-after-failure": (CLAIMED_SUCCESS, claimed_success),
        "skipped-requirement-hint": (SKIPPED_REQUIREMENT, skipped_requirement),
        "sensitive-data": (SENSITIVE_DATA, sensitive_data),
    }


def compute(messages: list, config: dict | None = None) -> list:
    """Return the built-in signals that fire on the turn ending with the last of `messages`."""
    from .signals_common import calls_since, options, turn_start

    checks = _checks()
    config = config or {}
    start = turn_start(messages)
    calls = calls_since(messages, start)
    out = []

    def run(name, *args):
        defaults, fn = checks[name]
        opts = options(config, name, defaults)
        if opts is not None:
            sig = fn(*args, opts)
            if sig is not None:
                out.append(sig)

    run("goal-drift", messages, start)
    run("tool-loop", calls)
    run("error-cascade", calls)
    run("claimed-success-after-failure", messages, start, calls)
    run("skipped-requirement-hint", messages, start, calls)
    run("sensitive-data", calls)
    return out


@hookimpl(trylast=True)
def compute_signals(checkpoint, thread, messages, config):
    return compute(messages, config)
