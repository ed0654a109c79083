"""What a model call costs: US dollars from genai-prices, a user override file on top, credits.

Rates come from the `genai-prices` package (a dated snapshot of providers' price pages, with the
long-context tiers) unless the override file names the model. The override file is JSON at
`$AUDITOR_PRICES`, else `prices.json` in the user config directory (`auditor config` shows it):

    {"my-finetune": {"input": 2.0, "output": 12.0, "cache_read": 0.2,
                     "input_above_200k": 4.0, "output_above_200k": 18.0}}

Rates are USD per million tokens. Keys: `input` and `output` (required), `cache_read` and
`cache_write` (default: the input rate), `cache_write_1h` (default: `cache_write`), and the
`*_above_200k` variants of all four, used for the whole request when its prompt (cached tokens
included) exceeds 200,000 tokens, as Gemini Pro bills. Thinking tokens are billed as output.

Calls to the local and embedded observers cost 0. A model nobody prices gives `usd=None` and
`unknown_model=True`, never a silent 0. Credits are `usd * $AUDITOR_CREDITS_PER_USD` (default 1).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, overload

from ..audit.observe import ObserverUsage
from ..errors import AuditorError

PRICES_ENV = "AUDITOR_PRICES"
CREDITS_ENV = "AUDITOR_CREDITS_PER_USD"
TIER_THRESHOLD = 200_000
MILLION = Decimal(1_000_000)
FREE_PROVIDERS = frozenset({"local", "embedded"})
# Observer and agent names -> genai-prices provider ids (unknown hints: let genai-prices guess).
PROVIDER_IDS = {
    "gemini": "google",
    "google": "google",
    "claude": "anthropic",
    "claude_code": "anthropic",
    "anthropic": "anthropic",
    "codex": "openai",
    "openai": "openai",
}
# Batch calls are priced from genai-prices' batch rates (its `processing: batch` price variants)
# where it has them; otherwise (an override, an older table, a model without batch rates) at
# half the interactive price, as both the Gemini and the Anthropic batch APIs bill.
BATCH_DISCOUNT = Decimal("0.5")


@dataclass(frozen=True)
class Tokens:
    """Billable tokens of one call. `input` counts ALL prompt tokens (cache reads and writes
    included); `output` includes thinking; `cache_write_1h` is the 1-hour share of `cache_write`."""

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    cache_write_1h: int = 0


@dataclass(frozen=True)
class Cost:
    """The price of a call. `usd` is None exactly when the model is unknown (`unknown_model`)."""

    usd: Decimal | None
    unknown_model: bool = False
    source: str | None = None  # "override", "free" or "genai-prices"
    model: str | None = None  # the price entry that matched


@dataclass(frozen=True)
class Rates:
    """One override entry, USD per million tokens."""

    input: Decimal
    output: Decimal
    cache_read: Decimal | None = None
    cache_write: Decimal | None = None
    cache_write_1h: Decimal | None = None
    input_above_200k: Decimal | None = None
    output_above_200k: Decimal | None = None
    cache_read_above_200k: Decimal | None = None
    cache_write_above_200k: Decimal | None = None
    cache_write_1h_above_200k: Decimal | None = None

    def price(self, t: Tokens) -> Decimal:
        """Return the USD cost of `t`, the >200k tier applying to the whole request."""
        tier = t.input > TIER_THRESHOLD

        def rate(name: str, fallback: Decimal) -> Decimal:
            base = getattr(self, name)
            base = fallback if base is None else base
            above = getattr(self, f"{name}_above_200k") if tier else None
            return base if above is None else above

        inp = rate("input", self.input)
        write = rate("cache_write", inp)
        write_1h = rate("cache_write_1h", write)
        uncached = t.input - t.cache_read - t.cache_write
        total = (
            uncached * inp
            + t.cache_read * rate("cache_read", inp)
            + (t.cache_write - t.cache_write_1h) * write
            + t.cache_write_1h * write_1h
            + t.output * rate("output", self.output)
        )
        return total / MILLION


_RATE_KEYS = [f.name for f in fields(Rates)]


def tokens_from_observer(usage: ObserverUsage) -> Tokens:
    """Normalise an observer's usage: its `input` already includes cache reads and writes."""
    return Tokens(
        input=usage.input,
        output=usage.output + usage.thinking,
        cache_read=usage.cached,
        cache_write=usage.cache_write,
        cache_write_1h=int((usage.details or {}).get("cache_write_1h") or 0),
    )


