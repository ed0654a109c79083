"""Signals: cheap local checks computed at a checkpoint, with the evidence that made them fire.

A signal plugin (see `hookspecs.compute_signals`) returns `Signal`s; the core stores them per
checkpoint, shows them (`auditor prompt`, `auditor show`), lets the gate use them, and counts
them for reports. Excerpts are redacted and shortened when a `Signal` is built, so nothing a
plugin returns can put a secret in the store in clear.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ..printable import printable
from ..redact import redact

if TYPE_CHECKING:
    from sqlalchemy import Connection, Engine

MAX_EXCERPT = 160
MAX_EVIDENCE = 5


def excerpt(text: str | None, limit: int = MAX_EXCERPT) -> str:
    """Return `text` redacted, on one line, without control characters, cut to about `limit`."""
    flat = " ".join(redact(printable(text)).split())
    if len(flat) <= limit:
        return flat
    return flat[: limit - 1].rstrip() + "…"


@dataclass
class Evidence:
    """Where a signal saw something: a message's native id and a short redacted excerpt."""

    message_id: str
    excerpt: str = ""

    def __post_init__(self) -> None:
        self.message_id = str(self.message_id)
        self.excerpt = excerpt(self.excerpt)


@dataclass
class Signal:
    """A named finding at a checkpoint.

    `score` is a strength in [0, 1] (clamped); a signal that did not fire is not returned at
    all. `evidence` names the messages involved (at most `MAX_EVIDENCE` are kept); `detail` is
    small JSON-able data (counts, a classification) and must not hold transcript text.
    """

    name: str
    score: float
    evidence: list[Evidence] = field(default_factory=list)
    detail: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.score = round(min(1.0, max(0.0, float(self.score))), 3)
        self.evidence = [
            e
            if isinstance(e, Evidence)
            else Evidence(*e)
            if isinstance(e, (tuple, list))
            else Evidence(**e)
            for e in self.evidence
        ][:MAX_EVIDENCE]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        """Return one line: name, score and the first excerpt."""
        first = (
            f' [{self.evidence[0].message_id}] "{self.evidence[0].excerpt}"'
            if self.evidence
            else ""
        )
        return f"{self.name} {self.score:.2f}{first}"


def strongest(signals: Iterable[Signal], min_score: float = 0.0) -> list[Signal]:
    """Return the signals scoring at least `min_score`, strongest first."""
    return sorted((x for x in signals if x.score >= min_score), key=lambda x: (-x.score, x.name))


# -- storage -------------------------------------------------------------------------------


def store_signals(
    conn: Connection, checkpoint_id: int, thread_id: int, signals: list[Signal]
) -> None:
    """Replace the stored signals of a checkpoint with `signals`."""
    from sqlalchemy import delete

    from . import schema as s  # here: ingest, which loads this module, never needs the models

    table = s.Signal.__table__
    conn.execute(delete(table).where(table.c.checkpoint_id == checkpoint_id))
    if not signals:
        return
    now = datetime.now(UTC)
    conn.execute(
        table.insert(),
        [
            {
                "checkpoint_id": checkpoint_id,
                "thread_id": thread_id,
                "name": sig.name,
                "score": sig.score,
                # Excerpts are redacted again on the way in: a plugin may have built the
                # evidence list by hand after construction.
                "evidence": [
                    {"message_id": e.message_id, "excerpt": excerpt(e.excerpt)}
                    for e in sig.evidence
                ],
                "detail": sig.detail or None,
                "computed_at": now,
            }
            for sig in signals
        ],
    )


def _from_row(row) -> Signal:
    return Signal(
        row.name, row.score, [Evidence(**e) for e in row.evidence or []], row.detail or {}
    )


def load_signals(engine: Engine, checkpoint_id: int) -> list[Signal]:
    """Return the stored signals of a checkpoint, strongest first."""
    from sqlalchemy import select

    from . import schema as s

    table = s.Signal.__table__
    with engine.connect() as conn:
        rows = conn.execute(select(table).where(table.c.checkpoint_id == checkpoint_id)).all()
    return strongest(_from_row(r) for r in rows)


def thread_signals(engine: Engine, thread_id: int) -> dict[str, list[Signal]]:
    """Return the stored signals of a thread by the native id of the checkpoint's message."""
    from sqlalchemy import select

    from . import schema as s

    sig, cp = s.Signal.__table__, s.Checkpoint.__table__
    q = (
        select(sig, cp.c.message_native_id)
        .join(cp, cp.c.id == sig.c.checkpoint_id)
        .where(sig.c.thread_id == thread_id)
        .order_by(sig.c.id)
    )
    out: dict[str, list[Signal]] = {}
    with engine.connect() as conn:
        for row in conn.execute(q):
            out.setdefault(row.message_native_id, []).append(_from_row(row))
    return {k: strongest(v) for k, v in out.items()}


