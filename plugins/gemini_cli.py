"""Gemini CLI transcripts: two formats of one agent (``gemini-cli``), registered here.

* ``gemini-cli`` (`gemini_chat`): the chat JSON the CLI writes to
  ``~/.gemini/tmp/<sha256 project hash>/chats/session-<date>T<HH-MM>-<8hex>.json``.
* ``gemini-stream`` (`gemini_stream`): what ``gemini --output-format stream-json`` prints.

The same session read from both its chat file and its stream output shares tool-call ids (so
calls are not doubled) but not message ids or usage keys: ingest one or the other.
"""

from __future__ import annotations

from auditor.api import hookimpl

from .gemini_chat import GeminiChatFormat
from .gemini_stream import GeminiStreamFormat

__all__ = ["GeminiChatFormat", "GeminiStreamFormat", "register_formats"]


@hookimpl(trylast=True)
def register_formats(register) -> None:
    register(GeminiChatFormat())
    register(GeminiStreamFormat())
