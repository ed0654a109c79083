"""Gemini CLI transcripts: three formats of one agent (``gemini-cli``), registered here.

* ``gemini-jsonl`` (`gemini_log`): the append-only chat log current versions write to
  ``~/.gemini/tmp/<project folder>/chats/session-<date>T<HH-MM>-<8hex>.jsonl``.
* ``gemini-cli`` (`gemini_chat`): the chat JSON older versions wrote to
  ``~/.gemini/tmp/<sha256 project hash>/chats/session-<date>T<HH-MM>-<8hex>.json``.
* ``gemini-stream`` (`gemini_stream`): what ``gemini --output-format stream-json`` prints.

The same session read from both its chat file and its stream output shares tool-call ids (so
calls are not doubled) but not message ids or usage keys: ingest one or the other. A chat log
and the older chat JSON of one session share message ids; a tool call is one message of its
own in the log and a block of its reply in the JSON.
"""

from __future__ import annotations

from auditor.api import hookimpl

from .gemini_chat import GeminiChatFormat
from .gemini_log import GeminiLogFormat
from .gemini_stream import GeminiStreamFormat

__all__ = ["GeminiChatFormat", "GeminiLogFormat", "GeminiStreamFormat", "register_formats"]


@hookimpl(trylast=True)
def register_formats(register) -> None:
    register(GeminiLogFormat())
    register(GeminiChatFormat())
    register(GeminiStreamFormat())
