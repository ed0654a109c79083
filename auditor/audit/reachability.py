"""Whether the observer can be reached at all: a run stops calling one that is down.

An observer whose server is stopped, or whose address is wrong, fails every call at once
with a connection error; left alone, a run turned each of its checkpoints into an error
verdict (114 in five minutes). After `LIMIT` such failures in a row, with no answer in
between, the run starts no new call and ends saying so in one line.
"""

from __future__ import annotations

import socket
import threading

LIMIT = 5  # connection failures in a row after which a run stops calling the observer


def is_connection_failure(exc: BaseException) -> bool:
    """True when `exc`, or an exception it was raised from, says no connection could be made
    or kept: refused, reset, a name that does not resolve, or an SDK's connection error
    (openai/anthropic `APIConnectionError`, httpx `ConnectError`: named, not imported)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, (ConnectionError, socket.gaierror)):
            return True
        if "Connect" in type(current).__name__ and "Timeout" not in type(current).__name__:
            return True
        current = current.__cause__ or current.__context__
    return False


class Reachability:
    """Counts an observer's connection failures in a row; `down` says why to stop, or None."""

    def __init__(self, observer: str, limit: int = LIMIT):
        self.observer, self.limit = observer, limit
        self._failures = 0
        self._last = ""
        self._lock = threading.Lock()

    def answered(self) -> None:
        with self._lock:
            self._failures = 0

    def failed(self, exc: BaseException, error: str) -> None:
        """Note a failed call (`error`: how it was recorded)."""
        with self._lock:
            if is_connection_failure(exc):
                self._failures += 1
                self._last = error
            else:
                self._failures = 0

    @property
    def down(self) -> str | None:
        with self._lock:
            if self._failures < self.limit:
                return None
            return (
                f"Stopped: the {self.observer} observer could not be reached {self._failures} "
                f"times in a row ({self._last}); no further call was started. Check that it is "
                "up and its address right (--base-url), then run the same command again to resume"
            )
