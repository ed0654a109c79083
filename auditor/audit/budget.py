"""The spend cap of a run: `auditor run --budget USD` and `budget_per_day` in the config.

Before each observer call the run estimates what it can cost at most: the prompt's tokens
(system prompt and rendered thread, estimated from their UTF-8 size, see `estimate_tokens`)
at the model's input rate plus the answer's maximum output tokens at the output rate. The
estimate is reserved before the call starts and released when its verdict (with its real
cost) is recorded, so calls running at once can never together cross the cap: a call whose
estimate does not fit waits for the calls in flight to settle, and is left unaudited when it
still does not fit. `budget_per_day` caps what the verdicts recorded since midnight UTC cost,
whichever run recorded them: its reservations are kept in the store (`DayCap`), so that runs
on several machines at once share one cap.

A model the price table does not know has an unknown cost: under a budget it is refused
unless the user allows it (`--allow-unpriced`); its calls then count as unknown, not as 0.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from sqlalchemy import Engine, delete, func, insert, select, text

from ..errors import AuditorError
from ..pricing.model_prices import Tokens, price
from ..store import schema as s

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


# One PostgreSQL advisory lock serialises the reservations of every run (any 64-bit number
# no other code of the database uses; this one spells "auditor" in ASCII).
DAY_CAP_LOCK = 0x61756469746F72
WAIT_FOR_OTHERS = 0.5  # seconds between looks when other runs' calls hold the day's budget


@dataclass
class DayCap:
    """`budget_per_day` shared by every run of the store at once: each call's estimate is a
    `spend_reservations` row, taken only when what was spent today, plus every run's
    reservations, plus the estimate, fits; it is deleted once the call's verdict is recorded."""

    engine: Engine
    per_day: float
    owner: str
    seconds: float  # how long a reservation outlives a run that died without deleting it
    room: float | None = None  # what the day had left, every run counted, at the last refusal

    def take(self, usd: float) -> tuple[int | None, float]:
        """Reserve `usd`; return (the reservation's id or None when it does not fit, what the
        other runs' calls in flight have reserved)."""
        from ..store import leases

        r = s.SpendReservation.__table__
        now = datetime.now(UTC)
        with self.engine.begin() as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": DAY_CAP_LOCK})
            # On SQLite the insert takes the write lock: no other run reads the sums meanwhile.
            values = {"owner": self.owner, "usd": usd, "created_at": now}
            mine = conn.execute(
                insert(r)
                .values(**values, expires_at=now + timedelta(seconds=self.seconds))
                .returning(r.c.id)
            ).scalar_one()
            others = in_flight = 0.0  # other runs' reservations; all reservations but this one
            stale = []
            for row in conn.execute(select(r).where(r.c.id != mine)):
                expires = row.expires_at.replace(tzinfo=row.expires_at.tzinfo or UTC)
                if expires < now or leases.dead(row.owner):
                    stale.append(row.id)
                    continue
                in_flight += row.usd
                if row.owner != self.owner:
                    others += row.usd
            if stale:
                conn.execute(delete(r).where(r.c.id.in_(stale)))
            today = spent_since(conn, midnight_utc())
            if today + in_flight + usd > self.per_day:
                conn.execute(delete(r).where(r.c.id == mine))
                self.room = max(self.per_day - today - in_flight, 0.0)
                return None, others
        return mine, others

    def give_back(self, reservation: int) -> None:
        r = s.SpendReservation.__table__
        with self.engine.begin() as conn:
            conn.execute(delete(r).where(r.c.id == reservation))


@dataclass
class Reservation:
    """What `Budget.reserve` set aside for one call: give it to `Budget.release`."""

    usd: float
    row: int | None = None  # its spend_reservations row, under budget_per_day


