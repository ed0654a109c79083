"""The Gemini observer backend (Gemini Developer API through google-genai).

One `generateContent` call per checkpoint with `course_correct` forced (function calling mode
ANY, the one allowed name), low thinking (`thinking_level` LOW on Gemini 3.x, a small
`thinking_budget` on 2.5, never both: the API answers 400), and the SDK's own retries
(`HttpRetryOptions`: google-genai makes a single attempt unless they are set).

Options: `model`, `api_key` (else GEMINI_API_KEY, then GOOGLE_API_KEY), `base_url` (else
GOOGLE_GEMINI_BASE_URL), `max_retries` (default 3), `api_version` (default "v1beta"),
`thinking_level` / `thinking_budget` (override the per-model default), `retry_initial_delay`
and `retry_max_delay` in seconds (SDK defaults 1 and 60).

Limits: the SDK retries 408/429/5xx and timeouts with exponential backoff but does not read the
`RetryInfo.retryDelay` Google puts in 429 bodies.
"""

from __future__ import annotations

import os
import re
import time
from typing import Any

from auditor.api import (
    TOOL_DESCRIPTION,
    TOOL_NAME,
    TOOL_SCHEMA,
    AuditorError,
    ClientCache,
    ObserveRequest,
    ObserveResult,
    ObserverUsage,
    hookimpl,
)

DEFAULT_MODEL = "gemini-3.1-pro-preview"
DEFAULT_API_VERSION = "v1beta"
DEFAULT_MAX_RETRIES = 3
KEY_ENV = ("GEMINI_API_KEY", "GOOGLE_API_KEY")
BASE_URL_ENV = "GOOGLE_GEMINI_BASE_URL"
INSTALL_HINT = "pip install 'auditor[gemini]'"
# Gemini 2.5 budgets: Pro cannot turn thinking off (minimum 128); Flash and Flash-Lite can (0).
_BUDGET_25 = {"pro": 128}


def _api_key(options: dict[str, Any]) -> str | None:
    if options.get("api_key"):
        return options["api_key"]
    for name in KEY_ENV:
        if os.environ.get(name):
            return os.environ[name]
    return None


def thinking_config(model: str, options: dict[str, Any]) -> dict[str, Any] | None:
    """Return the `thinking_config` for a model: a level for 3.x, a budget for 2.5, else none."""
    if options.get("thinking_level"):
        return {"thinking_level": str(options["thinking_level"]).upper()}
    if options.get("thinking_budget") is not None:
        return {"thinking_budget": int(options["thinking_budget"])}
    name = model.removeprefix("models/")
    match = re.match(r"gemini-(\d+)(?:\.(\d+))?", name)
    if not match:
        return None
    major, minor = int(match.group(1)), int(match.group(2) or 0)
    if major >= 3:
        return {"thinking_level": "LOW"}
    if (major, minor) == (2, 5):
        variant = "pro" if "-pro" in name else "flash"
        return {"thinking_budget": _BUDGET_25.get(variant, 0)}
    return None


def map_usage(meta: Any) -> ObserverUsage:
    """Map `usageMetadata` onto ObserverUsage (promptTokenCount already includes the cached part)."""
    if meta is None:
        return ObserverUsage(details={"missing_usage": True})
    details: dict[str, Any] = {}
    if meta.total_token_count is not None:
        details["total"] = meta.total_token_count
    if getattr(meta, "tool_use_prompt_token_count", None):
        details["tool_use_prompt"] = meta.tool_use_prompt_token_count
    return ObserverUsage(
        input=meta.prompt_token_count or 0,
        output=meta.candidates_token_count or 0,
        cached=meta.cached_content_token_count or 0,
        thinking=meta.thoughts_token_count or 0,
        details=details,
    )


class GeminiObserver:
    """Judge checkpoints with a Gemini model through the Gemini Developer API."""

    name = "gemini"
    default_model = DEFAULT_MODEL
    description = "Google Gemini (Developer API); key in GEMINI_API_KEY"

    def __init__(self) -> None:
        # One client per (event loop, key, endpoint): `Client.__del__` closes its transport, and
        # an async HTTP pool must not outlive the loop it was opened on.
        self._clients = ClientCache()

    def check(self, options: dict[str, Any]) -> str | None:
        """Return None when the SDK and a key are present, else what to install or set."""
        try:
            import google.genai  # noqa: F401
        except ImportError:
            return f"The gemini observer needs the google-genai SDK: {INSTALL_HINT}"
        if not _api_key(options):
            return "The gemini observer needs an API key: set GEMINI_API_KEY (or pass --key)."
        return None

    def _client(self, options: dict[str, Any]) -> Any:
        from google import genai
        from google.genai import types

        key = _api_key(options)
        if not key:
            raise AuditorError("No Gemini API key: set GEMINI_API_KEY (or pass --key).")
        base_url = options.get("base_url") or os.environ.get(BASE_URL_ENV) or None
        api_version = options.get("api_version", DEFAULT_API_VERSION)
        http = types.HttpOptions(base_url=base_url, api_version=api_version)
        return self._clients.get(
            (key, base_url, api_version), lambda: genai.Client(api_key=key, http_options=http)
        )

    def build_config(self, request: ObserveRequest, options: dict[str, Any]) -> Any:
        """Return the GenerateContentConfig: forced tool, temperature, output cap, thinking, timeout."""
        from google.genai import types

        retries = int(options.get("max_retries", DEFAULT_MAX_RETRIES))
        retry = types.HttpRetryOptions(
            attempts=retries + 1,
            initial_delay=options.get("retry_initial_delay"),
            max_delay=options.get("retry_max_delay"),
        )
        decl = types.FunctionDeclaration(
            name=TOOL_NAME, description=TOOL_DESCRIPTION, parameters_json_schema=TOOL_SCHEMA
        )
        thinking = thinking_config(request.model, options)
        return types.GenerateContentConfig(
            system_instruction=request.system,
            temperature=request.temperature,
            max_output_tokens=request.max_output_tokens,
            thinking_config=types.ThinkingConfig(**thinking) if thinking else None,
            tools=[types.Tool(function_declarations=[decl])],
            tool_config=types.ToolConfig(
                function_calling_config=types.FunctionCallingConfig(
                    mode=types.FunctionCallingConfigMode.ANY, allowed_function_names=[TOOL_NAME]
                )
            ),
            http_options=types.HttpOptions(
                timeout=int(request.timeout * 1000), retry_options=retry
            ),
        )

    async def observe(self, request: ObserveRequest, options: dict[str, Any]) -> ObserveResult:
        """Make one forced `course_correct` call and return the raw result."""
        client = self._client(options)
        config = self.build_config(request, options)
        started = time.perf_counter()
        resp = await client.aio.models.generate_content(
            model=request.model, contents=request.user, config=config
        )
        latency = time.perf_counter() - started
        calls = resp.function_calls or []
        usage = map_usage(resp.usage_metadata)
        if resp.candidates and resp.candidates[0].finish_reason is not None:
            usage.details["finish_reason"] = str(resp.candidates[0].finish_reason.value)
        raw = resp.model_dump(mode="json", exclude_none=True, exclude={"sdk_http_response"})
        return ObserveResult(
            tool_name=calls[0].name if calls else None,
            arguments=calls[0].args if calls else None,
            usage=usage,
            model=resp.model_version or request.model,
            latency_s=latency,
            raw=raw,
        )


@hookimpl(trylast=True)
def register_observers(register):
    register(GeminiObserver())