def tokens_from_agent(usage: Any) -> Tokens:
    """Normalise an agent's `model.Usage`: its `input_tokens` EXCLUDE the cache counters and its
    `output_tokens` already include reasoning."""
    read = usage.cache_read_tokens or 0
    write = usage.cache_write_tokens or 0
    return Tokens(
        input=(usage.input_tokens or 0) + read + write,
        output=usage.output_tokens or 0,
        cache_read=read,
        cache_write=write,
    )


def overrides_path() -> Path:
    """Return where the user's price overrides are read from."""
    if os.environ.get(PRICES_ENV):
        return Path(os.environ[PRICES_ENV]).expanduser()
    import platformdirs

    return Path(platformdirs.user_config_dir("auditor")) / "prices.json"


_override_cache: dict[Path, tuple[bytes, dict[str, Rates]]] = {}


def _decimal(path: Path, model: str, key: str, value: Any) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise AuditorError(
            f"{path}: {model}.{key} = {value!r} is not a number of USD per million tokens."
        )
    try:
        out = Decimal(str(value))
    except InvalidOperation:
        raise AuditorError(
            f"{path}: {model}.{key} = {value!r} is not a number of USD per million tokens."
        ) from None
    if out < 0:
        raise AuditorError(f"{path}: {model}.{key} = {value!r} is negative.")
    return out


