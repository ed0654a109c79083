"""Stand-ins for the Gemini batch API and Anthropic's Message Batches, on pytest-httpserver.

They answer in the shapes of the real APIs (Gemini: ai.google.dev/api/batch-api, the
long-running operation of models.batchGenerateContent and batches.get, whose inline responses
come in request order; Anthropic: platform.claude.com/docs/en/api/messages/batches, the
MessageBatch object and the JSONL results, in no particular order) and keep what the SDKs sent,
so tests assert on the real request shapes. `finish()` ends every batch; `errored` names keys
whose request fails; `fail_create` makes the next creates fail AFTER the batch was accepted
(a run stopped before it could record the id); `refuse` (an HTTP status) makes every call fail
with it, as a provider does that does not serve the model or the key (404, 403).
"""

from __future__ import annotations

import json
import re
from typing import Any

from werkzeug import Request, Response

from helpers.wire import anthropic_response, gemini_response

CREATED = "2026-11-25T10:00:00.000000Z"


def _json(body: Any, status: int = 200) -> Response:
    return Response(json.dumps(body), status=status, content_type="application/json")


class BatchStandIn:
    def __init__(self, server):
        self.server = server
        self.batches: dict[str, dict[str, Any]] = {}  # id -> {"keys", "done", "body", ...}
        self.created: list[dict[str, Any]] = []  # every create request (method, path, body)
        self.errored: set[str] = set()
        self.fail_create = 0
        self.refuse: int | None = None
        self.answer = {"needsCorrection": True, "message": "Run the failing test first."}

    def finish(self) -> None:
        for b in self.batches.values():
            b["done"] = True

    def _create(self, request: Request, batch_id: str, keys: list[str], extra: dict) -> bool:
        body = request.get_json()
        self.created.append(
            {
                "method": request.method,
                "path": request.path,
                "headers": {
                    k.lower(): v
                    for k, v in request.headers.items()
                    if k.lower() in ("content-type", "anthropic-version", "x-goog-api-key")
                },
                "body": body,
            }
        )
        self.batches[batch_id] = {"keys": keys, "done": False, **extra}
        if self.fail_create:
            self.fail_create -= 1
            return False
        return True


def _refusing(handler):
    """Wrap a stand-in's handler: answer `refuse` as Google's APIs word errors, when set."""

    def wrapped(self, request: Request) -> Response:
        if self.refuse is not None:
            error = {"code": self.refuse, "message": "models/x is not found", "status": "NOT_FOUND"}
            return _json({"error": error}, self.refuse)
        return handler(self, request)

    return wrapped


class GeminiBatches(BatchStandIn):
    """POST /v1beta/models/{model}:batchGenerateContent, GET /v1beta/batches[/{id}]."""

    usage = {
        "promptTokenCount": 5321,
        "candidatesTokenCount": 38,
        "cachedContentTokenCount": 4096,
        "thoughtsTokenCount": 112,
        "totalTokenCount": 5471,
    }

    def __init__(self, server):
        super().__init__(server)
        server.expect_request(
            "/v1beta/models/gemini-3.1-pro-preview:batchGenerateContent", method="POST"
        ).respond_with_handler(self.create)
        server.expect_request("/v1beta/batches", method="GET").respond_with_handler(self.list)
        server.expect_request(
            re.compile(r"^/v1beta/batches/[\w-]+$"), method="GET"
        ).respond_with_handler(self.get)

    def operation(self, batch_id: str) -> dict[str, Any]:
        b = self.batches[batch_id]
        n = len(b["keys"])
        meta: dict[str, Any] = {
            "@type": "type.googleapis.com/google.ai.generativelanguage.v1beta.GenerateContentBatch",
            "model": "models/gemini-3.1-pro-preview",
            "displayName": b["label"],
            "createTime": CREATED,
            "updateTime": CREATED,
            "name": batch_id,
        }
        if not b["done"]:
            meta.update(
                state="BATCH_STATE_RUNNING",
                batchStats={"requestCount": str(n), "pendingRequestCount": str(n)},
            )
            return {"name": batch_id, "metadata": meta}
        responses = []
        for key in b["keys"]:
            if key in self.errored:
                responses.append(
                    {
                        "error": {
                            "code": 400,
                            "message": "Request contains an invalid argument.",
                            "status": "INVALID_ARGUMENT",
                        },
                        "metadata": {"key": key},
                    }
                )
            else:
                body = gemini_response(self.answer)
                body["usageMetadata"] = dict(self.usage)
                responses.append({"response": body, "metadata": {"key": key}})
        failed = sum(1 for k in b["keys"] if k in self.errored)
        meta.update(
            state="BATCH_STATE_SUCCEEDED",
            endTime=CREATED,
            batchStats={
                "requestCount": str(n),
                "successfulRequestCount": str(n - failed),
                "failedRequestCount": str(failed),
            },
            output={"inlinedResponses": {"inlinedResponses": responses}},
        )
        return {"name": batch_id, "metadata": meta, "done": True}

    @_refusing
    def create(self, request: Request) -> Response:
        batch = request.get_json()["batch"]
        keys = [r["metadata"]["key"] for r in batch["inputConfig"]["requests"]["requests"]]
        batch_id = f"batches/stub{len(self.batches) + 1}"
        if not self._create(request, batch_id, keys, {"label": batch["displayName"]}):
            return _json({"error": {"code": 500, "message": "stub", "status": "INTERNAL"}}, 500)
        return _json(self.operation(batch_id))

    @_refusing
    def list(self, request: Request) -> Response:
        return _json({"operations": [self.operation(i) for i in self.batches]})

    @_refusing
    def get(self, request: Request) -> Response:
        return _json(self.operation(request.path.removeprefix("/v1beta/")))


