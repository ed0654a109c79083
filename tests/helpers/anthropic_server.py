"""A scripted Anthropic Messages server on 127.0.0.1 for driving the real Claude Code offline.

Claude Code (2.1.328) sends every model call as `POST /v1/messages?beta=true` with
`"stream": true` and reads the answer as server-sent events, in the order the real API sends
them:

    message_start        the message with empty content and the input side of the usage
    ping
    content_block_start  per block: {"type": "text", "text": ""} or
                         {"type": "tool_use", "id": ..., "name": ..., "input": {}}
    content_block_delta  text_delta (the text) or input_json_delta (the tool input as JSON)
    content_block_stop
    message_delta        stop_reason ("end_turn" or "tool_use") and the final usage
    message_stop

The server plays a script: each model call takes the next `Turn` (a list of text and tool-use
blocks with the usage to report), or asks a function of the request body for one. Every request
body is recorded, so a test can read what the client sent the model: the tool results, the
hooks' additional context, a re-wake message. Requests the script does not cover (a side call
such as a title, or one beyond the script) are answered with a short text and recorded too.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_ids = itertools.count(1)


@dataclass(frozen=True)
class Text:
    text: str


@dataclass(frozen=True)
class ToolUse:
    name: str
    input: dict[str, Any]
    id: str = field(default_factory=lambda: f"toolu_{next(_ids):024d}")


@dataclass(frozen=True)
class Usage:
    """The four token counts the API reports for a call."""

    input_tokens: int = 1200
    output_tokens: int = 40
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0

    def as_json(self) -> dict[str, Any]:
        return {
            "input_tokens": self.input_tokens,
            "cache_creation_input_tokens": self.cache_creation_input_tokens,
            "cache_read_input_tokens": self.cache_read_input_tokens,
            "cache_creation": {
                "ephemeral_5m_input_tokens": self.cache_creation_input_tokens,
                "ephemeral_1h_input_tokens": 0,
            },
            "output_tokens": self.output_tokens,
            "service_tier": "standard",
        }


@dataclass
class Turn:
    """One model answer: its blocks in order and the usage the server reports for it."""

    blocks: list[Text | ToolUse]
    usage: Usage = field(default_factory=Usage)
    delay: float = 0.0  # seconds before the answer starts
    # (n, seconds): a pause after the first n blocks, as the API streams an answer over time
    # (the client runs a call as soon as its block has arrived)
    pause: tuple[int, float] | None = None

    @property
    def stop_reason(self) -> str:
        return "tool_use" if any(isinstance(b, ToolUse) for b in self.blocks) else "end_turn"


Step = Turn | Callable[[dict], "Turn | None"]


@dataclass
class Request:
    path: str
    headers: dict[str, str]
    body: Any
    turn: Turn | None  # what was answered from the script (None: a side request)
    message_id: str = ""


def sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def stream_events(turn: Turn, model: str, message_id: str) -> list[bytes]:
    """The server-sent events of one answer, in the API's order."""
    start_usage = {**turn.usage.as_json(), "output_tokens": 1}
    out = [
        sse(
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": message_id,
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": start_usage,
                },
            },
        ),
        sse("ping", {"type": "ping"}),
    ]
    for i, block in enumerate(turn.blocks):
        if isinstance(block, Text):
            first = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": block.text}]
        else:
            first = {"type": "tool_use", "id": block.id, "name": block.name, "input": {}}
            raw = json.dumps(block.input)
            half = len(raw) // 2  # in two pieces, as the API streams a tool's input
            deltas = [
                {"type": "input_json_delta", "partial_json": part}
                for part in ("", raw[:half], raw[half:])
            ]
        out.append(
            sse(
                "content_block_start",
                {"type": "content_block_start", "index": i, "content_block": first},
            )
        )
        for delta in deltas:
            out.append(
                sse(
                    "content_block_delta",
                    {"type": "content_block_delta", "index": i, "delta": delta},
                )
            )
        out.append(sse("content_block_stop", {"type": "content_block_stop", "index": i}))
    out.append(
        sse(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": turn.stop_reason, "stop_sequence": None},
                "usage": turn.usage.as_json(),
            },
        )
    )
    out.append(sse("message_stop", {"type": "message_stop"}))
    return out


