"""Answers about texts remembered for a process that sees the same texts again and again.

The formatter and the signals look at a thread's texts again at every checkpoint (a call's
output is cut at each detail level, searched for failures, redacted), so they remember their
answers by the text. A plain `functools.lru_cache` of 16,384 entries kept every tool output of
a long session alive as its key, and often again in its answer (the redacted text, the cut
one): in the live worker, which keeps a session's thread for hours, that grew with the session
whatever was done about the thread itself (issue 26; the worker reads an old output back from
the store when it renders it again, `auditor.store.kept_bodies`).

`text_cache` keeps answers about short texts as `lru_cache` does. A long text (more than
`LONG` characters) is remembered by its length and a 128-bit BLAKE2 digest of it, not kept;
the answers about long texts are kept up to `maxsize` of them and, for answers that are texts,
up to `KEPT_CHARS` characters of them, the least recently asked for forgotten first. Digesting
a text costs a few microseconds a kilobyte, far less than what the functions cached here do.
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

LONG = 1024  # characters: a text longer than this is long (as the live worker's long bodies are)
KEPT_CHARS = 2 << 20  # characters of answers about long texts kept, per function

# The digests of the last long texts seen, by identity (each kept with its text, so that its id
# is not another's): one output goes through several cached functions in a row. Up to
# DIGESTS_KEPT of them and DIGESTED_CHARS characters of their texts: a few outputs of a hundred
# KB each, kept for their digests alone, were a megabyte of the live worker's memory at times.
_DIGESTED: collections.OrderedDict[int, tuple[str, tuple[int, bytes]]] = collections.OrderedDict()
DIGESTS_KEPT = 64
DIGESTED_CHARS = 256 << 10
_digested_chars = [0]


def _digest(text: str) -> tuple[int, bytes]:
    found = _DIGESTED.get(id(text))
    if found is not None and found[0] is text:
        return found[1]
    import hashlib  # here: what imports the plugin API at a hook event never needs it

    data = text.encode("utf-8", "surrogatepass")
    digest = len(data), hashlib.blake2b(data, digest_size=16).digest()
    old = _DIGESTED.pop(id(text), None)  # a text gone, whose id another has now
    if old is not None:
        _digested_chars[0] -= len(old[0])
    _DIGESTED[id(text)] = (text, digest)
    _digested_chars[0] += len(text)
    while len(_DIGESTED) > 1 and (
        len(_DIGESTED) > DIGESTS_KEPT or _digested_chars[0] > DIGESTED_CHARS
    ):
        _digested_chars[0] -= len(_DIGESTED.popitem(last=False)[1][0])
    return digest


def text_cache(maxsize: int, text_at: int = 0) -> Callable[[F], F]:
    """Remember the answers of a function of a text (its argument at `text_at`), as the module
    docstring says."""

    def wrap(fn: F) -> F:
        short = functools.lru_cache(maxsize=maxsize)(fn)
        long: collections.OrderedDict[tuple, tuple[Any, int]] = collections.OrderedDict()
        held = [0]

        @functools.wraps(fn)
        def cached(*args: Any, **kwargs: Any) -> Any:
            text = args[text_at] if len(args) > text_at else None
            if kwargs or not isinstance(text, str) or len(text) <= LONG:
                return short(*args, **kwargs)
            key = (*args[:text_at], _digest(text), *args[text_at + 1 :])
            found = long.get(key)
            if found is not None:
                long.move_to_end(key)
                return found[0]
            answer = fn(*args)
            size = len(answer) if isinstance(answer, str) else 0
            long[key] = (answer, size)
            held[0] += size
            while len(long) > 1 and (held[0] > KEPT_CHARS or len(long) > maxsize):
                _, (_, gone) = long.popitem(last=False)
                held[0] -= gone
            return answer

        def cache_clear() -> None:
            short.cache_clear()
            long.clear()
            held[0] = 0

        cached.cache_info = short.cache_info  # type: ignore[attr-defined]
        cached.cache_clear = cache_clear  # type: ignore[attr-defined]
        cached.long_answers = long  # type: ignore[attr-defined]  # (for tests and measurements)
        return cached  # type: ignore[return-value]

    return wrap
