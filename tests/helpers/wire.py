"""A recording HTTP stub on 127.0.0.1 and the provider response bodies the observer tests serve.

The bodies follow the shapes captured from the real APIs (../shared/reference/wire/), built here
so the tests run without ../shared. Each test drives the real SDK against `Stub.url`.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SYSTEM = "You are an observer watching a coding agent. Always answer by calling course_correct."
USER = (
    "# Agent thread\n\n## user\nFix the failing test in tests/test_parser.py\n\n"
    "## assistant\nI'll edit src/parse_utils.py ...\n"
)
CORRECTION = "You are editing the wrong file: the failing test imports src/parser.py."


@dataclass
class Reply:
    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0  # seconds to wait before answering (timeouts); ended by `Stub.close`


class Stub:
    """Record every request; answer from `queue` (FIFO of Reply) or else `default`, unless
    `answer` (a function of the request body) returns a Reply for it."""

    def __init__(self, default: Reply, answer=None):
        self.default = default
        self.answer = answer
        self.queue: list[Reply] = []
        self.log: list[dict[str, Any]] = []
        self.arrivals: list[float] = []  # time.monotonic() as each request came in
        self.answered = 0  # answers sent (or given up when the client had gone)
        self.lock = threading.Lock()
        # Cleared by `holding`: every answer waits until it is set again. A caller that waits
        # for the observer cannot return meanwhile, however slow or fast the machine is.
        self.answering = threading.Event()
        self.answering.set()
        self.closed = threading.Event()
        self.in_flight = self.max_in_flight = 0  # requests being answered at once
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out in two writes: with Nagle's algorithm on, the body waits
            # for the client's delayed ACK of the headers, 40 ms a call no real provider adds.
            disable_nagle_algorithm = True

            def log_message(self, *args):
                pass

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw.decode("utf-8", "replace")
                with stub.lock:
                    stub.arrivals.append(time.monotonic())
                    stub.log.append(
                        {
                            "method": self.command,
                            "path": self.path,
                            "body": body,
                            "headers": {k.lower(): v for k, v in self.headers.items()},
                        }
                    )
                    chosen = stub.answer(body) if stub.answer is not None else None
                    reply = chosen or (stub.queue.pop(0) if stub.queue else stub.default)
                    stub.in_flight += 1
                    stub.max_in_flight = max(stub.max_in_flight, stub.in_flight)
                if reply.delay:
                    stub.closed.wait(reply.delay)
                stub.answering.wait()
                with stub.lock:
                    stub.in_flight -= 1
                out = reply.body
                data = json.dumps(out) if not isinstance(out, (str, bytes)) else out
                data = data.encode() if isinstance(data, str) else data
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    for k, v in reply.headers.items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout test)
                finally:
                    with stub.lock:
                        stub.answered += 1

            do_GET = do_POST

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()

    @contextmanager
    def holding(self) -> Iterator[None]:
        """Hold every answer back inside the block: what returns meanwhile did not wait for one."""
        self.answering.clear()
        try:
            yield
        finally:
            self.answering.set()

    def close(self) -> None:
        self.closed.set()
        self.answering.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    @property
    def last(self) -> dict[str, Any]:
        return self.log[-1]


# -- Gemini ---------------------------------------------------------------------------------
def gemini_response(
    args: Any = None, name: str = "course_correct", *, text: str | None = None
) -> dict[str, Any]:
    """Return a generateContent body with one functionCall (or a text part when `text`)."""
    if args is None:
        args = {"needsCorrection": True, "message": CORRECTION}
    part = (
        {"text": text}
        if text is not None
        else {
            "functionCall": {"name": name, "args": args},
            "thoughtSignature": "c3R1Yi10aG91Z2h0LXNpZ25hdHVyZS0wMDAx",
        }
    )
    return {
        "candidates": [
            {
                "content": {"role": "model", "parts": [part]},
                "finishReason": "STOP" if text is None else "MALFORMED_FUNCTION_CALL",
                "index": 0,
            }
        ],
        "usageMetadata": {
            "promptTokenCount": 5321,
            "candidatesTokenCount": 38,
            "cachedContentTokenCount": 4096,
            "thoughtsTokenCount": 112,
            "totalTokenCount": 5471,
        },
        "modelVersion": "gemini-3.1-pro-preview",
        "responseId": "stub-resp-0001",
    }


def gemini_error(status: int) -> dict[str, Any]:
    names = {429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 400: "INVALID_ARGUMENT"}
    return {"error": {"code": status, "message": f"stub error {status}", "status": names[status]}}


# -- Anthropic ------------------------------------------------------------------------------
def anthropic_response(
    args: Any = None, name: str = "course_correct", *, text: str | None = None
) -> dict[str, Any]:
    """Return a Messages body with one tool_use block (or a text block when `text`)."""
    if args is None:
        args = {"needsCorrection": False, "message": None}
    block = (
        {"type": "text", "text": text}
        if text is not None
        else {"type": "tool_use", "id": "toolu_01Stub", "name": name, "input": args}
    )
    return {
        "id": "msg_01Stub",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-6",
        "content": [block],
        "stop_reason": "tool_use" if text is None else "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 812,
            "cache_creation_input_tokens": 300,
            "cache_read_input_tokens": 4096,
            "cache_creation": {"ephemeral_5m_input_tokens": 300, "ephemeral_1h_input_tokens": 0},
            "output_tokens": 61,
            "service_tier": "standard",
        },
    }


def anthropic_error(status: int) -> dict[str, Any]:
    kinds = {429: "rate_limit_error", 500: "api_error", 400: "invalid_request_error"}
    return {
        "type": "error",
        "error": {"type": kinds[status], "message": f"stub error {status}"},
        "request_id": f"req_stub{status}",
    }


# -- OpenAI-compatible ----------------------------------------------------------------------
def openai_response(
    arguments: Any = None,
    name: str = "course_correct",
    *,
    content: str | None = "",
    tool_call: bool = True,
    usage: bool = True,
) -> dict[str, Any]:
    """Return a chat.completion body; `arguments` a JSON string (per spec) or an object."""
    if arguments is None:
        arguments = json.dumps({"needsCorrection": True, "message": CORRECTION})
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_call:
        message["tool_calls"] = [
            {
                "id": "call_stub123",
                "index": 0,
                "type": "function",
                "function": {"name": name, "arguments": arguments},
            }
        ]
    body: dict[str, Any] = {
        "id": "chatcmpl-stub123",
        "object": "chat.completion",
        "created": 1763632800,
        "model": "qwen2.5:7b-instruct",
        "choices": [
            {"index": 0, "message": message, "finish_reason": "tool_calls" if tool_call else "stop"}
        ],
    }
    if usage:
        body["usage"] = {
            "prompt_tokens": 912,
            "completion_tokens": 29,
            "total_tokens": 941,
            "prompt_tokens_details": {"cached_tokens": 512},
            "completion_tokens_details": {"reasoning_tokens": 9},
        }
    return body


def openai_error(status: int) -> dict[str, Any]:
    return {
        "error": {
            "message": f"stub error {status}",
            "type": "api_error",
            "param": None,
            "code": None,
        }
    }


# -- llama.cpp (embedded backend, and a real OpenAI-compatible server for the local one) --------
def require(module: str, why: str) -> None:
    """Import `module` or skip the test; under CI (env CI set) a missing module fails instead."""
    import importlib
    import os

    import pytest

    try:
        importlib.import_module(module)
    except ImportError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"CI must have {module} installed ({why}): {exc}")
        pytest.skip(f"{module} is not installed ({why}); CI installs it")


def gemma_gguf():
    """Return the bundled Gemma GGUF, assembled once per machine in a shared temp directory.

    The tests' isolated HOME would otherwise re-assemble the 250 MB file for every test.
    """
    import tempfile
    from pathlib import Path

    from auditor_plugins.embedded import bundled_model_path

    return bundled_model_path(Path(tempfile.gettempdir()) / "auditor-test-models")
