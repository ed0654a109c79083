"""How long an observer takes to answer: for `hook install`'s deadline warning and for the
duration a dry run announces."""

from __future__ import annotations

from typing import Any

MIN_RECORDED = 5  # recorded answers needed before they are trusted over the backend's figure


def answer_seconds(
    engine, observer: Any, name: str, model: str, percentile: int = 90
) -> tuple[float, str] | None:
    """How long `observer` takes to answer, and where that figure comes from.

    The `percentile` (90: nearly every answer is faster; 50: the median) of its newest 200
    recorded answers with `model` in the store (at least MIN_RECORDED; `engine` None: no
    store), else the figure the backend declares (`seconds_per_call`), else None.
    """
    from sqlalchemy import text

    from ..reports.shared import nearest_rank

    try:
        if engine is None:
            raise LookupError("no store")
        with engine.connect() as conn:
            rows = conn.execute(
                text(
                    "SELECT latency_ms FROM verdicts WHERE observer = :o AND model = :m AND "
                    "status IN ('ok', 'invalid') AND latency_ms IS NOT NULL "
                    "ORDER BY id DESC LIMIT 200"
                ),
                {"o": name, "m": model},
            ).all()
    except Exception:  # noqa: BLE001 - no store yet, or one that cannot be read: use the declared figure
        rows = []
    if len(rows) >= MIN_RECORDED:
        figure = nearest_rank(sorted(r.latency_ms for r in rows), percentile) / 1000
        which = "the median" if percentile == 50 else f"{percentile}th percentile"
        return figure, f"{which} of its {len(rows)} answers recorded in this store"
    declared = getattr(observer, "seconds_per_call", None)
    if declared:
        return float(declared), "the backend's own figure"
    return None
