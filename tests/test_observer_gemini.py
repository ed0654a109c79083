"""The gemini backend through the real google-genai SDK against a local stub."""

from __future__ import annotations

import asyncio
import json
import sys

import pytest

pytest.importorskip("google.genai")

from auditor_plugins.gemini import GeminiObserver, thinking_config
from helpers.wire import SYSTEM, USER, Reply, Stub, gemini_error, gemini_response

from auditor.audit.observe import ObserveRequest, validate

KEY = "TEST-GEMINI-KEY-0123"


@pytest.fixture
def stub():
    s = Stub(Reply(200, gemini_response()))
    yield s
    s.close()


def observe(stub, model="gemini-3.1-pro-preview", timeout=10.0, **options):
    opts = {
        "api_key": KEY,
        "base_url": stub.url,
        "retry_initial_delay": 0.01,
        "retry_max_delay": 0.02,
        **options,
    }
    request = ObserveRequest(system=SYSTEM, user=USER, model=model, timeout=timeout)
    return asyncio.run(GeminiObserver().observe(request, opts))


def test_forces_the_tool_and_parses_the_answer(stub):
    result = observe(stub)
    sent = stub.last
    assert sent["path"] == "/v1beta/models/gemini-3.1-pro-preview:generateContent"
    assert sent["headers"]["x-goog-api-key"] == KEY
    body = sent["body"]
    assert body["toolConfig"]["functionCallingConfig"] == {
        "mode": "ANY",
        "allowedFunctionNames": ["course_correct"],
    }
    decl = body["tools"][0]["functionDeclarations"][0]
    assert decl["name"] == "course_correct"
    schema = decl.get("parameters_json_schema") or decl.get("parametersJsonSchema")
    assert schema["required"] == ["needsCorrection"]
    assert schema["additionalProperties"] is False
    gen = body["generationConfig"]
    assert gen["temperature"] == 0.1 and gen["maxOutputTokens"] == 1024
    thinking = gen["thinkingConfig"]
    assert (thinking.get("thinking_level") or thinking.get("thinkingLevel")) == "LOW"
    assert "thinking_budget" not in thinking and "thinkingBudget" not in thinking
    assert body["systemInstruction"]["parts"][0]["text"] == SYSTEM
    assert body["contents"][0]["parts"][0]["text"] == USER

    assert result.tool_name == "course_correct"
    assert result.arguments["needsCorrection"] is True
    u = result.usage
    assert (u.input, u.cached, u.output, u.thinking, u.cache_write) == (5321, 4096, 38, 112, 0)
    assert result.model == "gemini-3.1-pro-preview"
    assert result.latency_s > 0
    verdict = validate(result)
    assert verdict.valid and verdict.needs_correction and verdict.message
    dumped = json.dumps(result.raw)
    assert KEY not in dumped
    assert (
        result.raw["candidates"][0]["content"]["parts"][0]["function_call"]["name"]
        == "course_correct"
    )


def test_key_from_environment(stub, monkeypatch):
    monkeypatch.setenv("GEMINI_API_KEY", "ENV-GEMINI-KEY")
    observe(stub, api_key=None)
    assert stub.last["headers"]["x-goog-api-key"] == "ENV-GEMINI-KEY"


def test_base_url_from_environment(stub, monkeypatch):
    monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", stub.url)
    request = ObserveRequest(system=SYSTEM, user=USER, model="gemini-3.1-pro-preview")
    asyncio.run(GeminiObserver().observe(request, {"api_key": KEY}))
    assert len(stub.log) == 1


@pytest.mark.parametrize(
    "model, expected",
    [
        ("gemini-2.5-flash", {"thinking_budget": 0}),
        ("gemini-2.5-pro", {"thinking_budget": 128}),
        ("gemini-3-flash-preview", {"thinking_level": "LOW"}),
        ("gemma-3-27b-it", None),
    ],
)
def test_thinking_per_model(model, expected):
    assert thinking_config(model, {}) == expected


def test_gemini_25_sends_a_budget_not_a_level(stub):
    observe(stub, model="gemini-2.5-flash")
    thinking = stub.last["body"]["generationConfig"]["thinkingConfig"]
    assert (thinking.get("thinking_budget", thinking.get("thinkingBudget"))) == 0
    assert "thinking_level" not in thinking and "thinkingLevel" not in thinking


def test_429_then_success_is_retried(stub):
    stub.queue.append(Reply(429, gemini_error(429), {"Retry-After": "0"}))
    result = observe(stub)
    assert len(stub.log) == 2
    assert validate(result).valid


def test_500_surfaces_after_the_retries(stub):
    from google.genai import errors

    stub.default = Reply(500, gemini_error(500))
    with pytest.raises(errors.ServerError):
        observe(stub, max_retries=1)
    assert len(stub.log) == 2


def test_timeout(stub):
    stub.default = Reply(200, gemini_response(), delay=60)  # far past the call's 0.3 s
    with pytest.raises(Exception) as info:
        observe(stub, timeout=0.3, max_retries=0)
    assert "timeout" in type(info.value).__name__.lower() or "timed out" in str(info.value).lower()
    assert len(stub.log) == 1  # given up once, at the timeout: no retry, no answer waited for


def test_no_tool_call_is_invalid(stub):
    stub.default = Reply(200, gemini_response(text='{"needsCorrection": false}'))
    result = observe(stub)
    assert result.tool_name is None and result.arguments is None
    assert result.usage.details["finish_reason"] == "MALFORMED_FUNCTION_CALL"
    verdict = validate(result)
    assert not verdict.valid and "without calling" in verdict.problem


def test_wrong_tool_name_is_invalid(stub):
    stub.default = Reply(200, gemini_response(name="other_tool"))
    verdict = validate(observe(stub))
    assert not verdict.valid and "other_tool" in verdict.problem


def test_bad_arguments_are_invalid(stub):
    stub.default = Reply(200, gemini_response(args={"needsCorrection": "perhaps"}))
    verdict = validate(observe(stub))
    assert not verdict.valid and "needsCorrection" in verdict.problem


def test_check_names_the_key_and_the_install(monkeypatch):
    obs = GeminiObserver()
    assert "GEMINI_API_KEY" in obs.check({})
    assert obs.check({"api_key": KEY}) is None
    monkeypatch.setenv("GOOGLE_API_KEY", "x")
    assert obs.check({}) is None
    monkeypatch.setitem(sys.modules, "google.genai", None)
    assert "pip install 'auditor[gemini]'" in obs.check({"api_key": KEY})


def test_registered_through_the_hook(plugins):
    obs = plugins.observer("gemini")
    assert obs.name == "gemini" and obs.default_model == "gemini-3.1-pro-preview"
