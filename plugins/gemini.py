"""The Gemini observer backend (Gemini Developer API through google-genai).

One `generateContent` call per checkpoint with `course_correct` forced (function calling mode
ANY, the one allowed name), low thinking (`thinking_level` LOW on Gemini 3.x, a small
`thinking_budget` on 2.5, never both: the API answers 400), and the SDK's own retries
(`HttpRetryOptions`: google-genai makes a single attempt unless they are set).

Options: `model`, `api_key` (else GEMINI_API_KEY, then GOOGLE_API_KEY), `base_url` (else
GOOGLE_GEMINI_BASE_URL), `max_retries` (default 3), `api_version` (default "v1beta"),
`thinking_level` / `thinking_budget` (override the per-model default), `retry_initial_delay`
and `retry_max_delay` in seconds (SDK defaults 1 and 60).

Batch mode (`auditor run --batch`): the checkpoints go as inline requests of one
`batches.create` (POST models/{model}:batchGenerateContent), each with its key in `metadata`;
`batches.get` polls it and gives the answers in request order (`dest.inlined_responses`).
Inline requests suit batches up to 20 MB; the core splits larger ones.

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
    BatchAnswer,
    BatchItem,
    BatchStatus,
    ClientCache,
    ObserveRequest,
    ObserveResult,
    ObserverNeeds,
    ObserverUsage,
    hookimpl,
    installed,
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
    needs = ObserverNeeds(vendor="google", key_env=KEY_ENV, rank=10)

    def __init__(self) -> None:
        # One client per (event loop, key, endpoint): `Client.__del__` closes its transport, and
        # an async HTTP pool must not outlive the loop it was opened on.
        self._clients = ClientCache()
        self._sync: dict[tuple, Any] = {}  # blocking clients for batch mode

    def check(self, options: dict[str, Any]) -> str | None:
        """Return None when the SDK and a key are present, else what to install or set."""
        if not installed("google.genai"):
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

    def _sync_client(self, options: dict[str, Any]) -> Any:
        """A blocking client for the batch calls (kept while this backend lives)."""
        from google import genai
        from google.genai import types

        key = _api_key(options)
        if not key:
            raise AuditorError("No Gemini API key: set GEMINI_API_KEY (or pass --key).")
        base_url = options.get("base_url") or os.environ.get(BASE_URL_ENV) or None
        api_version = options.get("api_version", DEFAULT_API_VERSION)
        retries = int(options.get("max_retries", DEFAULT_MAX_RETRIES))
        settings = (key, base_url, api_version, retries)
        clients = self._sync
        if settings not in clients:
            retry = types.HttpRetryOptions(
                attempts=retries + 1,
                initial_delay=options.get("retry_initial_delay"),
                max_delay=options.get("retry_max_delay"),
            )
            http = types.HttpOptions(
                base_url=base_url, api_version=api_version, retry_options=retry
            )
            clients[settings] = genai.Client(api_key=key, http_options=http)
        return clients[settings]

    def build_config(
        self, request: ObserveRequest, options: dict[str, Any], *, batch: bool = False
    ) -> Any:
        """Return the GenerateContentConfig: forced tool, temperature, output cap, thinking, timeout
        (no timeout or retries inside a batch request: they belong to the batch calls)."""
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
            http_options=None
            if batch
            else types.HttpOptions(timeout=int(request.timeout * 1000), retry_options=retry),
        )

    async def observe(self, request: ObserveRequest, options: dict[str, Any]) -> ObserveResult:
        """Make one forced `course_correct` call and return the raw result."""
        client = self._client(options)
        config = self.build_config(request, options)
        started = time.perf_counter()
        resp = await client.aio.models.generate_content(
            model=request.model, contents=request.user, config=config
        )
        return _result(resp, request.model, time.perf_counter() - started)

    # -- batch mode ---------------------------------------------------------------------------
    def submit_batch(self, items: list[BatchItem], label: str, options: dict[str, Any]) -> str:
        """Create one batch of inline requests and return its name (batches/ID)."""
        from google.genai import types

        src = [
            types.InlinedRequest(
                contents=item.request.user,
                metadata={"key": item.key},
                config=self.build_config(item.request, options, batch=True),
            )
            for item in items
        ]
        job = self._sync_client(options).batches.create(
            model=items[0].request.model,
            src=src,
            config=types.CreateBatchJobConfig(display_name=label),
        )
        return job.name

    def find_batch(self, label: str, count: int, since: Any, options: dict[str, Any]) -> list[str]:
        """Return the name of the batch whose display name is `label`, if the API has one."""
        jobs = self._sync_client(options).batches.list()
        return [job.name for job in jobs if job.display_name == label and job.name]

    def poll_batch(self, batch_id: str, options: dict[str, Any]) -> BatchStatus:
        job = self._sync_client(options).batches.get(name=batch_id)
        state = job.state.value if job.state is not None else "JOB_STATE_UNSPECIFIED"
        counts = {}
        if job.completion_stats is not None:
            counts = {
                k: int(v)
                for k, v in job.completion_stats.model_dump(exclude_none=True).items()
                if str(v).isdigit()
            }
        return BatchStatus(done=state in _ENDED, state=state, counts=counts)

    def batch_answers(self, batch_id: str, options: dict[str, Any]) -> list[BatchAnswer]:
        """Return each inline response (in request order) as a result or an error."""
        job = self._sync_client(options).batches.get(name=batch_id)
        model = (job.model or "").removeprefix("models/")
        out = []
        responses = (job.dest.inlined_responses if job.dest else None) or []
        for i, item in enumerate(responses):
            key = (item.metadata or {}).get("key")
            if item.response is not None:
                out.append(BatchAnswer(key, i, result=_result(item.response, model, None)))
            else:
                err = item.error
                text = f"{err.code} {err.message}" if err is not None else "no response"
                out.append(BatchAnswer(key, i, error=f"batch request failed: {text}"))
        return out


_ENDED = {
    "JOB_STATE_SUCCEEDED",
    "JOB_STATE_FAILED",
    "JOB_STATE_CANCELLED",
    "JOB_STATE_EXPIRED",
    "JOB_STATE_PARTIALLY_SUCCEEDED",
}


def _result(resp: Any, model: str, latency: float | None) -> ObserveResult:
    """Turn a GenerateContentResponse into the core's ObserveResult."""
    calls = resp.function_calls or []
    usage = map_usage(resp.usage_metadata)
    if resp.candidates and resp.candidates[0].finish_reason is not None:
        usage.details["finish_reason"] = str(resp.candidates[0].finish_reason.value)
    raw = resp.model_dump(mode="json", exclude_none=True, exclude={"sdk_http_response"})
    return ObserveResult(
        tool_name=calls[0].name if calls else None,
        arguments=calls[0].args if calls else None,
        usage=usage,
        model=resp.model_version or model,
        latency_s=latency or 0.0,
        raw=raw,
    )


@hookimpl(trylast=True)
def register_observers(register):
    register(GeminiObserver())
