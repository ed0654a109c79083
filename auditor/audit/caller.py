"""The caller of a run: the observer call of one job, bounded in time and in money.

`Caller` checks that the observer can be called, reserves a call's worst case under the run's
budget (`auditor.audit.budget`), makes the call within its timeout, notes whether the observer
can be reached at all, and hands what came back (an answer or the error) to the recorder.
"""

from __future__ import annotations

import asyncio
import time
from decimal import Decimal
from typing import Any

from ..errors import AuditorError
from ..store import raw_answers as answers
from . import budget
from .observe import MAX_OUTPUT_TOKENS, ObserveRequest
from .reachability import Reachability
from .recorder import Recorder
from .run_types import Job, Observing, RunSummary

DEFAULT_TIMEOUT = 120.0  # seconds per call when neither the user nor the observer says


class Caller:
    """Makes one run's observer calls (see the module docstring)."""

    def __init__(
        self,
        observing: Observing,
        options: dict[str, Any],
        timeout: float | None,
        summary: RunSummary,
        recorder: Recorder,
    ):
        self.observing, self.summary, self.recorder = observing, summary, recorder
        self.options = {"model": observing.model, **options}
        # A CPU model on a busy machine takes minutes where an API answers in seconds.
        self.timeout = float(timeout or getattr(observing.backend, "timeout", 0) or DEFAULT_TIMEOUT)
        self.reachability = Reachability(observing.name)
        self.budget: budget.Budget | None = None  # the run's spend caps, once set

    def ensure_usable(self) -> None:
        """Raise AuditorError saying why the observer cannot be called now (a missing key,
        SDK or server). Checked only before a call is due: a backend's check may import its SDK.
        """
        problem = self.observing.backend.check(self.options)
        if problem:
            raise AuditorError(f"observer {self.observing.name!r} cannot be used: {problem}")

    def worst_case(self, prompt: str, batch: bool = False) -> Decimal | None:
        """The most a call of this observer with `prompt` (system prompt and user text) can
        cost, at the batch price with `batch`; None for a model without a price. What the
        budget reserves before a call, a batch counts before submitting and a dry run adds up.
        """
        o = self.observing
        return budget.estimate_usd(o.model, o.name, prompt, MAX_OUTPUT_TOKENS, batch=batch)

    async def reserve_for(self, job: Job) -> budget.Reservation | bool:
        """Reserve `job`'s worst case under the budget: the reservation to give back after the
        call, True when there is nothing to reserve, False when the call would cross the cap
        (counted as over budget)."""
        if self.budget is None:
            return True
        usd = self.worst_case(job.prompt.text + job.user)
        if usd is None:  # a model without a price, allowed with --allow-unpriced
            return True
        reservation = await self.budget.reserve(float(usd))
        if reservation is None:
            self.summary.over_budget += 1
            return False
        return reservation

    async def give_back(self, reservation: budget.Reservation | bool) -> None:
        if self.budget is not None and not isinstance(reservation, bool):
            await self.budget.release(reservation)

    async def call(self, job: Job, deadline: float | None = None) -> int:
        """Ask the observer about `job` and record the outcome; return the verdict id.

        Past `deadline` seconds (and at most four timeouts and a bit) the call is abandoned
        and recorded as an error."""
        o = self.observing
        request = ObserveRequest(job.prompt.text, job.user, o.model, timeout=self.timeout)
        limit = self.timeout * 4 + 5
        if deadline is not None and deadline < limit:
            limit = deadline
        started = time.monotonic()
        try:
            result = await asyncio.wait_for(o.backend.observe(request, self.options), timeout=limit)
        except asyncio.CancelledError:
            # Ctrl-C: the call is given up, not waited for (nothing recorded; a resumed run
            # sends it again), and the summary says so.
            self.summary.abandoned += 1
            raise
        except Exception as exc:  # noqa: BLE001 - recorded as an error verdict; the run goes on
            took = time.monotonic() - started
            error = answers.cut_text(f"{type(exc).__name__}: {exc}", answers.PROBLEM_LIMIT)
            if isinstance(exc, TimeoutError) and took >= limit * 0.99:
                error = f"deadline exceeded: no answer within {limit:g}s"
            elif not str(exc).strip():  # an exception without a word (TimeoutError())
                what = "timed out" if isinstance(exc, TimeoutError) else "failed"
                error = (
                    f"{type(exc).__name__}: the {o.name} call {what} after "
                    f"{took:.1f}s (--timeout {self.timeout:g}s), saying nothing more"
                )
            self.reachability.failed(exc, error)
            return self.recorder.record_verdict(job, None, error, took)
        self.reachability.answered()
        return self.recorder.record_verdict(job, result, None, time.monotonic() - started)
