"""The local observer backend: any OpenAI-compatible server (Ollama, llama.cpp, vLLM, LM Studio).

One `chat.completions.create` call per checkpoint through the openai SDK, with the tool forced
by name. Servers differ in what they honour: Ollama ignores `tool_choice`, llama.cpp's
`llama-server` accepts only the strings auto/none/required, llama-cpp-python's server accepts
only the named form. So:

- `tool_choice` option: "function" (default, the named form), "required" or "auto". When the
  server rejects the named form with a 4xx that mentions tool_choice, the call is repeated once
  with "required" and that server is remembered as needing it.
- Arguments may come as a JSON string (the spec) or an object (some servers).
- Fallback: when the answer has no tool call but its text holds a JSON object with a
  `needsCorrection` key (bare, fenced, or wrapped as {"name": ..., "arguments": {...}}), that
  object is taken as the `course_correct` arguments and `usage.details["fallback"]` says so.
  Anything else gives `tool_name` None, which the core records as an invalid answer.

Local calls cost nothing; the tokens are recorded anyway. Options: `model` (else
AUDITOR_LOCAL_MODEL), `base_url` (else AUDITOR_LOCAL_BASE_URL, else Ollama's
http://localhost:11434/v1), `api_key` (else AUDITOR_LOCAL_API_KEY, else a placeholder: local
servers ignore it; OPENAI_API_KEY is deliberately not read so a real key never goes to a
local URL), `max_retries` (default 3), `tool_choice`, `reasoning_effort` (sent only when set).
"""

from __future__ import annotations

import json
import os
import re
import time
from typing import Any

from auditor.api import (
    TOOL_DESCRIPTION,
    TOOL_NAME,
    TOOL_SCHEMA,
    ClientCache,
    ObserveRequest,
    ObserveResult,
    ObserverNeeds,
    ObserverUsage,
    UnknownName,
    hookimpl,
    installed,
)

DEFAULT_BASE_URL = "http://localhost:11434/v1"
DEFAULT_MODEL = "gemma3:270m"
DEFAULT_MAX_RETRIES = 3
BASE_URL_ENV = "AUDITOR_LOCAL_BASE_URL"
MODEL_ENV = "AUDITOR_LOCAL_MODEL"
KEY_ENV = "AUDITOR_LOCAL_API_KEY"
PLACEHOLDER_KEY = "local"
INSTALL_HINT = "pip install 'auditor[local]'"
TOOL_CHOICES = ("function", "required", "auto")

TOOLS = [
    {
        "type": "function",
        "function": {"name": TOOL_NAME, "description": TOOL_DESCRIPTION, "parameters": TOOL_SCHEMA},
    }
]
NAMED_CHOICE = {"type": "function", "function": {"name": TOOL_NAME}}

_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


def base_url(options: dict[str, Any]) -> str:
    return (options.get("base_url") or os.environ.get(BASE_URL_ENV) or DEFAULT_BASE_URL).rstrip("/")


def _loads(text: str) -> Any:
    """Decode JSON arguments; raw newlines inside strings (small local models) are tolerated."""
    try:
        return json.loads(text, strict=False)
    except ValueError:
        return text


def json_from_text(text: str | None) -> dict[str, Any] | None:
    """Find `course_correct` arguments written as JSON in a text answer, or return None."""
    if not text:
        return None
    candidates = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    decoder = json.JSONDecoder(strict=False)
    for chunk in candidates:
        for start in [i for i, ch in enumerate(chunk) if ch == "{"]:
            try:
                obj, _ = decoder.raw_decode(chunk, start)
            except ValueError:
                continue
            if not isinstance(obj, dict):
                continue
            if "needsCorrection" in obj:
                return obj
            inner = obj.get("arguments", obj.get("parameters"))
            if isinstance(inner, str):
                inner = _loads(inner)
            if isinstance(inner, dict) and "needsCorrection" in inner:
                return inner
    return None


def map_usage(usage: dict[str, Any] | None) -> ObserverUsage:
    """Map OpenAI-style `usage` onto ObserverUsage (servers that omit it give zeros, flagged)."""
    if not usage:
        return ObserverUsage(details={"missing_usage": True})
    reasoning = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    return ObserverUsage(
        input=usage.get("prompt_tokens") or 0,
        output=(usage.get("completion_tokens") or 0) - reasoning,
        cached=cached,
        thinking=reasoning,
    )


def parse_completion(data: dict[str, Any]) -> tuple[str | None, Any, ObserverUsage]:
    """Return (tool name, arguments, usage) from a chat.completion as a dict.

    Shared with the embedded backend, whose llama-cpp-python answers in the same shape.
    """
    usage = map_usage(data.get("usage"))
    choices = data.get("choices") or []
    if not choices:
        return None, None, usage
    choice = choices[0]
    if choice.get("finish_reason"):
        usage.details["finish_reason"] = choice["finish_reason"]
    message = choice.get("message") or {}
    calls = message.get("tool_calls") or []
    fn = (calls[0].get("function") or {}) if calls else message.get("function_call")
    if fn:
        args = fn.get("arguments")
        return fn.get("name"), _loads(args) if isinstance(args, str) else args, usage
    found = json_from_text(message.get("content"))
    if found is not None:
        usage.details["fallback"] = "content_json"
        return TOOL_NAME, found, usage
    return None, None, usage