class AnthropicServer:
    """Answer Claude Code's model calls from `script`; record every request.

    A step of the script is a `Turn`, or a function of the request body that returns one (or
    None to leave the request to the next step); `script` may also be one function that
    answers every request. `side` decides which requests are not the
    agent's own turns (default: calls without tools, such as a title); they get `side_reply`.
    """

    def __init__(
        self,
        script: list[Step] | Callable[[dict], Turn] | None = None,
        *,
        side: Callable[[dict], bool] | None = None,
        side_reply: str = "A title",
        fallback: Turn | None = None,
    ):
        # A function instead of a list answers every request itself (a model that reads).
        self.answer = script if callable(script) else None
        self.script: list[Step] = [] if callable(script) else list(script or [])
        self.side = side or (lambda body: not body.get("tools"))
        self.side_reply = side_reply
        self.fallback = fallback or Turn([Text("Done.")])
        self.requests: list[Request] = []
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, *args):
                pass

            def do_GET(self):
                self._json(
                    404,
                    {"type": "error", "error": {"type": "not_found_error", "message": self.path}},
                )

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    body = json.loads(raw) if raw else {}
                except ValueError:
                    body = raw.decode("utf-8", "replace")
                headers = {k.lower(): v for k, v in self.headers.items()}
                path = self.path.split("?")[0]
                if path.endswith("/count_tokens"):
                    server._record(Request(self.path, headers, body, None))
                    self._json(200, {"input_tokens": 1000})
                    return
                if path != "/v1/messages" or not isinstance(body, dict):
                    server._record(Request(self.path, headers, body, None))
                    self._json(
                        404,
                        {"type": "error", "error": {"type": "not_found_error", "message": path}},
                    )
                    return
                turn = server._next(body)
                message_id = f"msg_{next(_ids):024d}"
                server._record(Request(self.path, headers, body, turn, message_id))
                answer = turn or Turn([Text(server.side_reply)], Usage(200, 8))
                if answer.delay:
                    time.sleep(answer.delay)
                model = str(body.get("model") or "claude-sonnet-4-6")
                if not body.get("stream"):
                    message = {
                        "id": message_id,
                        "type": "message",
                        "role": "assistant",
                        "model": model,
                        "content": [
                            {"type": "text", "text": b.text}
                            if isinstance(b, Text)
                            else {"type": "tool_use", "id": b.id, "name": b.name, "input": b.input}
                            for b in answer.blocks
                        ],
                        "stop_reason": answer.stop_reason,
                        "stop_sequence": None,
                        "usage": answer.usage.as_json(),
                    }
                    self._json(200, message)
                    return
                data = b"".join(stream_events(answer, model, message_id))
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream; charset=utf-8")
                    self.send_header("Cache-Control", "no-cache")
                    self.send_header("request-id", f"req_{message_id[4:]}")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    if answer.pause is None:
                        self.wfile.write(data)
                    else:
                        blocks, seconds = answer.pause
                        events = stream_events(answer, model, message_id)
                        stops = [
                            i
                            for i, e in enumerate(events)
                            if e.startswith(b"event: content_block_stop")
                        ]
                        self.wfile.write(b"".join(events[: stops[blocks - 1] + 1]))
                        time.sleep(seconds)
                        self.wfile.write(b"".join(events[stops[blocks - 1] + 1 :]))
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def _json(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()

    def _record(self, request: Request) -> None:
        with self.lock:
            self.requests.append(request)

    def _next(self, body: dict) -> Turn | None:
        """The scripted answer to `body`, or None for a side request."""
        if self.side(body):
            return None
        if self.answer is not None:
            return self.answer(body)
        with self.lock:
            while self.script:
                step = self.script[0]
                turn = step(body) if callable(step) else step
                self.script.pop(0)
                if turn is not None:
                    return turn
        return self.fallback

    def add(self, *steps: Step) -> None:
        with self.lock:
            self.script.extend(steps)

    @property
    def turns(self) -> list[Request]:
        """The requests answered from the script (the agent's own model calls)."""
        with self.lock:
            return [r for r in self.requests if r.turn is not None]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> AnthropicServer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def last_user_text(body: dict) -> str:
    """All the text of the request's last user message: typed text, tool results, reminders."""
    messages = body.get("messages") or []
    for m in reversed(messages):
        if m.get("role") == "user":
            return content_text(m.get("content"))
    return ""


def content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content or []:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text":
            parts.append(str(block.get("text") or ""))
        elif block.get("type") == "tool_result":
            parts.append(content_text(block.get("content")))
    return "\n".join(parts)
