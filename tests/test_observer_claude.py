"""The claude backend through the real anthropic SDK against a local stub."""

from __future__ import annotations

import asyncio
import json
import sys

import pytest

pytest.importorskip("anthropic")

from auditor_plugins.claude import ClaudeObserver, accepts_temperature
from helpers.wire import (
    SYSTEM,
    USER,
    Reply,
    Stub,
    anthropic_error,
    anthropic_response,
)

from auditor.audit.observe import ObserveRequest, validate

KEY = "sk-ant-TEST-0123456789"
FAST = {"retry-after-ms": "1"}


@pytest.fixture
def stub():
    s = Stub(Reply(200, anthropic_response()))
    yield s
    s.close()


def observe(stub, model="claude-sonnet-4-6", timeout=10.0, **options):
    opts = {"api_key": KEY, "base_url": stub.url, **options}
    request = ObserveRequest(system=SYSTEM, user=USER, model=model, timeout=timeout)
    return asyncio.run(ClaudeObserver().observe(request, opts))


def key_sent(headers):
    return headers.get("x-api-key") or headers.get("authorization", "").removeprefix("Bearer ")


def test_forces_the_tool_and_parses_the_answer(stub):
    result = observe(stub)
    sent = stub.last
    assert sent["path"] == "/v1/messages"
    assert key_sent(sent["headers"]) == KEY
    body = sent["body"]
    assert body["tool_choice"] == {"type": "tool", "name": "course_correct"}
    assert body["tools"][0]["name"] == "course_correct"
    assert body["tools"][0]["input_schema"]["required"] == ["needsCorrection"]
    assert body["tools"][0]["input_schema"]["additionalProperties"] is False
    assert body["max_tokens"] == 1024 and body["temperature"] == 0.1
    assert "thinking" not in body
    assert body["system"] == SYSTEM and body["messages"] == [{"role": "user", "content": USER}]

    assert result.tool_name == "course_correct"
    assert result.arguments == {"needsCorrection": False, "message": None}
    u = result.usage
    # input = input_tokens + cache reads + cache writes
    assert (u.input, u.cached, u.cache_write, u.output, u.thinking) == (
        812 + 4096 + 300,
        4096,
        300,
        61,
        0,
    )
    assert result.model == "claude-sonnet-4-6"
    verdict = validate(result)
    assert verdict.valid and verdict.needs_correction is False
    assert KEY not in json.dumps(result.raw)
    assert result.raw["content"][0]["type"] == "tool_use"


def test_thinking_tokens_are_split_out_of_output(stub):
    body = anthropic_response()
    body["usage"]["output_tokens_details"] = {"thinking_tokens": 20}
    stub.default = Reply(200, body)
    u = observe(stub).usage
    assert (u.output, u.thinking) == (41, 20)


def test_no_temperature_for_models_that_reject_it(stub):
    observe(stub, model="claude-opus-4-7")
    assert "temperature" not in stub.last["body"]


@pytest.mark.parametrize(
    "model, accepts",
    [
        ("claude-sonnet-4-6", True),
        ("claude-sonnet-4-5-20250929", True),
        ("claude-haiku-4-5", True),
        ("claude-opus-4-6", True),
        ("claude-opus-4-1", True),
        ("claude-3-5-sonnet-20241022", True),
        ("claude-opus-4-7", False),
        ("claude-opus-4-8", False),
        ("claude-opus-5", False),
        ("claude-sonnet-5-5", False),
        ("some-future-model", False),
    ],
)
def test_temperature_rule(model, accepts):
    assert accepts_temperature(model) is accepts


def test_key_and_base_url_from_environment(stub, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "ENV-ANTHROPIC-KEY")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", stub.url)
    request = ObserveRequest(system=SYSTEM, user=USER, model="claude-haiku-4-5")
    asyncio.run(ClaudeObserver().observe(request, {}))
    assert key_sent(stub.last["headers"]) == "ENV-ANTHROPIC-KEY"


def test_429_then_success_is_retried(stub):
    stub.queue.append(Reply(429, anthropic_error(429), {"Retry-After": "0"}))
    result = observe(stub)
    assert len(stub.log) == 2
    assert validate(result).valid


def test_500_surfaces_after_the_retries(stub):
    import anthropic

    stub.default = Reply(500, anthropic_error(500), FAST)
    with pytest.raises(anthropic.InternalServerError):
        observe(stub, max_retries=2)
    assert len(stub.log) == 3


def test_timeout(stub):
    import anthropic

    stub.default = Reply(200, anthropic_response(), delay=60)  # far past the call's 0.3 s
    with pytest.raises(anthropic.APITimeoutError):
        observe(stub, timeout=0.3, max_retries=0)
    assert len(stub.log) == 1  # given up once, at the timeout: no retry, no answer waited for


def test_no_tool_call_is_invalid(stub):
    stub.default = Reply(200, anthropic_response(text="I think the agent is fine."))
    result = observe(stub)
    assert result.tool_name is None
    verdict = validate(result)
    assert not verdict.valid and "without calling" in verdict.problem


def test_wrong_tool_name_is_invalid(stub):
    stub.default = Reply(200, anthropic_response(name="other_tool"))
    verdict = validate(observe(stub))
    assert not verdict.valid and "other_tool" in verdict.problem


def test_bad_arguments_are_invalid(stub):
    stub.default = Reply(200, anthropic_response(args={"needsCorrection": True}))
    verdict = validate(observe(stub))
    assert not verdict.valid and "no message" in verdict.problem


def _without(key):
    body = anthropic_response()
    body.pop(key)
    return body


def _with(**fields):
    return {**anthropic_response(), **fields}


def _usage(**fields):
    body = anthropic_response()
    body["usage"] = {**body["usage"], **fields}
    return body


@pytest.mark.parametrize(
    "body, problem",
    [
        (_with(content=None), "content is null, not a list of blocks"),
        (_without("content"), "content is missing, not a list of blocks"),
        (_with(content="course_correct"), "content is a string, not a list of blocks"),
        (_with(content=[None]), "content[0] is null, not a block with a type"),
        ({"type": "message"}, "content is missing, not a list of blocks"),
        ([{"type": "tool_use"}], "the answer is an array, not a Messages object"),
        (_usage(input_tokens=None), "usage.input_tokens is null, not a number of tokens"),
        (_usage(output_tokens="61"), "usage.output_tokens is a string, not a number of tokens"),
        ("<html>502 Bad Gateway</html>", "the answer is not JSON"),
    ],
)
def test_an_off_spec_answer_says_what_is_wrong_with_it(stub, body, problem):
    from auditor.errors import AuditorError

    stub.default = Reply(200, body)
    with pytest.raises(AuditorError) as caught:
        observe(stub, max_retries=0)
    assert str(caught.value) == f"off-spec answer from the Anthropic API: {problem}"


def test_check_names_the_key_and_the_install(monkeypatch):
    obs = ClaudeObserver()
    assert "ANTHROPIC_API_KEY" in obs.check({})
    assert obs.check({"api_key": KEY}) is None
    monkeypatch.setitem(sys.modules, "anthropic", None)
    assert "pip install 'auditor[claude]'" in obs.check({"api_key": KEY})


def test_registered_through_the_hook(plugins):
    obs = plugins.observer("claude")
    assert obs.name == "claude" and obs.default_model == "claude-sonnet-4-6"