class AnthropicBatches(BatchStandIn):
    """POST /v1/messages/batches, GET /v1/messages/batches[/{id}[/results]]."""

    usage = {
        "input_tokens": 812,
        "cache_creation_input_tokens": 300,
        "cache_read_input_tokens": 4096,
        "output_tokens": 61,
        "service_tier": "batch",
    }

    def __init__(self, server):
        super().__init__(server)
        server.expect_request("/v1/messages/batches", method="POST").respond_with_handler(
            self.create
        )
        server.expect_request("/v1/messages/batches", method="GET").respond_with_handler(self.list)
        server.expect_request(
            re.compile(r"^/v1/messages/batches/\w+/results$"), method="GET"
        ).respond_with_handler(self.results)
        server.expect_request(
            re.compile(r"^/v1/messages/batches/\w+$"), method="GET"
        ).respond_with_handler(self.retrieve)

    def batch(self, batch_id: str) -> dict[str, Any]:
        b = self.batches[batch_id]
        n = len(b["keys"])
        failed = sum(1 for k in b["keys"] if k in self.errored)
        counts = (
            {"processing": 0, "succeeded": n - failed, "errored": failed}
            if b["done"]
            else {"processing": n, "succeeded": 0, "errored": 0}
        )
        return {
            "id": batch_id,
            "type": "message_batch",
            "processing_status": "ended" if b["done"] else "in_progress",
            "request_counts": {**counts, "canceled": 0, "expired": 0},
            "ended_at": CREATED if b["done"] else None,
            "created_at": b["created_at"],
            "expires_at": "2026-11-26T10:00:00.000000Z",
            "archived_at": None,
            "cancel_initiated_at": None,
            "results_url": self.server.url_for(f"/v1/messages/batches/{batch_id}/results")
            if b["done"]
            else None,
        }

    def create(self, request: Request) -> Response:
        from datetime import UTC, datetime

        keys = [r["custom_id"] for r in request.get_json()["requests"]]
        batch_id = f"msgbatch_stub{len(self.batches) + 1}"
        created = datetime.now(UTC).isoformat().replace("+00:00", "Z")
        if not self._create(request, batch_id, keys, {"created_at": created}):
            return _json({"type": "error", "error": {"type": "api_error", "message": "stub"}}, 500)
        return _json(self.batch(batch_id))

    def list(self, request: Request) -> Response:
        data = [self.batch(i) for i in reversed(list(self.batches))]
        return _json(
            {
                "data": data,
                "has_more": False,
                "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None,
            }
        )

    def retrieve(self, request: Request) -> Response:
        return _json(self.batch(request.path.rsplit("/", 1)[1]))

    def results(self, request: Request) -> Response:
        batch_id = request.path.split("/")[-2]
        lines = []
        for key in reversed(self.batches[batch_id]["keys"]):  # order is not guaranteed
            if key in self.errored:
                result = {
                    "type": "errored",
                    "error": {
                        "type": "error",
                        "error": {"type": "invalid_request_error", "message": "stub invalid"},
                        "request_id": None,
                    },
                }
            else:
                message = anthropic_response(self.answer)
                message["usage"] = dict(self.usage)
                message["id"] = f"msg_{key}"
                result = {"type": "succeeded", "message": message}
            lines.append(json.dumps({"custom_id": key, "result": result}))
        return Response("\n".join(lines) + "\n", content_type="application/binary")
