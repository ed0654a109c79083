"""Model servers on 127.0.0.1 that the real agent CLIs call when they run as observers.

Each answers a CLI's streaming model call in its provider's wire shape, as the CLIs were seen to
send and read them (Claude Code 2.1.328: POST /v1/messages?beta=true, server-sent events;
Codex 0.169.0: POST /v1/responses, server-sent events; Gemini CLI 0.61.0: POST
/v1beta/models/MODEL:streamGenerateContent?alt=sse). A server plays `answers` in order (the
last one repeats): each is the text of the decision (for Claude Code, the input of the
`StructuredOutput` tool call its --json-schema adds), the usage to report, and a delay. Every
request body is recorded.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Answer:
    text: str  # the model's answer: a JSON decision, or anything else to test repairs
    usage: dict[str, int] = field(default_factory=dict)  # vendor's own usage field names
    delay: float = 0.0


def decision(needs: bool, message: str | None = None) -> str:
    return json.dumps({"needsCorrection": needs, "message": message})


class ModelServer:
    """Record every request; answer each model call with the next `Answer`."""

    vendor = ""

    def __init__(self, answers: list[Answer]):
        self.answers = list(answers)
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.closed = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, *args):
                pass

            def do_GET(self):
                self._send(404, "application/json", b"{}")

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    body = json.loads(raw) if raw else {}
                except ValueError:
                    body = {}
                headers = {k.lower(): v for k, v in self.headers.items()}
                with server.lock:
                    server.requests.append({"path": self.path, "headers": headers, "body": body})
                    answer = server.answers[0]
                    if len(server.answers) > 1:
                        server.answers.pop(0)
                if answer.delay and server.closed.wait(answer.delay):
                    return
                status, kind, data = server.reply(self.path, body, answer)
                self._send(status, kind, data)

            def _send(self, status: int, kind: str, data: bytes) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", kind)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def reply(self, path: str, body: dict, answer: Answer) -> tuple[int, str, bytes]:
        raise NotImplementedError

    def close(self) -> None:
        self.closed.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def sse(event: str | None, data: dict[str, Any]) -> str:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n"


class AnthropicModel(ModelServer):
    """Claude Code's calls: the answer is a StructuredOutput tool call with the decision."""

    vendor = "anthropic"

    def reply(self, path, body, answer):
        if not path.startswith("/v1/messages"):
            return 404, "application/json", b'{"type":"error","error":{"type":"not_found_error"}}'
        usage = {
            "input_tokens": 0,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": 0,
            **answer.usage,
        }
        tools = [t.get("name") for t in body.get("tools") or []]
        try:
            args = json.loads(answer.text)
        except ValueError:
            args = None
        if "StructuredOutput" in tools and isinstance(args, dict):
            block = {"type": "tool_use", "id": "toolu_01", "name": "StructuredOutput", "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": answer.text}]
            stop = "tool_use"
        else:
            block = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": answer.text}]
            stop = "end_turn"
        message = {
            "id": "msg_01",
            "type": "message",
            "role": "assistant",
            "model": body.get("model"),
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {**usage, "output_tokens": 1},
        }
        out = sse("message_start", {"type": "message_start", "message": message})
        out += sse(
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": block},
        )
        for d in deltas:
            out += sse(
                "content_block_delta", {"type": "content_block_delta", "index": 0, "delta": d}
            )
        out += sse("content_block_stop", {"type": "content_block_stop", "index": 0})
        out += sse(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": usage,
            },
        )
        out += sse("message_stop", {"type": "message_stop"})
        return 200, "text/event-stream", out.encode()


class ResponsesModel(ModelServer):
    """Codex's calls (OpenAI Responses API): the answer is the final message's text."""

    vendor = "openai"

    def reply(self, path, body, answer):
        if not path.startswith("/v1/responses"):
            return 404, "application/json", b'{"error":{"message":"not found"}}'
        base = {
            "id": "resp_01",
            "object": "response",
            "created_at": int(time.time()),
            "model": body.get("model"),
        }
        item = {
            "type": "message",
            "id": "msg_01",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": answer.text, "annotations": []}],
        }
        u = answer.usage
        usage = {
            "input_tokens": u.get("input_tokens", 0),
            "input_tokens_details": {"cached_tokens": u.get("cached_tokens", 0)},
            "output_tokens": u.get("output_tokens", 0),
            "output_tokens_details": {"reasoning_tokens": u.get("reasoning_tokens", 0)},
            "total_tokens": u.get("input_tokens", 0) + u.get("output_tokens", 0),
        }
        out = sse(
            "response.created",
            {
                "type": "response.created",
                "response": {**base, "status": "in_progress", "output": []},
            },
        )
        out += sse(
            "response.output_item.added",
            {
                "type": "response.output_item.added",
                "output_index": 0,
                "item": {**item, "content": []},
            },
        )
        out += sse(
            "response.output_text.delta",
            {
                "type": "response.output_text.delta",
                "item_id": "msg_01",
                "output_index": 0,
                "content_index": 0,
                "delta": answer.text,
            },
        )
        out += sse(
            "response.output_item.done",
            {"type": "response.output_item.done", "output_index": 0, "item": item},
        )
        done = {**base, "status": "completed", "output": [item], "usage": usage}
        out += sse("response.completed", {"type": "response.completed", "response": done})
        return 200, "text/event-stream", out.encode()


class GeminiModel(ModelServer):
    """Gemini CLI's calls (Gemini API): the answer is the candidate's text."""

    vendor = "google"

    def reply(self, path, body, answer):
        if ":streamGenerateContent" not in path and ":generateContent" not in path:
            return 404, "application/json", b'{"error":{"code":404,"message":"not found"}}'
        model = path.split("/models/")[-1].split(":")[0]
        chunk = {
            "candidates": [
                {
                    "content": {"role": "model", "parts": [{"text": answer.text}]},
                    "finishReason": "STOP",
                    "index": 0,
                }
            ],
            "usageMetadata": answer.usage,
            "modelVersion": model,
            "responseId": "resp-01",
        }
        if "alt=sse" in path:
            return 200, "text/event-stream", sse(None, chunk).encode()
        return 200, "application/json", json.dumps(chunk).encode()
