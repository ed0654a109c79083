"""The observer call: what the core sends to a backend and what it gets back.

Backends live in plugins (see `hookspecs.register_observers`); they translate the one tool
schema below into their provider's shape, force the call, and report raw usage. The core
validates the answer (`validate_arguments`) and owns storage and cost.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

TOOL_NAME = "course_correct"
TOOL_DESCRIPTION = (
    "Report whether the coding agent needs a course correction at this point, and if so the "
    "short message to send it as if from the user."
)
TOOL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "needsCorrection": {
            "type": "boolean",
            "description": "True only if the agent clearly went off track and should be interrupted.",
        },
        "message": {
            "type": ["string", "null"],
            "description": "The correction, written like the user would: short, casual, direct. Null when no correction.",
        },
    },
    "required": ["needsCorrection"],
    # Nothing but the two keys: every backend's schema field (Anthropic's `input_schema`,
    # Gemini's `parameters_json_schema`, OpenAI-compatible `parameters`, the embedded model's
    # grammar, `codex exec --output-schema`) accepts the keyword.
    "additionalProperties": False,
}

TEMPERATURE = 0.1
MAX_OUTPUT_TOKENS = 1024
# Far more than MAX_OUTPUT_TOKENS allow: a longer message comes from a model or server gone wrong.
MAX_MESSAGE_CHARS = 8000


@dataclass
class ObserveRequest:
    system: str
    user: str
    model: str
    temperature: float = TEMPERATURE
    max_output_tokens: int = MAX_OUTPUT_TOKENS
    timeout: float = 120.0


@dataclass
class ObserverUsage:
    """Raw tokens of one observer call. `input` includes `cached`; `output` excludes `thinking`.

    `cost_usd` is the call's cost as the provider or CLI reported it (`claude -p` does); when
    set, the core records it instead of pricing the tokens at list price.
    """

    input: int = 0
    output: int = 0
    cached: int = 0
    thinking: int = 0
    cache_write: int = 0
    details: dict[str, Any] = field(default_factory=dict)
    cost_usd: float | None = None


@dataclass
class ObserveResult:
    """What a backend returns. `arguments` is the raw tool-call arguments (None: no tool call)."""

    tool_name: str | None
    arguments: Any
    usage: ObserverUsage
    model: str
    latency_s: float
    raw: Any = None  # the provider's response as JSON-able data, for the record


@dataclass
class Verdict:
    """A validated answer: `valid` False means the answer broke the contract (`problem` says how)."""

    valid: bool
    needs_correction: bool | None
    message: str | None
    problem: str | None = None


@dataclass(frozen=True)
class ObserverNeeds:
    """What an observer needs to be chosen without being named (`Observer.needs`).

    The core reads these instead of knowing backends: with no `--observer` and no
    AUDITOR_OBSERVER, each agent's threads get the ready observer of the lowest `rank` whose
    key is set (one of `key_env`), else a `login` one whose CLI is logged in, else an `offline`
    one (saying its `caveat`), never one whose `vendor` is the agent's own unless allowed
    (see `auditor.audit.observer_choice`).
    """

    vendor: str  # whose models it calls: "google", "anthropic"...; "local" for this machine's
    key_env: tuple[str, ...] = ()  # environment variables that hold its key; one set suffices
    # An agent CLI the user logs in to: ready when `check()` finds it installed and logged in.
    login: bool = False
    offline: bool = False  # needs neither a key nor a server: the fallback when no key is set
    caveat: str = ""  # said when it is chosen as that fallback (what its verdicts are worth)
    rank: int = 100  # among the observers whose key is set, the lowest is chosen


class Observer(Protocol):
    """An observer backend. Optional attributes, read with getattr: `needs` (an `ObserverNeeds`:
    its vendor, and what it needs to be chosen when no observer is named; without it, it is
    chosen only by name or as the only one installed), `concurrency` (calls in
    flight that suit it when the user gives none; 4 when absent), `timeout` (seconds per call
    when the user gives none; 120 when absent), `seconds_per_call` (how
    long an answer takes; `auditor hook install` warns when it is past the hook's deadline) and
    `context_tokens` (the tokens its prompt may take, for a small window: the rendered thread
    is sized to fit beside the system prompt)."""

    name: str
    default_model: str

    def check(self, options: dict[str, Any]) -> str | None:
        """Return None when the backend can be called, else a one-line reason with the fix."""
        ...

    async def observe(self, request: ObserveRequest, options: dict[str, Any]) -> ObserveResult:
        """Make one forced `course_correct` call and return its raw result."""
        ...


@dataclass
class BatchItem:
    """One call of a batch: `key` names it in the provider's batch ([A-Za-z0-9_-]{1,64})."""

    key: str
    request: ObserveRequest


@dataclass
class BatchStatus:
    """A provider batch as last polled: `done` once no request is still being processed."""

    done: bool
    state: str  # the provider's word: JOB_STATE_RUNNING, in_progress, ended...
    counts: dict[str, int] = field(default_factory=dict)


@dataclass
class BatchAnswer:
    """The outcome of one request of a finished batch: a result, or why there is none.

    `key` is the BatchItem's key when the provider echoes it, `index` its position when the
    provider keeps the order (Gemini's inline responses); the core matches on either.
    """

    key: str | None
    index: int | None
    result: ObserveResult | None = None
    error: str | None = None


class BatchObserver(Protocol):
    """An observer that can also send many calls as one provider batch, at the batch price.

    Optional: the core uses these methods when an observer has them (`auditor run --batch`).
    """

    def submit_batch(self, items: list[BatchItem], label: str, options: dict[str, Any]) -> str:
        """Create the batch and return the provider's id for it."""
        ...

    def find_batch(self, label: str, count: int, since: Any, options: dict[str, Any]) -> list[str]:
        """Return the ids of the batches that may be the one submitted as `label` (of `count`
        requests, created after `since`) by a run stopped before it recorded the id; the core
        leaves out those it knows and takes the one left, if exactly one is."""
        ...

    def poll_batch(self, batch_id: str, options: dict[str, Any]) -> BatchStatus: ...

    def batch_answers(self, batch_id: str, options: dict[str, Any]) -> list[BatchAnswer]:
        """Return the outcome of every request of a finished batch."""
        ...


def validate(result: ObserveResult) -> Verdict:
    """Check a backend's answer against the tool contract, never guessing silence."""
    if result.tool_name is None:
        return Verdict(False, None, None, "the model answered without calling course_correct")
    if result.tool_name != TOOL_NAME:
        return Verdict(
            False, None, None, f"the model called {result.tool_name!r} instead of {TOOL_NAME!r}"
        )
    args = result.arguments
    if isinstance(args, str):
        import json

        try:
            args = json.loads(args)
        except ValueError:
            return Verdict(False, None, None, "the tool arguments are not valid JSON")
    if not isinstance(args, dict):
        return Verdict(False, None, None, "the tool arguments are not an object")
    needs = args.get("needsCorrection")
    if isinstance(needs, str) and needs.lower() in ("true", "false"):
        needs = needs.lower() == "true"
    if not isinstance(needs, bool):
        return Verdict(False, None, None, "needsCorrection is missing or not a boolean")
    message = args.get("message")
    if message is not None and not isinstance(message, str):
        return Verdict(False, needs, None, "message is not a string or null")
    message = (message or "").strip() or None
    if message is not None and len(message) > MAX_MESSAGE_CHARS:
        return Verdict(
            False,
            needs,
            None,
            f"the message is {len(message):,} characters long; a correction is at most "
            f"{MAX_MESSAGE_CHARS:,}",
        )
    if needs and not message:
        return Verdict(False, True, None, "needsCorrection is true but there is no message")
    return Verdict(True, needs, message if needs else None)


def installed(module: str) -> bool:
    """Tell whether `module` (an SDK, `google.genai`) can be imported, without importing it.

    An observer's `check` says whether its SDK is there; importing the SDK to see (the
    Anthropic one takes seconds) made `auditor observers` slow for nothing.
    """
    import importlib.util
    import sys

    if module in sys.modules:  # imported already (or, set to None, known to be missing)
        return sys.modules[module] is not None
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a module set to None
        return False


class ClientCache:
    """SDK clients kept per event loop and settings, for backends to reuse across calls.

    An async HTTP pool must not outlive the loop it was opened on, and some SDK clients close
    their transport when garbage-collected, so each backend keeps its clients here.
    """

    def __init__(self) -> None:
        self._clients: dict[tuple, tuple[Any, Any]] = {}

    def get(self, settings: tuple, make) -> Any:
        """Return the client for `settings` on the running loop, calling `make()` to create it."""
        import asyncio

        loop = asyncio.get_running_loop()
        for key in [k for k, (lp, _) in self._clients.items() if lp.is_closed()]:
            del self._clients[key]
        key = (id(loop), *settings)
        if key not in self._clients:
            self._clients[key] = (loop, make())
        return self._clients[key][1]
