"""`auditor reprice`: price stored verdicts again from their recorded tokens.

A verdict recorded while its model had no price keeps `cost_usd` NULL ("unpriced"). Once a
price exists (a newer genai-prices, or an entry in prices.json), `reprice` writes the cost of
each such verdict into the store, priced at the date it was recorded (and at the batch price
when it came from a batch), and brings the runs' totals up to date, so that `auditor verdicts`,
`auditor report costs` and `auditor runs` show the same figures. `--all` prices every verdict
again, e.g. after correcting a price in prices.json.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC

from sqlalchemy import Engine, func, select, update

from ..pricing.model_prices import cost, credits
from ..store import schema as s
from .observe import ObserverUsage


@dataclass
class Repriced:
    verdicts: int = 0  # verdicts given a (new) price
    usd: float = 0.0  # what they cost now
    unchanged: int = 0
    still_unpriced: Counter = field(default_factory=Counter)  # model -> verdicts

    def as_dict(self) -> dict:
        return {
            "verdicts": self.verdicts,
            "usd": self.usd,
            "unchanged": self.unchanged,
            "still_unpriced": dict(self.still_unpriced),
        }


def _is_batch(row) -> bool:
    return getattr(row, "batch_id", None) is not None


def reprice(engine: Engine, *, everything: bool = False) -> Repriced:
    """Price the verdicts recorded without a price (all verdicts with `everything`)."""
    v = s.Verdict.__table__
    cols = [c for c in v.c if c.name not in ("raw", "message", "problem")]
    q = select(*cols).where(v.c.status != "error")
    if not everything:
        q = q.where(v.c.cost_usd.is_(None))
    out = Repriced()
    runs: set[int] = set()
    with engine.begin() as conn:
        for row in conn.execute(q).all():
            usage = ObserverUsage(
                input=row.input_tokens or 0,
                output=row.output_tokens or 0,
                cached=row.cached_tokens or 0,
                thinking=row.thinking_tokens or 0,
                cache_write=row.cache_write_tokens or 0,
            )
            at = row.created_at
            if at is not None and at.tzinfo is None:
                at = at.replace(tzinfo=UTC)
            c = cost(row.model, usage, row.observer, at=at, batch=_is_batch(row))
            if c.usd is None:
                out.still_unpriced[row.model] += 1
                continue
            usd = float(c.usd)
            if row.cost_usd is not None and abs(row.cost_usd - usd) < 1e-12:
                out.unchanged += 1
                continue
            conn.execute(
                update(v).where(v.c.id == row.id).values(cost_usd=usd, credits=float(credits(usd)))
            )
            out.verdicts += 1
            out.usd += usd
            if row.run_id is not None:
                runs.add(row.run_id)
        for run_id in sorted(runs):
            total = select(func.coalesce(func.sum(v.c.cost_usd), 0.0)).where(v.c.run_id == run_id)
            conn.execute(
                update(s.Run.__table__)
                .where(s.Run.__table__.c.id == run_id)
                .values(cost_usd=total.scalar_subquery())
            )
    return out


def describe(r: Repriced) -> str:
    """One line saying what was re-priced and what still has no price."""
    line = f"re-priced {r.verdicts} verdicts: ${r.usd:.4f}"
    if r.unchanged:
        line += f"; {r.unchanged} unchanged"
    if r.still_unpriced:
        models = ", ".join(f"{m} ({n})" for m, n in sorted(r.still_unpriced.items()))
        line += (
            f"; still without a price: {models} (add them to prices.json, `auditor config` "
            "shows where)"
        )
    return line
