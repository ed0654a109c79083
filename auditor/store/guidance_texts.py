"""Instruction files (CLAUDE.md, AGENTS.md...) as kept for a thread: the text, where it came
from and when it was read. Apart from the thread queries, so that ingest, which collects them,
does not load the store's models."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime

# Where an instruction file's text came from: read from disk by auditor, taken from the
# repository's history as committed when the session started, read by the agent with a tool
# call, or recorded in the transcript by the agent's client.
DISK, GIT, READ, TRANSCRIPT = "disk", "git", "read", "transcript"


@dataclass(frozen=True)
class GuidanceText:
    """One instruction file's text, where it came from and when it was read."""

    path: str
    text: str
    origin: str  # disk | git | read | transcript
    read_at: datetime | None = None  # origin git: when the version was committed
    message_id: str | None = None  # origin read: native id of the message with the result
    note: str = ""  # what the observer should know of this version (not stored)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()

    @property
    def source(self) -> str:
        """Where the text came from, in a few words for the observer."""
        if self.origin == READ:
            return "read by the agent with a tool call"
        if self.origin == TRANSCRIPT:
            return "recorded in the transcript"
        if self.origin == GIT:
            when = f" on {self.read_at:%Y-%m-%d %H:%M} UTC" if self.read_at else ""
            return f"the repository's version when the session started (committed{when})"
        when = f", read {self.read_at:%Y-%m-%d %H:%M} UTC" if self.read_at else ""
        return f"on disk{when}" + (f"; {self.note}" if self.note else "")
