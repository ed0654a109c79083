"""A scripted Gemini API model server on 127.0.0.1, for driving the real Gemini CLI.

Gemini CLI (0.61) talks to `GOOGLE_GEMINI_BASE_URL` through the google-genai SDK: with an API
key (`x-goog-api-key`) and `-m MODEL` given, each model call is one
`POST /v1beta/models/MODEL:streamGenerateContent?alt=sse` whose body is
`{contents, systemInstruction, tools, generationConfig}`, answered by an SSE stream of
`GenerateContentResponse` chunks (`data: {...}` frames):

    {"candidates": [{"content": {"role": "model", "parts": [PART, ...]}, "index": 0,
                     "finishReason": "STOP"}],            (the reason on the last chunk)
     "usageMetadata": {"promptTokenCount", "cachedContentTokenCount",
                       "candidatesTokenCount", "thoughtsTokenCount", "totalTokenCount"}}

where a PART is `{"text"}`, `{"text", "thought": true}` or `{"functionCall": {"name", "args"}}`.
The server plays `script` in order, one `Turn` per model call, and records every request body
(`requests`). A `Turn` may wait for something before it answers (`before`; returning False
drops the call unanswered). A call past the script's end is answered with a short final text
and counted in `unscripted`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "gemini-2.5-flash"


@dataclass(frozen=True)
class Usage:
    prompt: int  # promptTokenCount: the input, cached tokens included
    cached: int
    candidates: int  # the output, thoughts excluded
    thoughts: int

    def as_api(self) -> dict[str, int]:
        return {
            "promptTokenCount": self.prompt,
            "cachedContentTokenCount": self.cached,
            "candidatesTokenCount": self.candidates,
            "thoughtsTokenCount": self.thoughts,
            "totalTokenCount": self.prompt + self.candidates + self.thoughts,
        }


@dataclass
class Turn:
    """One model call's answer: its parts, its usage, and what to wait for first."""

    parts: list[dict[str, Any]]
    usage: Usage | None = None  # None: one made up from the call's position, distinct per call
    before: Callable[[], bool | None] | None = None


def say(text: str) -> dict[str, Any]:
    return {"text": text}


def think(text: str) -> dict[str, Any]:
    return {"text": text, "thought": True}


def call(name: str, **args: Any) -> dict[str, Any]:
    return {"functionCall": {"name": name, "args": args}}


class GeminiApiServer:
    """The model server (see the module docstring); `url` goes into GOOGLE_GEMINI_BASE_URL."""

    def __init__(self, script: list[Turn]):
        self.script = list(script)
        self.requests: list[dict[str, Any]] = []  # bodies of streamGenerateContent, in order
        self.other: list[str] = []  # any other request: "METHOD PATH"
        self.usages: list[Usage] = []  # what each answered call reported
        self.unscripted = 0
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, *args):
                pass

            def _refuse(self):
                with server.lock:
                    server.other.append(f"{self.command} {self.path}")
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = _refuse

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if ":streamGenerateContent" not in self.path:
                    self._refuse()
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
                    self.close_connection = True  # the client is gone meanwhile
                    return
                usage = turn.usage or Usage(900 + 41 * n, 256 * (n % 3), 30 + 7 * n, 5 + 2 * n)
                with server.lock:
                    server.usages.append(usage)
                data = b"".join(_frame(c) for c in _chunks(turn.parts, usage))
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
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

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _frame(chunk: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(chunk)}\r\n\r\n".encode()


def _chunks(parts: list[dict[str, Any]], usage: Usage) -> list[dict[str, Any]]:
    """The stream of one answer: a chunk per part (a text split in two), usage on the last."""
    pieces: list[dict[str, Any]] = []
    for part in parts:
        text = part.get("text")
        if text and not part.get("thought") and " " in text:
            head, tail = text.split(" ", 1)
            pieces += [{"text": head + " "}, {"text": tail}]
        else:
            pieces.append(part)
    out = []
    for i, piece in enumerate(pieces):
        chunk: dict[str, Any] = {
            "candidates": [{"content": {"role": "model", "parts": [piece]}, "index": 0}]
        }
        if i == len(pieces) - 1:
            chunk["candidates"][0]["finishReason"] = "STOP"
            chunk["usageMetadata"] = usage.as_api()
        out.append(chunk)
    return out
