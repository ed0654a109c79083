"""A scripted OpenAI Responses API model server on 127.0.0.1, for driving the real Codex CLI.

Codex (0.169) speaks the Responses API to a provider configured with `wire_api = "responses"`:
each model call is a `POST {base_url}/responses` with `"stream": true`, and the answer is an
SSE stream. The events and fields below are the ones the real client was seen to consume:

    response.created              {"response": {"id"}}
    response.output_item.added    {"output_index", "item"}   (message / function_call /
                                                              custom_tool_call / reasoning)
    response.output_text.delta    {"item_id", "output_index", "content_index", "delta"}
    response.output_item.done     {"output_index", "item"}   (the whole item)
    response.completed            {"response": {"id", "usage": {input_tokens,
                                   input_tokens_details.cached_tokens, output_tokens,
                                   output_tokens_details.reasoning_tokens, total_tokens}}}

The server plays `script` in order, one `Turn` per model call, and records every request body
(`requests`). A `Turn` may wait for something before it answers (`before`): a test holds the
model's next step until auditor's worker has done its part. A call past the script's end is
answered with a short final message and counted in `unscripted` (a loop shows there).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "gpt-5.5"  # a model Codex 0.169 knows: it offers it the freeform apply_patch tool


@dataclass(frozen=True)
class Usage:
    input: int  # input tokens, cached ones included (as the API counts them)
    cached: int
    output: int  # output tokens, reasoning included
    reasoning: int

    def as_api(self) -> dict[str, Any]:
        return {
            "input_tokens": self.input,
            "input_tokens_details": {"cached_tokens": self.cached},
            "output_tokens": self.output,
            "output_tokens_details": {"reasoning_tokens": self.reasoning},
            "total_tokens": self.input + self.output,
        }


@dataclass
class Turn:
    """One model call's answer: its output items, its usage, and what to wait for first."""

    items: list[dict[str, Any]]
    usage: Usage | None = None  # None: one made up from the turn's position, distinct per call
    before: Callable[[], bool | None] | None = None  # returns False: drop the call unanswered


def say(text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def shell(call_id: str, cmd: str) -> dict[str, Any]:
    """A call of Codex's `exec_command` tool."""
    return {
        "type": "function_call",
        "name": "exec_command",
        "arguments": json.dumps({"cmd": cmd}),
        "call_id": call_id,
    }


def patch(call_id: str, text: str) -> dict[str, Any]:
    """A call of Codex's freeform `apply_patch` tool (a custom tool call)."""
    return {"type": "custom_tool_call", "name": "apply_patch", "input": text, "call_id": call_id}


def think(summary: str) -> dict[str, Any]:
    return {"type": "reasoning", "summary": [{"type": "summary_text", "text": summary}]}


class ResponsesServer:
    """The model server (see the module docstring). `base_url` goes into Codex's config."""

    def __init__(self, script: list[Turn]):
        self.script = list(script)
        self.requests: list[dict[str, Any]] = []  # bodies of POST .../responses, in order
        self.other: list[str] = []  # any other request: "METHOD PATH"
        self.usages: list[Usage] = []  # what each answer reported
        self.unscripted = 0
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, *args):
                pass

            def do_GET(self):
                with server.lock:
                    server.other.append(f"GET {self.path}")
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if not self.path.rstrip("/").endswith("/responses"):
                    with server.lock:
                        server.other.append(f"POST {self.path}")
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                with server.lock:
                    server.requests.append(json.loads(raw))
                    n = len(server.requests)
                    turn = server.script.pop(0) if server.script else None
                    if turn is None:
                        server.unscripted += 1
                if turn is None:
                    turn = Turn([say("(the scripted model has nothing more to say)")])
                if turn.before is not None and turn.before() is False:
                    self.close_connection = True  # the client gave up on this call meanwhile
                    return
                usage = turn.usage or Usage(1000 + 37 * n, 600 + 11 * n, 40 + 3 * n, 8 + n)
                with server.lock:
                    server.usages.append(usage)
                data = b"".join(_frame(e) for e in _events(f"resp_{n}", n, turn.items, usage))
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client went away (interrupted)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()

    def config_toml(self, key_env: str = "SCRIPTED_MODEL_KEY") -> str:
        """Codex's config.toml: this server as the model provider, nothing asked of the user."""
        return (
            f'model = "{MODEL}"\n'
            'model_provider = "scripted"\n'
            'approval_policy = "never"\n'
            'sandbox_mode = "danger-full-access"\n\n'
            "[model_providers.scripted]\n"
            'name = "scripted"\n'
            f'base_url = "{self.base_url}"\n'
            f'env_key = "{key_env}"\n'
            'wire_api = "responses"\n'
            "request_max_retries = 0\n"
            "stream_max_retries = 0\n"
        )

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _frame(event: dict[str, Any]) -> bytes:
    return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()


def _events(rid: str, n: int, items: list[dict[str, Any]], usage: Usage) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [
        {"type": "response.created", "response": {"id": rid, "status": "in_progress"}}
    ]
    for i, item in enumerate(items):
        item = {"id": f"{item['type']}_{n}_{i}", **item}
        if item["type"] == "message":
            out.append(
                {
                    "type": "response.output_item.added",
                    "output_index": i,
                    "item": {**item, "content": [], "status": "in_progress"},
                }
            )
            words = item["content"][0]["text"].split(" ")
            for k, word in enumerate(words):
                out.append(
                    {
                        "type": "response.output_text.delta",
                        "item_id": item["id"],
                        "output_index": i,
                        "content_index": 0,
                        "delta": word if k == 0 else f" {word}",
                    }
                )
        else:
            out.append({"type": "response.output_item.added", "output_index": i, "item": item})
        out.append({"type": "response.output_item.done", "output_index": i, "item": item})
    out.append(
        {
            "type": "response.completed",
            "response": {"id": rid, "status": "completed", "usage": usage.as_api()},
        }
    )
    return out
