"""A Gemini API server on 127.0.0.1 that the real Gemini CLI calls when it runs as an observer
(Claude Code and Codex get `anthropic_server` and `openai_responses_server`).

It answers Gemini CLI 0.61.0's streaming model call (POST
/v1beta/models/MODEL:streamGenerateContent?alt=sse, server-sent events) as the CLI was seen to
send and read it. It plays `answers` in order (the last one repeats): each is the text of the
model's answer, the usage to report, and a delay. Every request body is recorded.
"""

from __future__ import annotations

import json
import threading
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


def sse(data: dict[str, Any]) -> str:
    return f"data: {json.dumps(data)}\n\n"


class GeminiModel(ModelServer):
    """Gemini CLI's calls (Gemini API): the answer is the candidate's text."""

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
            return 200, "text/event-stream", sse(chunk).encode()
        return 200, "application/json", json.dumps(chunk).encode()