# -- counts for reports ----------------------------------------------------------------------

_COUNTS_SQL = """
SELECT g.name AS signal,
       COUNT(*) AS checkpoints,
       SUM(CAST(EXISTS (SELECT 1 FROM verdicts v WHERE v.checkpoint_id = g.checkpoint_id
                        AND v.critique_of IS NULL AND v.status = 'ok' {run}) AS INTEGER)) AS audited,
       SUM(CAST(EXISTS (SELECT 1 FROM verdicts v WHERE v.checkpoint_id = g.checkpoint_id
                        AND v.critique_of IS NULL AND v.needs_correction {run}) AS INTEGER)) AS corrections,
       SUM((SELECT COUNT(*) FROM verdicts v WHERE v.checkpoint_id = g.checkpoint_id
            AND v.critique_of IS NOT NULL {run})) AS critiques,
       SUM((SELECT COUNT(*) FROM verdicts v WHERE v.checkpoint_id = g.checkpoint_id
            AND v.critique_of IS NOT NULL AND v.needs_correction {run})) AS critique_corrections
FROM (SELECT DISTINCT checkpoint_id, name FROM signals WHERE 1 = 1 {when}) AS g
GROUP BY g.name
ORDER BY checkpoints DESC, g.name
"""


def signal_counts(
    engine: Engine,
    since: datetime | None = None,
    until: datetime | None = None,
    run_id: int | None = None,
) -> list[dict[str, Any]]:
    """Count, per signal name, the checkpoints it fired on and what the observers said there.

    Return one dict per signal, most frequent first: `signal`; `checkpoints` where it fired;
    `audited`, of those, the checkpoints with an ok first-pass verdict; `corrections`, the
    checkpoints where a first-pass verdict asked for a correction; `critiques`, the second-pass
    verdicts made there (`auditor run --critique`); `critique_corrections`, the second passes
    that asked for a correction. `since`/`until` filter on when the signal was computed;
    `run_id` keeps only that run's verdicts. Meant for `auditor report verdicts`.
    """
    from sqlalchemy import text

    params: dict[str, Any] = {}
    when = ""
    if since is not None:
        when += " AND computed_at >= :since"
        params["since"] = _db_time(since)
    if until is not None:
        when += " AND computed_at < :until"
        params["until"] = _db_time(until)
    run = ""
    if run_id is not None:
        run = "AND v.run_id = :run_id"
        params["run_id"] = run_id
    with engine.connect() as conn:
        rows = conn.execute(text(_COUNTS_SQL.format(run=run, when=when)), params).all()
    return [
        {
            "signal": r.signal,
            "checkpoints": int(r.checkpoints or 0),
            "audited": int(r.audited or 0),
            "corrections": int(r.corrections or 0),
            "critiques": int(r.critiques or 0),
            "critique_corrections": int(r.critique_corrections or 0),
        }
        for r in rows
    ]


def _db_time(value: datetime) -> str:
    """Format a time the way SQLite stores DateTime (naive UTC), for comparison."""
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    return value.strftime("%Y-%m-%d %H:%M:%S.%f")


# -- command-line helpers --------------------------------------------------------------------


def parse_options(values: Iterable[str]) -> dict[str, Any]:
    """Turn `--signal` values into the signal config passed to `compute_signals`.

    `NAME.KEY=VALUE` sets an option (VALUE is read as JSON when it parses, else kept as a
    string: `tool-loop.min_repeats=4`, `tool-loop.ignore=["Read"]`); `NAME=off` disables a
    signal. Raise `AuditorError` naming the bad value otherwise.
    """
    import json

    from ..errors import AuditorError

    config: dict[str, Any] = {}
    for raw in values:
        key, sep, value = raw.partition("=")
        name, dot, option = key.strip().partition(".")
        if not sep or not name:
            raise AuditorError(
                f"--signal {raw!r}: use NAME.KEY=VALUE (tool-loop.min_repeats=4) or NAME=off."
            )
        if not dot:
            if value.strip().lower() not in ("off", "false", "0", "no"):
                raise AuditorError(
                    f"--signal {raw!r}: a signal alone can only be turned off (NAME=off)."
                )
            config.setdefault("disabled", []).append(name)
            continue
        try:
            parsed = json.loads(value)
        except ValueError:
            parsed = value
        config.setdefault(name, {})[option] = parsed
    return config


def format_signals(signals: list[Signal]) -> list[str]:
    """Return one line per signal (name, score, first evidence), for terminals and headers."""
    return [sig.summary() for sig in signals] or ["none fired"]