@dataclass
class Budget:
    """The USD a run may still spend, and the estimates of the calls in flight.

    `spent` returns what the run's verdicts have cost so far (the run summary's figure);
    `day` is the store-wide `budget_per_day`, checked again at each call.
    """

    limit: float
    spent: Callable[[], float]
    why: str = "--budget"
    reserved: float = 0.0
    refused: int = 0  # calls (checkpoints) left unaudited because they did not fit
    smallest_refused: float | None = None
    room_when_refused: float | None = None  # what was left when the smallest was refused
    day: DayCap | None = None
    # The least any call can cost: the observer's prompt with no thread at all and a full
    # answer. Once what is left is less, no call can start, whatever is planned next.
    floor: float | None = None
    _settled: asyncio.Condition | None = field(default=None, repr=False)

    def _cond(self) -> asyncio.Condition:
        if self._settled is None:
            self._settled = asyncio.Condition()
        return self._settled

    @property
    def left(self) -> float:
        return max(self.limit - self.spent(), 0.0)

    def spent_out(self) -> bool:
        """True once no call can fit any more: what is left is below `floor` (what was spent
        only grows, so this never turns false again)."""
        return self.floor is not None and self.limit - self.spent() < self.floor

    def too_small(self, model: str) -> str:
        """The one line for a budget that cannot pay for any call at all."""
        floor = self.floor or 0.0
        if self.why == "--budget" or self.day is None:
            cap, fix = "--budget", f"raise --budget to at least ${floor:.4f}"
        else:
            cap = self.why  # "budget_per_day $X, $Y spent earlier today"
            need = self.day.per_day - self.limit + floor
            fix = f"raise budget_per_day to at least ${need:.4f}, or wait for midnight UTC"
        return (
            f"No call fits in the budget: {cap} leaves ${self.left:.4f}, and the smallest call "
            f"to {model} (the observer's prompt alone and a full answer) can cost "
            f"${floor:.4f}; nothing was planned or called: {fix}"
        )

    async def reserve(self, estimate: float) -> Reservation | None:
        """Reserve `estimate` USD for a call; None (the call must not start) if it cannot fit.

        While calls are in flight, this run's or (under budget_per_day) other runs', their
        estimates may settle lower, so it waits for them.
        """
        async with self._cond():
            while True:
                if self.spent() + self.reserved + estimate <= self.limit:
                    if self.day is None:
                        break
                    row, others = await asyncio.to_thread(self.day.take, estimate)
                    if row is not None:
                        self.reserved += estimate
                        return Reservation(estimate, row)
                    if self.reserved <= 0 and others > 0:  # only other runs' calls in flight
                        self._cond().release()
                        try:
                            await asyncio.sleep(WAIT_FOR_OTHERS)
                        finally:
                            await self._cond().acquire()
                        continue
                if self.reserved <= 0:
                    room = self.limit - self.spent()
                    if self.day is not None and self.day.room is not None:
                        room = min(room, self.day.room)  # other runs spent today meanwhile
                    self.refuse(estimate, room)
                    return None
                await self._cond().wait()
            self.reserved += estimate
            return Reservation(estimate)

    def refuse(self, estimate: float, room: float | None = None) -> None:
        """Count a call left out because its estimate did not fit in `room` USD."""
        self.refused += 1
        if self.smallest_refused is None or estimate < self.smallest_refused:
            self.smallest_refused = estimate
            self.room_when_refused = room

    async def release(self, reservation: Reservation) -> None:
        """Give back a reservation once its call is recorded (or did not happen)."""
        if reservation.row is not None and self.day is not None:
            await asyncio.to_thread(self.day.give_back, reservation.row)
        async with self._cond():
            self.reserved = max(self.reserved - reservation.usd, 0.0)
            self._cond().notify_all()

    def report(self, unpriced: int = 0) -> str:
        """Say what was spent and what was left unaudited, for the end of the run."""
        line = f"budget ({self.why}): spent ${self.spent():.4f} of ${self.limit:.4f}"
        if unpriced:
            line += f" and {unpriced} calls of unknown cost (--allow-unpriced)"
        if self.refused:
            # The room at the refusal, not now: under budget_per_day other runs spend too, and
            # what this run alone spent would leave more than there was.
            left = self.left if self.room_when_refused is None else self.room_when_refused
            left = max(left, 0.0)
            line += (
                f"; {self.refused} checkpoints left unaudited: the smallest call's estimate, "
                f"${self.smallest_refused:.4f}, did not fit in the ${left:.4f} left"
            )
            if self.day is not None:
                line += " (what every run spent today counted)"
        if self.spent_out():
            line += (
                f"; no call can cost less than ${self.floor:.4f}, so the checkpoints after "
                "were not planned"
            )
        return line


def for_run(
    engine,
    *,
    budget: float | None,
    per_day: float | None,
    least: list[Decimal | None],
    model: str,
    allow_unpriced: bool,
    spent: Callable[[], float],
    owner: str = "",
    lease: float = 600.0,
) -> Budget:
    """Return the run's Budget under `budget` or `per_day` (one at least), or raise when the
    model has no price.

    `least` holds, for each of the run's prompts, the worst case of a call with that prompt and
    no thread at all (None where the price table does not know `model`): no call costs less.
    `owner` names the run's process in its reservations under `per_day`, which outlive a run
    that died by `lease` seconds at most."""
    for name, value in (("--budget", budget), ("budget_per_day", per_day)):
        if value is not None and value < 0:
            raise AuditorError(f"{name} must be a number of US dollars >= 0, not {value}")
    if any(usd is None for usd in least) and not allow_unpriced:
        raise AuditorError(
            f"{model!r} is not in the price table, so under a budget its cost is unknown: add "
            "its price to prices.json (`auditor config` shows where) or pass --allow-unpriced."
        )
    limit, why = (budget, "--budget") if budget is not None else (float("inf"), "")
    day = None
    if per_day is not None:
        day = DayCap(engine, per_day, owner, lease)
        with engine.connect() as conn:
            today = spent_since(conn, midnight_utc())
        left_today = max(per_day - today, 0.0)
        if left_today < limit:
            limit = left_today
            why = f"budget_per_day ${per_day:.4f}, ${today:.4f} spent earlier today"
    known = [float(usd) for usd in least if usd is not None]
    return Budget(limit=limit, spent=spent, why=why, day=day, floor=min(known) if known else None)
