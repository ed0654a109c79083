"""What a run is given and what it gives back: its RunConfig, its RunSummary, the Job of one
observer call, the Observing that answers it, and which observer it uses when none is named."""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, select

from ..plugins import Plugins
from ..store import schema as s
from . import critique

if TYPE_CHECKING:
    from .observe import Observer
    from .prompt import Prompt


@dataclass
class RunConfig:
    observer: str | None = None
    model: str | None = None
    observer_options: dict[str, Any] = field(default_factory=dict)
    threads: list[str] = field(default_factory=list)
    # Only threads of these agents (None: all). Set per observer when each agent's threads
    # get their own (`auditor.audit.observer_choice`); the hook sets its agent.
    agents: list[str] | None = None
    # Let an observer of the agent's own vendor audit it when no other is ready.
    allow_same_vendor: bool = False
    since: datetime | None = None
    limit: int | None = None
    concurrency: int | None = None  # None: the observer's own (`Observer.concurrency`), else 4
    timeout: float | None = None  # None: the observer's own (`Observer.timeout`), else 120
    dry_run: bool = False
    gate: dict[str, Any] = field(default_factory=dict)
    formatter: dict[str, Any] = field(default_factory=dict)
    # Seconds a claimed observer call stays ours; past it, another run may take it over.
    # Default: the longest a call can take (timeout * 4 + 5) plus a minute.
    lease: float | None = None
    signals: dict[str, Any] = field(default_factory=dict)  # options of the signal plugins
    # A second, more critical pass where the first was silent and a signal scored this much.
    critique_min_score: float = critique.DEFAULT_MIN_SCORE
    critique: bool = False
    # Spend caps in USD (see auditor.audit.budget): for this run, and for all verdicts of a UTC day.
    budget: float | None = None
    budget_per_day: float | None = None
    allow_unpriced: bool = False  # under a budget, still call a model without a price
    # Through the provider's batch API (auditor.audit.batch): collect finished batches, then submit
    # (`collect`: only collect); at most `batch_size` requests a batch.
    batch: bool = False
    collect: bool = False
    batch_size: int | None = None

    def for_record(self) -> dict[str, Any]:
        out = asdict(self)
        out["observer_options"] = {k: v for k, v in self.observer_options.items() if "key" not in k}
        out["since"] = self.since.isoformat() if self.since else None
        return out


@dataclass
class RunSummary:
    run_id: int | None
    observer: str
    model: str
    checkpoints: int = 0
    gated_in: int = 0
    gated_out: dict[str, int] = field(default_factory=dict)
    audited: int = 0
    reused: int = 0
    busy: int = 0  # claimed by another run at the same time, left to it
    corrections: int = 0
    invalid: int = 0
    errors: int = 0
    cost_usd: float = 0.0
    unpriced: int = 0
    est_input_tokens: int = 0
    est_cost_usd: float | None = None
    batch_price: bool = False  # the dry run's estimate is at the batch price (--batch)
    est_seconds: float | None = None  # the dry run's estimate of how long the calls take
    est_seconds_source: str | None = None  # where the time a call takes comes from
    est_call_seconds: float | None = None  # the time one call takes, as that source says
    est_at_once: int = 1  # the calls the run would make at once
    critiques: int = 0  # second-pass verdicts (`--critique`)
    critique_corrections: int = 0
    critique_candidates: int = 0  # gated-in checkpoints whose signals are strong enough
    over_budget: int = 0  # gated-in checkpoints left unaudited: their call would cross the cap
    budget_note: str | None = None  # what the budget allowed and what was spent
    queued: int = 0  # checkpoints handed to the observer so far (the progress bar's total)
    finished: int = 0  # of those, the ones done with (answered, failed, or found answered)
    abandoned: int = 0  # calls in flight given up when the run was interrupted
    planning: bool = True  # False once every checkpoint is gated, so `queued` is final
    batch: Any = None  # with --batch / --collect: what was submitted and collected (BatchReport)
    status: str = "done"
    messages: list[str] = field(default_factory=list)
    # Agents whose threads were not audited, with why: only their own vendor's observer is ready.
    refused: dict[str, str] = field(default_factory=dict)
    # A run of several observers (one per agent's vendor) records one run each: their ids.
    run_ids: list[int] = field(default_factory=list)
    # The corrections this run got: verdict id, thread, checkpoint message and the message.
    found: list[dict[str, Any]] = field(default_factory=list)

    _PLANNING = ("checkpoints", "gated_in", "reused", "critique_candidates")

    def counts(self) -> dict[str, Any]:
        """The planning counts, to put back with `restore_counts` when a transaction that
        counted was rolled back."""
        return {k: getattr(self, k) for k in self._PLANNING} | {"gated_out": dict(self.gated_out)}

    def restore_counts(self, counts: dict[str, Any]) -> None:
        for key, value in counts.items():
            setattr(self, key, value)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Job:
    checkpoint_id: int
    thread_id: int
    message_id: str
    user: str
    input_hash: str
    prompt: Prompt  # what it is sent with: the observer's prompt, or the critique prompt
    answered: int | None = None  # the verdict that already answers this exact call
    signals: list = field(default_factory=list)
    critique_of: int | None = None  # for a second pass: the verdict it re-examines
    thread_native_id: str = ""
    thread_lease: str | None = None  # PostgreSQL: the lease on the thread held while it runs
    # PostgreSQL, a call of a thread another worker holds: the helper's lease on its checkpoint
    # (LeasedSharing._help), given back once the call is over.
    helping: str | None = None

    @property
    def claim_key(self) -> str:
        return hashlib.sha256(f"{self.checkpoint_id}\0{self.input_hash}".encode()).hexdigest()


@dataclass
class Observing:
    """Who answers a run's checkpoints: the observer (its name and backend), the model, the
    prompts. A verdict is reused only when all of these and the rendered checkpoint match."""

    name: str
    backend: Observer
    model: str
    prompt: Prompt
    critique_prompt: Prompt | None = None  # with --critique: the second pass's prompt
    same_vendor: bool = False  # the observer is of the audited agent's own vendor

    def input_hash(self, user: str, prompt: Prompt | None = None) -> str:
        return hashlib.sha256(f"{(prompt or self.prompt).sha256}\0{user}".encode()).hexdigest()

    def already_answered(self, conn: Connection, job: Job) -> int | None:
        """The id of a verdict that answers `job` already, if any."""
        v = s.Verdict
        return conn.execute(
            select(v.id)
            .where(
                v.checkpoint_id == job.checkpoint_id,
                v.observer == self.name,
                v.model == self.model,
                v.prompt_hash == job.prompt.sha256,
                v.input_hash == job.input_hash,
                v.status.in_(("ok", "invalid")),
                v.critique_of.is_(None)
                if job.critique_of is None
                else v.critique_of == job.critique_of,
            )
            .limit(1)
        ).scalar()


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM stopped a run; `summary` holds what it had done (all of it stored)."""

    def __init__(self, summary: RunSummary):
        super().__init__()
        self.summary = summary


def choose_observer(plugins: Plugins, name: str | None) -> tuple[str, str]:
    """Return (observer name, why it was chosen) for threads of any agent; a run, a hook and
    an evaluation choose per agent (`observer_choice.choose_for`)."""
    from .observer_choice import choose_for

    choice = choose_for(plugins, name)
    return choice.observer, choice.why
