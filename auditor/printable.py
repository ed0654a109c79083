"""Transcript text made safe for a terminal or a page: no escape sequences, no control characters.

A transcript can hold anything a program printed, including sequences that set the terminal's
title, clear the screen, move the cursor or make a hyperlink. Everything that prints transcript
text (`show`, `prompt`, `verdicts`, the tables, the HTML export) goes through `printable`.
"""

from __future__ import annotations

import re

# Terminal escape sequences (CSI, OSC such as a title or a hyperlink, DCS/APC/PM strings, and
# two-character escapes) and the control characters left (newline and tab stay).
_CONTROL = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]|\x9b[0-?]*[ -/]*[@-~]"
    r"|(?:\x1b[\]PX^_]|[\x90\x9d\x9e\x9f])[^\x07\x1b\x9c\n]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[ -/]*[0-~]?|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]"
)


def printable(text: str | None) -> str:
    """Return `text` without terminal escapes and control characters, for a terminal or a page.

    Newlines and tabs stay; a carriage return becomes a newline (it could hide a line's start).
    """
    if not text:
        return ""
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return _CONTROL.sub("", text)
