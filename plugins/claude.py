"""The Claude observer backend (Anthropic Messages API through the anthropic SDK).

One `messages.create` call per checkpoint with `tool_choice` forcing `course_correct`. There is
no `thinking` field: the API rejects thinking together with a forced tool choice, so "low
thinking" means none. Temperature goes through `extra_body` (SDK 1.0 removed the keyword) and
only to the models that still accept it: from Claude Opus 4.7 on, any temperature is a 400.

Options: `model`, `api_key` (else ANTHROPIC_API_KEY), `base_url` (else ANTHROPIC_BASE_URL; no
`/v1` suffix), `max_retries` (default 3; the SDK retries 408/409/429/5xx and connection errors
and honours `retry-after`), `send_temperature` (True/False overrides the per-model rule).

Batch mode (`auditor run --batch`): Message Batches (`messages.batches.create`, POST
/v1/messages/batches), each request's `custom_id` the core's key and its `params` the same body
as the single call (temperature a plain key there); `retrieve` polls; `results` streams the
JSONL answers, in no particular order (matched on `custom_id`).
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

DEFAULT_MODEL = "claude-sonnet-4-6"
DEFAULT_MAX_RETRIES = 3
KEY_ENV = "ANTHROPIC_API_KEY"
BASE_URL_ENV = "ANTHROPIC_BASE_URL"
INSTALL_HINT = "pip install 'auditor[claude]'"

_NEW_NAME = re.compile(r"claude-(opus|sonnet|haiku)-(\d+)(?:-(\d{1,2}))?(?!\d)")
_OLD_NAME = re.compile(r"claude-(\d)(?:-(\d))?-(opus|sonnet|haiku)")


def accepts_temperature(model: str) -> bool:
    """Tell whether a model accepts a non-default temperature (unknown names: no, to be safe)."""
    if _OLD_NAME.search(model):  # Claude 3.x naming: claude-3-5-sonnet-...
        return True
    match = _NEW_NAME.search(model)
    if not match:
        return False
    family, major, minor = match.group(1), int(match.group(2)), int(match.group(3) or 0)
    if major < 4:
        return True
    if major > 4:
        return False
    return not (family == "opus" and minor >= 7)


def _api_key(options: dict[str, Any]) -> str | None:
    return options.get("api_key") or os.environ.get(KEY_ENV) or None


def map_usage(usage: Any) -> ObserverUsage:
    """Map Anthropic `usage` onto ObserverUsage (`input_tokens` excludes both cache counters)."""
    if usage is None:
        return ObserverUsage(details={"missing_usage": True})
    read = usage.cache_read_input_tokens or 0
    write = usage.cache_creation_input_tokens or 0
    details_out = getattr(usage, "output_tokens_details", None)
    thinking = (getattr(details_out, "thinking_tokens", None) or 0) if details_out else 0
    details: dict[str, Any] = {}
    if usage.cache_creation is not None and usage.cache_creation.ephemeral_1h_input_tokens:
        details["cache_write_1h"] = usage.cache_creation.ephemeral_1h_input_tokens
    if usage.service_tier:
        details["service_tier"] = usage.service_tier
    return ObserverUsage(
        input=usage.input_tokens + read + write,
        output=usage.output_tokens - thinking,
        cached=read,
        thinking=thinking,
        cache_write=write,
        details=details,
    )


def _off_spec(problem: str) -> AuditorError:
    return AuditorError(f"off-spec answer from the Anthropic API: {problem}")


_MISSING = object()


def _field(obj: Any, name: str) -> Any:
    """`obj.name`, or _MISSING when the answer did not have it (the SDK builds its models
    without validation, so an absent field reads as None)."""
    present = getattr(obj, "model_fields_set", None)
    if present is not None and name not in present:
        return _MISSING
    return getattr(obj, name, _MISSING)


def _kind(value: Any) -> str:
    """Name a value as JSON would: null, a string, an array..."""
    if value is _MISSING:
        return "missing"
    if value is None:
        return "null"
    kinds = ((bool, "a boolean"), ((int, float), "a number"), (str, "a string"), (list, "an array"))
    return next((name for types, name in kinds if isinstance(value, types)), "an object")


def tool_use_block(msg: Any) -> Any:
    """Return the first tool_use block of a Messages answer (None when there is none), or raise
    AuditorError saying what is wrong with an answer that is not shaped like one."""
    if isinstance(msg, (list, str, int, float)) or msg is None:
        raise _off_spec(f"the answer is {_kind(msg)}, not a Messages object")
    content = _field(msg, "content")
    if not isinstance(content, list):
        raise _off_spec(f"content is {_kind(content)}, not a list of blocks")
    for i, block in enumerate(content):
        kind = getattr(block, "type", None)
        if not isinstance(kind, str):
            raise _off_spec(f"content[{i}] is {_kind(block)}, not a block with a type")
        if kind == "tool_use":
            return block
    return None


def _check_usage(usage: Any) -> None:
    if usage is None:
        return  # recorded as missing usage
    for name in ("input_tokens", "output_tokens"):
        value = _field(usage, name)
        if not isinstance(value, int) or isinstance(value, bool):
            raise _off_spec(f"usage.{name} is {_kind(value)}, not a number of tokens")


class ClaudeObserver:
    """Judge checkpoints with a Claude model through the Anthropic Messages API."""

    name = "claude"
    default_model = DEFAULT_MODEL
    description = "Anthropic Claude (Messages API); key in ANTHROPIC_API_KEY"
    needs = ObserverNeeds(vendor="anthropic", key_env=(KEY_ENV,), rank=20)

    def __init__(self) -> None:
        # One client per (event loop, key, endpoint, retries): an async HTTP pool must not
        # outlive the loop it was opened on.
        self._clients = ClientCache()
        self._sync: dict[tuple, Any] = {}  # blocking clients for batch mode

    def check(self, options: dict[str, Any]) -> str | None:
        """Return None when the SDK and a key are present, else what to install or set."""
        if not installed("anthropic"):
            return f"The claude observer needs the anthropic SDK: {INSTALL_HINT}"
        if not _api_key(options):
            return f"The claude observer needs an API key: set {KEY_ENV} (or pass --key)."
        return None

    def _client(self, options: dict[str, Any]) -> Any:
        import anthropic

        key = _api_key(options)
        if not key:
            raise AuditorError(f"No Anthropic API key: set {KEY_ENV} (or pass --key).")
        base_url = options.get("base_url") or os.environ.get(BASE_URL_ENV) or None
        retries = int(options.get("max_retries", DEFAULT_MAX_RETRIES))
        return self._clients.get(
            (key, base_url, retries),
            lambda: anthropic.AsyncAnthropic(api_key=key, base_url=base_url, max_retries=retries),
        )

    def build_kwargs(self, request: ObserveRequest, options: dict[str, Any]) -> dict[str, Any]:
        """Return the `messages.create` arguments: forced tool, output cap, temperature, timeout."""
        send_temperature = options.get("send_temperature")
        if send_temperature is None:
            send_temperature = accepts_temperature(request.model)
        kwargs: dict[str, Any] = {
            "model": request.model,
            "max_tokens": request.max_output_tokens,
            "system": request.system,
            "messages": [{"role": "user", "content": request.user}],
            "tools": [
                {"name": TOOL_NAME, "description": TOOL_DESCRIPTION, "input_schema": TOOL_SCHEMA}
            ],
            "tool_choice": {"type": "tool", "name": TOOL_NAME},
            "timeout": request.timeout,
        }
        if send_temperature:
            kwargs["extra_body"] = {"temperature": request.temperature}
        return kwargs

    async def observe(self, request: ObserveRequest, options: dict[str, Any]) -> ObserveResult:
        """Make one forced `course_correct` call and return the raw result."""
        client = self._client(options)
        started = time.perf_counter()
        try:
            msg = await client.messages.create(**self.build_kwargs(request, options))
        except json.JSONDecodeError:
            raise _off_spec("the answer is not JSON") from None
        return _result(msg, request.model, time.perf_counter() - started)

    # -- batch mode ---------------------------------------------------------------------------
    def _sync_client(self, options: dict[str, Any]) -> Any:
        import anthropic

        key = _api_key(options)
        if not key:
            raise AuditorError(f"No Anthropic API key: set {KEY_ENV} (or pass --key).")
        base_url = options.get("base_url") or os.environ.get(BASE_URL_ENV) or None
        retries = int(options.get("max_retries", DEFAULT_MAX_RETRIES))
        settings = (key, base_url, retries)
        if settings not in self._sync:
            self._sync[settings] = anthropic.Anthropic(
                api_key=key, base_url=base_url, max_retries=retries
            )
        return self._sync[settings]

    def submit_batch(self, items: list[BatchItem], label: str, options: dict[str, Any]) -> str:
        """Create one Message Batch and return its id (msgbatch_...)."""
        requests = []
        for item in items:
            params = self.build_kwargs(item.request, options)
            params.pop("timeout")
            params.update(params.pop("extra_body", {}))
            requests.append({"custom_id": item.key, "params": params})
        return self._sync_client(options).messages.batches.create(requests=requests).id

    def find_batch(self, label: str, count: int, since: Any, options: dict[str, Any]) -> list[str]:
        """Message Batches carry no name: return the batches created after `since` with
        `count` requests."""
        found = []
        for b in self._sync_client(options).messages.batches.list(limit=100):
            if b.created_at < since:
                break  # newest first: the rest are older
            c = b.request_counts
            if c.processing + c.succeeded + c.errored + c.canceled + c.expired == count:
                found.append(b.id)
        return found

    def poll_batch(self, batch_id: str, options: dict[str, Any]) -> BatchStatus:
        b = self._sync_client(options).messages.batches.retrieve(batch_id)
        return BatchStatus(
            done=b.processing_status == "ended",
            state=b.processing_status,
            counts=b.request_counts.model_dump(),
        )

    def batch_answers(self, batch_id: str, options: dict[str, Any]) -> list[BatchAnswer]:
        """Return every result of an ended batch, keyed by custom_id."""
        out = []
        for item in self._sync_client(options).messages.batches.results(batch_id):
            r = item.result
            if r.type == "succeeded":
                try:
                    out.append(
                        BatchAnswer(item.custom_id, None, result=_result(r.message, "", None))
                    )
                except AuditorError as exc:
                    out.append(BatchAnswer(item.custom_id, None, error=str(exc)))
            elif r.type == "errored":
                err = getattr(r.error, "error", None)
                text = f"{err.type}: {err.message}" if err is not None else "errored"
                out.append(BatchAnswer(item.custom_id, None, error=f"batch request failed: {text}"))
            else:  # canceled, expired
                out.append(BatchAnswer(item.custom_id, None, error=f"batch request {r.type}"))
        return out


def _result(msg: Any, model: str, latency: float | None) -> ObserveResult:
    """Turn a Messages answer into the core's ObserveResult (AuditorError when off-spec)."""
    block = tool_use_block(msg)
    _check_usage(msg.usage)
    usage = map_usage(msg.usage)
    if msg.stop_reason:
        usage.details["stop_reason"] = msg.stop_reason
    return ObserveResult(
        tool_name=block.name if block else None,
        arguments=block.input if block else None,
        usage=usage,
        model=msg.model or model,
        latency_s=latency or 0.0,
        raw=msg.model_dump(mode="json", exclude_none=True),
    )


@hookimpl(trylast=True)
def register_observers(register):
    register(ClaudeObserver())
