"""The built-in injectors: claude-code, codex, gemini-cli, outbox, amp-thread, webhook, stdout.

Each one only delivers; the core (`auditor.live.delivery`) applies the loop guards and records
every attempt. `claude-code`, `codex` and `gemini-cli` are live: their channel is the Stop
hook's own output, so they deliver only from inside `auditor hook AGENT`. `outbox` is live too:
the session's worker stages its corrections in the session's spool, and the next hook event of
the thread hands them over (and the worker records that hand-over).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from auditor.api import (
    AuditorError,
    Correction,
    HeldBack,
    SessionSpool,
    hookimpl,
    replace_atomically,
)

WEBHOOK_TIMEOUT = 10.0
WEBHOOK_RETRIES = 3


class StopHookInjector:
    """Answer a Stop hook with `{"decision": "block", "reason": ...}` so the agent goes on."""

    live = True

    def __init__(self, name: str, agent: str):
        self.name = name
        self.description = f"the {agent} Stop hook's answer (used by `auditor hook {name}`)"

    def deliver(self, correction: Correction, options: dict[str, Any]) -> str:
        stream = options.get("stream")
        if stream is None:
            raise AuditorError(
                f"the {self.name!r} injector delivers only from inside the agent's Stop hook "
                f"(`auditor hook {self.name}`); choose another injector for `auditor inject`"
            )
        stream.write(json.dumps({"decision": "block", "reason": correction.text}) + "\n")
        stream.flush()
        return "stop-hook"


class OutboxInjector:
    """Stage a correction in a live session's spool, for the thread's next hook event.

    Used by the session's worker (`auditor.live.worker`) with the options `spool` (the
    session's `SessionSpool`), `since` (where the audited event's line ends in the session's
    events: a prompt typed from there on came after it) and `kind` (the checkpoint's). Two
    guards of its own channel hold a correction back: the user typed while the observer
    thought, and one correction per gap between two hook events (one is already waiting)."""

    name = "outbox"
    description = "stage for the next hook event of a live session (used by the hooks' worker)"
    live = True
    staged = True  # the hook that hands it over records the delivery

    def deliver(self, correction: Correction, options: dict[str, Any]) -> str:
        spool = options.get("spool")
        if not isinstance(spool, SessionSpool):
            raise AuditorError(
                "the 'outbox' injector stages corrections for the hooks' worker only; choose "
                "another injector for `auditor inject`"
            )
        since = int(options.get("since") or 0)
        if spool.typed_prompt_since(since):
            raise HeldBack("user-wrote-again: the user wrote while the observer thought")
        if spool.waiting():
            raise HeldBack("one-per-gap: a correction is already waiting to go out")
        entry = {
            "verdict_id": correction.verdict_id,
            "checkpoint_id": correction.checkpoint_id,
            "thread_id": correction.thread_id,
            "thread": correction.thread,
            "message": correction.message,
            "checkpoint": correction.checkpoint_message,
            "kind": options.get("kind"),
            "observer": correction.observer,
            "model": correction.model,
            "offset": since,
            "text": correction.text,
        }
        path = spool.stage(f"{correction.verdict_id:012d}.json", entry)
        if spool.typed_prompt_since(since):  # the user wrote while it was being staged
            spool.take_back_all()
        return path


class StdoutInjector:
    """Print each correction as one JSON line."""

    name = "stdout"
    description = "print each correction as a JSON line (the default)"
    live = False

    def deliver(self, correction: Correction, options: dict[str, Any]) -> str:
        stream = options.get("stream") or sys.stdout
        stream.write(json.dumps(correction.as_json(), ensure_ascii=False) + "\n")
        stream.flush()
        return "stdout"


class WebhookInjector:
    """POST each correction as JSON to a URL, with retries and a timeout."""

    name = "webhook"
    description = "POST each correction as JSON to a URL (url, timeout, retries, headers)"
    live = False

    def deliver(self, correction: Correction, options: dict[str, Any]) -> str:
        import urllib.error
        import urllib.request

        url = options.get("url")
        if not url:
            raise AuditorError(
                "the webhook injector needs a URL: pass --url URL or set url under "
                "[injectors.webhook] in the config file"
            )
        timeout = float(options.get("timeout") or WEBHOOK_TIMEOUT)
        retries = int(options.get("retries", WEBHOOK_RETRIES))
        headers = {"Content-Type": "application/json", "User-Agent": "auditor"}
        headers.update(options.get("headers") or {})
        body = json.dumps(correction.as_json(), ensure_ascii=False).encode()
        problem = ""
        for attempt in range(retries + 1):
            if attempt:
                time.sleep(min(8.0, float(options.get("backoff", 0.5)) * 2 ** (attempt - 1)))
            request = urllib.request.Request(url, data=body, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=timeout) as response:
                    response.read()
                return url
            except urllib.error.HTTPError as exc:
                problem = f"HTTP {exc.code} from {url}"
                if exc.code < 500 and exc.code not in (408, 429):
                    break  # the server refused this correction; sending it again will not help
            except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
                reason = getattr(exc, "reason", exc)
                problem = f"cannot reach {url}: {reason}"
        tries = attempt + 1
        raise AuditorError(f"{problem} (after {tries} attempt{'s' if tries > 1 else ''})")


class AmpThreadInjector:
    """Append the correction to an Amp thread file as a user message marked as a correction."""

    name = "amp-thread"
    description = (
        "append to the Amp thread's JSON file as a user message with source course-correction"
    )
    live = False

    def deliver(self, correction: Correction, options: dict[str, Any]) -> str:
        path = Path(options.get("path") or correction.source_path or "")
        if correction.agent != "amp" and not options.get("path"):
            raise AuditorError(
                f"thread {correction.thread} is a {correction.agent} thread, not an Amp one"
            )
        if not path.is_file():
            raise AuditorError(f"the Amp thread file {str(path)!r} does not exist")
        for _ in range(5):
            before = path.stat()
            raw = path.read_bytes()
            doc = json.loads(raw)
            if not isinstance(doc, dict) or not isinstance(doc.get("messages"), list):
                raise AuditorError(f"{path} is not an Amp thread (no 'messages' list)")
            if doc.get("id") not in (None, correction.thread):
                raise AuditorError(f"{path} holds thread {doc.get('id')}, not {correction.thread}")
            mine = [
                m
                for m in doc["messages"]
                if isinstance(m, dict) and isinstance(m.get("meta"), dict)
            ]
            if any(m["meta"].get("auditorVerdict") == correction.verdict_id for m in mine):
                return str(path)  # written by an attempt that died before it was recorded
            ids = [m.get("messageId") for m in doc["messages"] if isinstance(m, dict)]
            doc["messages"].append(
                {
                    "role": "user",
                    "messageId": max((i for i in ids if isinstance(i, int)), default=-1) + 1,
                    "content": [{"type": "text", "text": correction.message}],
                    "source": {"type": "course-correction"},
                    "meta": {
                        "sentAt": int(time.time() * 1000),
                        "auditorVerdict": correction.verdict_id,
                    },
                }
            )
            indent = 2 if raw.lstrip()[:2] == b"{\n" else None
            data = json.dumps(doc, ensure_ascii=False, indent=indent).encode()
            if replace_atomically(path, data, unchanged_since=before):
                return str(path)
        raise AuditorError(f"{path} kept changing while the correction was written; try again")


@hookimpl(trylast=True)
def register_injectors(register) -> None:
    register(StopHookInjector("claude-code", "Claude Code"))
    register(StopHookInjector("codex", "Codex CLI"))
    register(StopHookInjector("gemini-cli", "Gemini CLI"))
    register(OutboxInjector())
    register(AmpThreadInjector())
    register(WebhookInjector())
    register(StdoutInjector())
