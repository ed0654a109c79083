"""The spend cap of a run: `auditor run --budget USD` and `budget_per_day` in the config.

Before each observer call the run estimates what it can cost at most: the prompt's tokens
(system prompt and rendered thread, estimated from their UTF-8 size, see `estimate_tokens`)
at the model's input rate plus the answer's maximum output tokens at the output rate. The
estimate is reserved before the call starts and released when its verdict (with its real
cost) is recorded, so calls running at once can never together cross the cap: a call whose
estimate does not fit waits for the calls in flight to settle, and is left unaudited when it
still does not fit. `budget_per_day` caps what the verdicts recorded since midnight UTC cost,
whichever run recorded them.

A model the price table does not know has an unknown cost: under a budget it is refused
unless the user allows it (`--allow-unpriced`); its calls then count as unknown, not as 0.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal

from sqlalchemy import func, select

from . import schema as s
from .errors import AuditorError
from .prices import Tokens, price

# Tokenizers give 3.5 to 4.5 bytes a token on English and code; 3 errs on the high side, so
# the estimate rather overstates a call than lets it cross the cap.
BYTES_PER_TOKEN = 3


def estimate_tokens(text: str) -> int:
    """Return an upper estimate of the tokens of `text`: its UTF-8 bytes / 3, rounded up."""
    return -(-len(text.encode("utf-8", "surrogatepass")) // BYTES_PER_TOKEN)


def estimate_usd(
    model: str,
    provider: str,
    prompt: str,
    max_output_tokens: int,
    *,
    batch: bool = False,
) -> Decimal | None:
    """Return the most a call can cost (None when the model has no price)."""
    tokens = Tokens(input=estimate_tokens(prompt), output=max_output_tokens)
    return price(model, tokens, provider, batch=batch).usd


def is_priced(model: str, provider: str) -> bool:
    """Tell whether the price table (or the user's overrides) knows `model`."""
    return price(model, Tokens(input=1000, output=1000), provider).usd is not None


def spent_since(conn, since: datetime) -> float:
    """Return the USD the verdicts recorded since `since` cost (known prices only), plus the
    worst case of the batches submitted since then and not collected yet."""
    v, b = s.Verdict, s.Batch
    at = since.astimezone(UTC).replace(tzinfo=None)
    q = select(func.coalesce(func.sum(v.cost_usd), 0.0)).where(v.created_at >= at)
    pending = select(func.coalesce(func.sum(b.est_usd), 0.0)).where(
        b.submitted_at >= at, b.state.in_(("submitting", "pending"))
    )
    return float(conn.execute(q).scalar() or 0.0) + float(conn.execute(pending).scalar() or 0.0)


def midnight_utc() -> datetime:
    return datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


@dataclass
class Budget:
    """The USD a run may still spend, and the estimates of the calls in flight.

    `spent` returns what the run's verdicts have cost so far (the run summary's figure).
    """

    limit: float
    spent: Callable[[], float]
    why: str = "--budget"
    reserved: float = 0.0
    refused: int = 0  # calls (checkpoints) left unaudited because they did not fit
    smallest_refused: float | None = None
    _settled: asyncio.Condition | None = field(default=None, repr=False)

    def _cond(self) -> asyncio.Condition:
        if self._settled is None:
            self._settled = asyncio.Condition()
        return self._settled

    @property
    def left(self) -> float:
        return max(self.limit - self.spent(), 0.0)

    async def reserve(self, estimate: float) -> bool:
        """Reserve `estimate` USD for a call; False (the call must not start) if it cannot fit.

        While calls are in flight their estimates may settle lower, so it waits for them.
        """
        async with self._cond():
            while self.spent() + self.reserved + estimate > self.limit:
                if self.reserved <= 0:
                    self.refuse(estimate)
                    return False
                await self._cond().wait()
            self.reserved += estimate
            return True

    def refuse(self, estimate: float) -> None:
        """Count a call left out because its estimate did not fit."""
        self.refused += 1
        if self.smallest_refused is None or estimate < self.smallest_refused:
            self.smallest_refused = estimate

    async def release(self, estimate: float) -> None:
        """Give back a reservation once its call is recorded (or did not happen)."""
        async with self._cond():
            self.reserved = max(self.reserved - estimate, 0.0)
            self._cond().notify_all()

    def report(self, unpriced: int = 0) -> str:
        """Say what was spent and what was left unaudited, for the end of the run."""
        line = f"budget ({self.why}): spent ${self.spent():.4f} of ${self.limit:.4f}"
        if unpriced:
            line += f" and {unpriced} calls of unknown cost (--allow-unpriced)"
        if self.refused:
            line += (
                f"; {self.refused} checkpoints left unaudited: the smallest call's estimate, "
                f"${self.smallest_refused:.4f}, did not fit in the ${self.left:.4f} left"
            )
        return line


def for_run(
    engine,
    *,
    budget: float | None,
    per_day: float | None,
    model: str,
    provider: str,
    allow_unpriced: bool,
    spent: Callable[[], float],
) -> Budget | None:
    """Return the run's Budget (None without a cap), or raise when the model has no price."""
    if budget is None and per_day is None:
        return None
    for name, value in (("--budget", budget), ("budget_per_day", per_day)):
        if value is not None and value < 0:
            raise AuditorError(f"{name} must be a number of US dollars >= 0, not {value}")
    if not is_priced(model, provider) and not allow_unpriced:
        raise AuditorError(
            f"{model!r} is not in the price table, so under a budget its cost is unknown: add "
            "its price to prices.json (`auditor config` shows where) or pass --allow-unpriced."
        )
    limit, why = (budget, "--budget") if budget is not None else (float("inf"), "")
    if per_day is not None:
        with engine.connect() as conn:
            today = spent_since(conn, midnight_utc())
        left_today = max(per_day - today, 0.0)
        if left_today < limit:
            limit = left_today
            why = f"budget_per_day ${per_day:.4f}, ${today:.4f} spent earlier today"
    return Budget(limit=limit, spent=spent, why=why)
