"""Prices: genai-prices rates, the long-context tier, overrides, free backends and credits."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

pytest.importorskip("genai_prices")

from auditor.audit.observe import ObserverUsage
from auditor.errors import AuditorError
from auditor.model import Usage
from auditor.pricing import model_prices as prices
from auditor.pricing.model_prices import Cost, agent_cost, cost, credits

M = Decimal(1_000_000)


@pytest.fixture(autouse=True)
def clean_env(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("AUDITOR_PRICES", raising=False)
    monkeypatch.delenv("AUDITOR_CREDITS_PER_USD", raising=False)


def write_overrides(tmp_path, monkeypatch, data) -> None:
    path = tmp_path / "prices.json"
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    monkeypatch.setenv("AUDITOR_PRICES", str(path))


# -- Gemini: rates and the >200k tier --------------------------------------------------------
def test_gemini_observer_call():
    usage = ObserverUsage(input=5321, output=38, cached=4096, thinking=112)
    c = cost("gemini-3.1-pro-preview", usage, "gemini")
    # (input - cached) * 2 + cached * 0.20 + (output + thinking) * 12, per million
    assert c.usd == (Decimal(1225) * 2 + Decimal(4096) * Decimal("0.2") + 150 * 12) / M
    assert c == Cost(c.usd, False, "genai-prices", "gemini-3.1-pro-preview")


@pytest.mark.parametrize(
    "model, low, high",
    [
        # (input, cached, output) rates per million at <=200k and >200k prompts
        ("gemini-3.1-pro-preview", ("2", "0.2", "12"), ("4", "0.4", "18")),
        ("gemini-2.5-pro", ("1.25", "0.125", "10"), ("2.5", "0.25", "15")),
    ],
)
def test_gemini_pro_long_context_tier_applies_to_the_whole_request(model, low, high):
    def expected(rates, prompt, cached, out):
        i, c, o = (Decimal(r) for r in rates)
        return ((prompt - cached) * i + cached * c + out * o) / M

    at_limit = ObserverUsage(input=200_000, cached=50_000, output=1000, thinking=500)
    above = ObserverUsage(input=200_001, cached=50_000, output=1000, thinking=500)
    assert cost(model, at_limit, "gemini").usd == expected(low, 200_000, 50_000, 1500)
    assert cost(model, above, "gemini").usd == expected(high, 200_001, 50_000, 1500)
    # the tier is decided on the whole prompt, cached tokens included
    mostly_cached = ObserverUsage(input=250_000, cached=200_000, output=0)
    assert cost(model, mostly_cached, "gemini").usd == expected(high, 250_000, 200_000, 0)


def test_gemini_flash_has_no_tier():
    usage = ObserverUsage(input=300_000, output=1000)
    assert (
        cost("gemini-2.5-flash", usage, "gemini").usd
        == (300_000 * Decimal("0.3") + 1000 * Decimal("2.5")) / M
    )


# -- Anthropic: cache writes ------------------------------------------------------------------
def test_claude_observer_call_with_cache_reads_and_writes():
    # input = input_tokens 812 + cache reads 4096 + cache writes 300
    usage = ObserverUsage(input=5208, output=61, cached=4096, cache_write=300)
    c = cost("claude-sonnet-4-6", usage, "claude")
    assert c.usd == (812 * 3 + 4096 * Decimal("0.3") + 300 * Decimal("3.75") + 61 * 15) / M


def test_claude_one_hour_cache_writes():
    usage = ObserverUsage(input=1300, output=0, cache_write=300, details={"cache_write_1h": 100})
    c = cost("claude-haiku-4-5", usage, "claude")
    assert c.usd == (1000 * 1 + 200 * Decimal("1.25") + 100 * 2) / M


def test_dated_model_names_resolve():
    usage = ObserverUsage(input=1000, output=1000)
    dated = cost("claude-sonnet-4-5-20250929", usage, "claude")
    assert dated.usd == (1000 * 3 + 1000 * 15) / M and dated.model == "claude-sonnet-4-5"


def test_batch_is_half_price():
    usage = ObserverUsage(input=1000, output=1000)
    full = cost("claude-sonnet-4-6", usage, "claude").usd
    assert cost("claude-sonnet-4-6", usage, "claude", batch=True).usd == full / 2


# -- free and unknown --------------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["local", "embedded"])
def test_local_backends_are_free(backend):
    c = cost("gemma3:270m", ObserverUsage(input=10_000, output=500), backend)
    assert c.usd == 0 and not c.unknown_model and c.source == "free"


def test_unknown_model_is_never_a_silent_zero():
    c = cost("qwen9:404b", ObserverUsage(input=10_000, output=500))
    assert c.usd is None and c.unknown_model is True
    assert credits(c.usd) is None
    assert agent_cost(None, Usage(thread="t", key="k", input_tokens=1)).unknown_model


# -- agents' own usage (input EXCLUDES cache; output includes reasoning) -------------------------
def test_agent_usage_convention():
    usage = Usage(
        thread="t",
        key="k",
        model="claude-opus-4-6",
        input_tokens=10,
        output_tokens=100,
        cache_read_tokens=1000,
        cache_write_tokens=50,
        reasoning_tokens=40,
    )
    c = agent_cost("claude-opus-4-6", usage, "claude_code")
    assert c.usd == (10 * 5 + 1000 * Decimal("0.5") + 50 * Decimal("6.25") + 100 * 25) / M
    assert cost("claude-opus-4-6", usage, "claude_code") == c


def test_agent_hint_unknown_to_genai_prices_still_prices():
    usage = Usage(thread="t", key="k", input_tokens=1000, output_tokens=0)
    assert agent_cost("claude-sonnet-4-6", usage, "amp").usd == 1000 * 3 / M


# -- the override file ---------------------------------------------------------------------------
def test_override_prices_a_new_model_with_tiers(tmp_path, monkeypatch):
    write_overrides(
        tmp_path,
        monkeypatch,
        {
            "my-model": {
                "input": 1,
                "output": 2,
                "cache_read": 0.1,
                "input_above_200k": 3,
                "output_above_200k": 4,
            }
        },
    )
    small = cost("my-model", ObserverUsage(input=1000, cached=400, output=10, thinking=5))
    assert small == Cost(
        (600 * 1 + 400 * Decimal("0.1") + 15 * 2) / M, False, "override", "my-model"
    )
    big = cost("my-model", ObserverUsage(input=300_000, output=10))
    assert big.usd == (300_000 * 3 + 10 * 4) / M


def test_override_wins_and_defaults_cache_rates_to_input(tmp_path, monkeypatch):
    write_overrides(tmp_path, monkeypatch, {"claude-sonnet-4-6": {"input": 10, "output": 20}})
    c = cost(
        "claude-sonnet-4-6-20260101",
        ObserverUsage(input=300, cached=100, cache_write=100, output=1),
        "claude",
    )
    assert c.source == "override" and c.usd == (300 * 10 + 1 * 20) / M


def test_override_can_price_a_local_model(tmp_path, monkeypatch):
    write_overrides(tmp_path, monkeypatch, {"gemma3:270m": {"input": 0.01, "output": 0.01}})
    assert cost("gemma3:270m", ObserverUsage(input=M, output=0), "local").usd == Decimal("0.01")


def test_default_override_location(tmp_path):
    path = tmp_path / "config" / "auditor" / "prices.json"
    assert prices.overrides_path() == path
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"x-model": {"input": 1, "output": 1}}))
    assert cost("x-model", ObserverUsage(input=M)).usd == 1


@pytest.mark.parametrize(
    "data, message",
    [
        ("{not json", "is not valid JSON"),
        ([1, 2], "must hold a JSON object"),
        (
            {"m": {"input": 1, "output": 1, "inptu_above_200k": 2}},
            "unknown key 'inptu_above_200k'. Valid: input, output",
        ),
        ({"m": {"input": 1}}, "'m' needs an 'output' rate"),
        ({"m": {"input": "cheap", "output": 1}}, "m.input = 'cheap' is not a number"),
        ({"m": {"input": -1, "output": 1}}, "is negative"),
    ],
)
def test_bad_override_files_say_what_is_wrong(tmp_path, monkeypatch, data, message):
    write_overrides(tmp_path, monkeypatch, data)
    with pytest.raises(AuditorError, match=message.replace("(", r"\(").replace("[", r"\[")):
        cost("m", ObserverUsage(input=1))


def test_missing_override_file_named_by_env(tmp_path, monkeypatch):
    monkeypatch.setenv("AUDITOR_PRICES", str(tmp_path / "nope.json"))
    with pytest.raises(AuditorError, match="AUDITOR_PRICES points at .*nope.json"):
        cost("m", ObserverUsage(input=1))


# -- credits -----------------------------------------------------------------------------------
def test_credits(monkeypatch):
    assert credits(Decimal("0.25")) == Decimal("0.25")
    monkeypatch.setenv("AUDITOR_CREDITS_PER_USD", "100")
    assert credits(Decimal("0.25")) == 25
    assert credits(0.5) == 50
    monkeypatch.setenv("AUDITOR_CREDITS_PER_USD", "lots")
    with pytest.raises(AuditorError, match="AUDITOR_CREDITS_PER_USD='lots' is not a number"):
        credits(Decimal(1))