def load_overrides(path: Path | None = None) -> dict[str, Rates]:
    """Read the override file (parsed again when its content changes); a missing file means no
    overrides."""
    path = path or overrides_path()
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        if os.environ.get(PRICES_ENV):
            raise AuditorError(f"{PRICES_ENV} points at {path}, which does not exist.") from None
        return {}
    cached = _override_cache.get(path)
    if cached and cached[0] == raw:
        return cached[1]
    try:
        data = json.loads(raw.decode("utf-8"))
    except ValueError as exc:
        raise AuditorError(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise AuditorError(f"{path} must hold a JSON object mapping model names to rates.")
    out: dict[str, Rates] = {}
    for model, entry in data.items():
        if not isinstance(entry, dict):
            raise AuditorError(f"{path}: the entry for {model!r} must be an object of rates.")
        unknown = sorted(set(entry) - set(_RATE_KEYS))
        if unknown:
            raise AuditorError(
                f"{path}: {model!r} has unknown key {unknown[0]!r}. Valid: {', '.join(_RATE_KEYS)}"
            )
        missing = [k for k in ("input", "output") if k not in entry]
        if missing:
            raise AuditorError(f"{path}: {model!r} needs an {missing[0]!r} rate.")
        out[model] = Rates(**{k: _decimal(path, model, k, v) for k, v in entry.items()})
    _override_cache[path] = (raw, out)
    return out


def _names(model: str) -> list[str]:
    """Return the names to look a model up under: as given, then without prefixes and dates."""
    names = [model]
    bare = model.removeprefix("models/").split("/")[-1]
    bare = re.sub(r"[-@]\d{8}$", "", bare)  # claude-sonnet-4-5-20250929, claude-haiku-4-5@20251001
    for name in (model.removeprefix("models/"), bare):
        if name not in names:
            names.append(name)
    return names


def _genai_price(
    model: str, t: Tokens, provider_id: str | None, at: datetime | None, batch: bool = False
) -> Cost:
    """Price with genai-prices; with `batch`, at its batch rate (source "genai-prices batch"),
    or the interactive price when it has no batch rate for the model (the caller halves it)."""
    try:
        from genai_prices import Usage, calc_price
    except ImportError:
        raise AuditorError(
            "Pricing needs the genai-prices package: pip install genai-prices"
        ) from None

    counts = {
        "input_tokens": t.input,
        "output_tokens": t.output,
        "cache_read_tokens": t.cache_read,
        "cache_write_tokens": t.cache_write,
    }
    if t.cache_write_1h:  # genai-prices wants it only as a share of cache_write_tokens
        counts["cache_write_1h_tokens"] = t.cache_write_1h
    usage = Usage(**counts)
    # A hint genai-prices does not know (an agent such as amp) falls back to its own guess.
    providers = [provider_id] if provider_id is None else [provider_id, None]
    for pid, name in [(pid, name) for pid in providers for name in _names(model)]:
        try:
            calc = calc_price(usage, name, provider_id=pid, genai_request_timestamp=at)
        except LookupError:
            continue
        except ValueError as exc:
            raise AuditorError(f"Cannot price {t} for {model!r}: {exc}") from None
        standard = Cost(Decimal(calc.total_price), False, "genai-prices", calc.model.id)
        if batch:
            try:
                rated = calc_price(
                    usage,
                    name,
                    provider_id=pid,
                    genai_request_timestamp=at,
                    price_context={"processing": "batch"},
                )
            except TypeError:  # a genai-prices without price variants
                return standard
            if Decimal(rated.total_price) < Decimal(calc.total_price):
                return Cost(Decimal(rated.total_price), False, "genai-prices batch", calc.model.id)
        return standard
    return Cost(None, True, None, None)


def price(
    model: str,
    tokens: Tokens,
    provider: str | None = None,
    *,
    at: datetime | None = None,
    batch: bool = False,
) -> Cost:
    """Price normalised tokens. `provider` is an observer or agent name (or a genai-prices id);
    `at` prices at a past date; `batch` prices at the batch rate (see BATCH_DISCOUNT)."""
    overrides = load_overrides()
    result: Cost | None = None
    for name in _names(model):
        if name in overrides:
            result = Cost(overrides[name].price(tokens), False, "override", name)
            break
    if result is None and provider in FREE_PROVIDERS:
        result = Cost(Decimal(0), False, "free", model)
    if result is None:
        provider_id = PROVIDER_IDS.get(provider, provider) if provider else None
        result = _genai_price(model, tokens, provider_id, at, batch)
    if batch and result.usd is not None and result.source != "genai-prices batch":
        result = Cost(
            result.usd * BATCH_DISCOUNT, result.unknown_model, result.source, result.model
        )
    return result


def cost(
    model: str,
    usage: ObserverUsage | Any,
    provider: str | None = None,
    *,
    at: datetime | None = None,
    batch: bool = False,
) -> Cost:
    """Price one call from an observer's `ObserverUsage` or an agent's `model.Usage`."""
    if isinstance(usage, Tokens):
        tokens = usage
    elif isinstance(usage, ObserverUsage):
        tokens = tokens_from_observer(usage)
    elif hasattr(usage, "input_tokens"):
        tokens = tokens_from_agent(usage)
    else:
        raise TypeError(
            f"cannot price {type(usage).__name__}: expected ObserverUsage or model.Usage"
        )
    return price(model, tokens, provider, at=at, batch=batch)


def agent_cost(
    model: str | None, usage: Any, agent: str | None = None, *, at: datetime | None = None
) -> Cost:
    """Price an agent's own call (a `model.Usage`), for cost reports. `agent` hints the provider."""
    if not model:
        return Cost(None, True, None, None)
    return price(model, tokens_from_agent(usage), agent, at=at)


def credits_per_usd() -> Decimal:
    """Return the credit rate from $AUDITOR_CREDITS_PER_USD (default 1 credit per dollar)."""
    raw = os.environ.get(CREDITS_ENV, "").strip()
    if not raw:
        return Decimal(1)
    try:
        rate = Decimal(raw)
    except InvalidOperation:
        rate = Decimal(-1)
    if not rate.is_finite() or rate < 0:
        raise AuditorError(
            f"{CREDITS_ENV}={raw!r} is not a number; set it to the credits per US dollar, e.g. 100."
        )
    return rate


@overload
def credits(usd: Decimal | float) -> Decimal: ...
@overload
def credits(usd: None) -> None: ...
def credits(usd: Decimal | float | None) -> Decimal | None:
    """Convert dollars to credits (None stays None: an unknown price has no credit value)."""
    if usd is None:
        return None
    return Decimal(str(usd)) * credits_per_usd()


# -- price bands for reports over token sums --------------------------------------------------

# Some models bill the whole call at a higher rate once its prompt passes a threshold, so token
# sums cannot be priced as one call. Calls are grouped by prompt-size band (between consecutive
# thresholds of any model) in SQL; inside a band every model's price is linear, so a group is
# priced with per-token rates probed once per (model, band) from the price table.
FALLBACK_THRESHOLDS = (
    32_000,
    100_000,
    128_000,
    199_999,
    200_000,
    256_000,
    272_000,
    512_000,
    524_288,
)
_scanned: tuple[tuple[int, ...], str | None] | None = None


def scan_price_table() -> tuple[tuple[int, ...], str | None]:
    """Return every prompt-size threshold at which some price changes (ascending), and the
    first future date (ISO) on which a dated genai-prices price starts, or None."""
    global _scanned
    if _scanned is None:
        found = {TIER_THRESHOLD, *FALLBACK_THRESHOLDS}
        today = datetime.now(UTC).date()
        starts: set = set()
        try:  # read the tiers genai-prices knows, so a new threshold is not missed
            from genai_prices.data_snapshot import get_snapshot
            from genai_prices.types import TieredPrices

            for provider in get_snapshot().providers:
                for model in provider.models:
                    prices_ = model.prices if isinstance(model.prices, list) else [model.prices]
                    for p in prices_:
                        start = getattr(getattr(p, "constraint", None), "start_date", None)
                        if start is not None and start > today:
                            starts.add(start)
                        p = getattr(p, "prices", p)
                        for value in vars(p).values():
                            if isinstance(value, TieredPrices):
                                found.update(t.start for t in value.tiers)
        except (
            ImportError,
            AttributeError,
            TypeError,
        ):  # its internals moved: the fallback list applies
            pass
        _scanned = (tuple(sorted(found)), min(starts).isoformat() if starts else None)
    return _scanned


def thresholds() -> tuple[int, ...]:
    """Return every prompt-size threshold at which some price changes, ascending."""
    return scan_price_table()[0]


def band_sql(prompt: str, bounds: tuple[int, ...] | None = None) -> str:
    """SQL giving the band number of a call whose whole prompt (cache included) is `prompt`,
    between the thresholds `bounds` (default: the price table's)."""
    bounds = thresholds() if bounds is None else bounds
    cases = " ".join(f"WHEN {prompt} <= {t} THEN {i}" for i, t in enumerate(bounds))
    return f"CASE {cases} ELSE {len(bounds)} END"


class Pricer:
    """Price grouped token sums exactly as the calls would be priced one by one."""

    PROBE_OUT = 1000

    def __init__(
        self, bounds: tuple[int, ...] | None = None, rates: dict[tuple, tuple | None] | None = None
    ) -> None:
        """`bounds`: the band thresholds (default: the price table's); `rates`: rates known
        already, (model, band, provider) -> what `rates` returns (see `auditor.pricing.stored_prices`)."""
        self.bounds = thresholds() if bounds is None else bounds
        self._rates: dict[tuple, tuple | None] = dict(rates or {})
        self.probed: dict[tuple, tuple | None] = {}  # rates looked up in the price table here
        self.sources_key: str | None = None  # what the prices came from, when stored

    def band_sql(self, prompt: str) -> str:
        """SQL giving the band number of a call whose whole prompt is `prompt`."""
        return band_sql(prompt, self.bounds)

    def _probe_size(self, band: int) -> int:
        return 1000 if band == 0 else self.bounds[band - 1] + 1

    def rates(self, model: str | None, band: int, provider: str | None = None):
        """(input, output, cache read, cache write) USD per token, or None for an unknown model."""
        key = (model, band, provider)
        if key not in self._rates:
            self._rates[key] = self._probe(model, band, provider) if model else None
            if model:
                self.probed[key] = self._rates[key]
        return self._rates[key]

    def _probe(self, model: str, band: int, provider: str | None):
        x, o = self._probe_size(band), self.PROBE_OUT
        base = price(model, Tokens(input=x), provider).usd
        if base is None:
            return None
        read = price(model, Tokens(input=x, cache_read=x), provider).usd
        write = price(model, Tokens(input=x, cache_write=x), provider).usd
        out = price(model, Tokens(input=x, output=o), provider).usd
        if read is None or write is None or out is None:
            return None
        return base / x, (out - base) / o, read / x, write / x

    def usd(
        self,
        model: str | None,
        band: int,
        uncached: int,
        output: int,
        cache_read: int,
        cache_write: int,
        provider: str | None = None,
    ) -> float | None:
        """Price the sums of calls of one band; `uncached` is prompt tokens not read from or written to cache."""
        r = self.rates(model, band, provider)
        if r is None:
            return None
        return float(r[0] * uncached + r[1] * output + r[2] * cache_read + r[3] * cache_write)