def dump(resp: Any) -> dict[str, Any]:
    """The SDK's chat.completion as JSON-able data.

    warnings=False: some servers send `arguments` as an object where the SDK types a str.
    pydantic stops at 255 levels of nesting ("Maximum serialization depth exceeded"): fields
    the spec does not have are then left out (`dropped_fields` names them), and an answer whose
    own fields are that deep is an error saying so.
    """
    try:
        return resp.model_dump(mode="json", exclude_none=True, warnings=False)
    except ValueError as exc:
        if "depth" not in str(exc):
            raise
    extra = sorted(resp.model_extra or {})
    try:
        data = resp.model_dump(mode="json", exclude_none=True, warnings=False, exclude=set(extra))
    except ValueError as exc:
        if "depth" not in str(exc):
            raise
        raise ValueError(
            "the server's answer is nested too deep to read (over 255 levels of JSON in its "
            "choices or usage); not a chat completion"
        ) from None
    data["dropped_fields"] = extra
    return data


def _rejects_named_choice(exc: Exception) -> bool:
    status = getattr(exc, "status_code", None)
    return status in (400, 422, 500) and "tool_choice" in str(exc)


class LocalObserver:
    """Judge checkpoints with a model served by a local OpenAI-compatible server."""

    name = "local"
    description = "any OpenAI-compatible server (Ollama by default); free"
    # Chosen only by name: it needs a server, which nothing here can tell is running.
    needs = ObserverNeeds(vendor="local")

    def __init__(self) -> None:
        self._clients = ClientCache()
        self._needs_required: set[str] = set()  # base URLs that reject the named tool_choice

    @property
    def default_model(self) -> str:
        return os.environ.get(MODEL_ENV) or DEFAULT_MODEL

    def check(self, options: dict[str, Any]) -> str | None:
        """Return None when the SDK is present and the server answers, else how to fix it."""
        if not installed("openai"):
            return f"The local observer needs the openai SDK: {INSTALL_HINT}"
        choice = options.get("tool_choice") or "function"
        if choice not in TOOL_CHOICES:
            return str(UnknownName("tool_choice", choice, list(TOOL_CHOICES)))
        # Here, not at import: every command loads this plugin, and urllib.request brings in
        # http.client, ssl and email (a tenth of an empty ingest's start).
        import urllib.error
        import urllib.request

        url = base_url(options)
        try:
            with urllib.request.urlopen(url + "/models", timeout=3):
                pass
        except urllib.error.HTTPError:
            pass  # it answered: the server is there (it may just not list models)
        except (urllib.error.URLError, OSError, ValueError):
            return (
                f"No OpenAI-compatible server answers at {url}: start one (`ollama serve`, then "
                f"`ollama pull {self.default_model}`; or `python -m llama_cpp.server --model "
                f"FILE.gguf`) or point {BASE_URL_ENV} / --base-url at yours."
            )
        return None

    def _client(self, options: dict[str, Any]) -> Any:
        import openai

        key = options.get("api_key") or os.environ.get(KEY_ENV) or PLACEHOLDER_KEY
        url = base_url(options)
        retries = int(options.get("max_retries", DEFAULT_MAX_RETRIES))
        return self._clients.get(
            (key, url, retries),
            lambda: openai.AsyncOpenAI(api_key=key, base_url=url, max_retries=retries),
        )

    def build_kwargs(self, request: ObserveRequest, options: dict[str, Any]) -> dict[str, Any]:
        """Return the `chat.completions.create` arguments for one forced call."""
        choice = options.get("tool_choice") or "function"
        if choice not in TOOL_CHOICES:
            raise UnknownName("tool_choice", choice, list(TOOL_CHOICES))
        if choice == "function" and base_url(options) in self._needs_required:
            choice = "required"
        kwargs: dict[str, Any] = {
            "model": request.model,
            "messages": [
                {"role": "system", "content": request.system},
                {"role": "user", "content": request.user},
            ],
            "tools": TOOLS,
            "tool_choice": NAMED_CHOICE if choice == "function" else choice,
            "temperature": request.temperature,
            "max_tokens": request.max_output_tokens,
            "timeout": request.timeout,
        }
        if options.get("reasoning_effort"):
            kwargs["reasoning_effort"] = options["reasoning_effort"]
        return kwargs

    async def observe(self, request: ObserveRequest, options: dict[str, Any]) -> ObserveResult:
        """Make one forced `course_correct` call and return the raw result."""
        import openai

        client = self._client(options)
        kwargs = self.build_kwargs(request, options)
        started = time.perf_counter()
        try:
            resp = await client.chat.completions.create(**kwargs)
        except openai.APIStatusError as exc:
            if kwargs["tool_choice"] != NAMED_CHOICE or not _rejects_named_choice(exc):
                raise
            self._needs_required.add(base_url(options))
            resp = await client.chat.completions.create(**{**kwargs, "tool_choice": "required"})
        latency = time.perf_counter() - started
        data = dump(resp)
        tool_name, arguments, usage = parse_completion(data)
        return ObserveResult(
            tool_name=tool_name,
            arguments=arguments,
            usage=usage,
            model=data.get("model") or request.model,
            latency_s=latency,
            raw=data,
        )


@hookimpl(trylast=True)
def register_observers(register):
    register(LocalObserver())
