"""The adversarial second pass (`auditor run --critique`).

When the first observer stays silent on a checkpoint where local signals fired strongly, the
same observer is asked again with a more critical system prompt (`data/prompts/critique-vN.md`)
and the signals appended to the thread. The answer is a verdict of its own, with its own cost,
whose `critique_of` names the first verdict.
"""

from __future__ import annotations

import hashlib
import re
from importlib import resources
from typing import Any

from sqlalchemy import Engine, text

from ..errors import AuditorError
from ..store.signal_rows import Signal
from .prompt import Prompt

# Decided on the development labels (benchmarks/signal_thresholds.py): a strongest signal of
# 0.6 or more marks 3 of 25 checkpoints that needed a correction and 4 of 69 that did not
# (0.7: 2 and 3; 0.5: 4 and 8): the same precision as 0.7, one more catch.
DEFAULT_MIN_SCORE = 0.6
_FILE_NAME = re.compile(r"critique-v(\d+)\.md")


def load_critique_prompt() -> Prompt:
    """Return the newest built-in critique prompt (version `critique-vN`)."""
    folder = resources.files("auditor_data") / "prompts"
    found = []
    if folder.is_dir():
        for entry in folder.iterdir():
            m = _FILE_NAME.fullmatch(entry.name)
            if m:
                found.append((int(m.group(1)), entry))
    if not found:
        raise AuditorError("No critique prompt was found; the auditor installation is incomplete.")
    number, entry = max(found, key=lambda pair: pair[0])
    body = entry.read_bytes().decode("utf-8")
    return Prompt(f"critique-v{number}", body, hashlib.sha256(body.encode("utf-8")).hexdigest())


def strong_signals(signals: list[Signal], min_score: float = DEFAULT_MIN_SCORE) -> list[Signal]:
    """Return the signals strong enough to ask for a second pass, in their order: a plan's
    signals come strongest first (`CheckpointPlanner.signals`)."""
    return [x for x in signals if x.score >= min_score]


def render(user: str, signals: list[Signal]) -> str:
    """Return the first pass's user content with the signals appended (excerpts are redacted)."""
    lines = ["", "---", "", "# Local signals", ""]
    for sig in signals:
        lines.append(f"- **{sig.name}** (score {sig.score:.2f})")
        for ev in sig.evidence:
            lines.append(f"  - message `{ev.message_id}`: {ev.excerpt}")
    return user.rstrip() + "\n" + "\n".join(lines) + "\n"


_SUMMARY_SQL = """
SELECT COUNT(*) AS critiques,
       SUM(CASE WHEN c.needs_correction THEN 1 ELSE 0 END) AS corrections,
       SUM(CASE WHEN c.status = 'ok' THEN 0 ELSE 1 END) AS failed,
       SUM(COALESCE(c.cost_usd, 0)) AS cost_usd
FROM verdicts c
WHERE c.critique_of IS NOT NULL {where}
"""


def critique_summary(engine: Engine, run_id: int | None = None) -> dict[str, Any]:
    """Return what the second pass added: calls, corrections the first pass missed, cost.

    Meant for `auditor report verdicts`: `critiques` (second-pass verdicts), `corrections`
    (of those, how many asked for a correction the first pass had not), `failed` (invalid or
    errored calls) and `cost_usd`.
    """
    where, params = "", {}
    if run_id is not None:
        where, params = "AND c.run_id = :run_id", {"run_id": run_id}
    with engine.connect() as conn:
        row = conn.execute(text(_SUMMARY_SQL.format(where=where)), params).one()
    return {
        "critiques": int(row.critiques or 0),
        "corrections": int(row.corrections or 0),
        "failed": int(row.failed or 0),
        "cost_usd": float(row.cost_usd or 0.0),
    }
