"""What the store keeps of an observer's raw answer: all of it up to RAW_LIMIT bytes of JSON,
else a copy with long strings and lists cut, so that a runaway model answering megabytes
cannot grow the store by as much (the verdict records the original size in `raw_bytes`)."""

from __future__ import annotations

from typing import Any

import orjson

RAW_LIMIT = 64 * 1024  # bytes of JSON kept of one answer
STRING_LIMIT = 4096  # characters kept of one string of a cut answer
ITEMS_LIMIT = 64  # items kept of one list or object of a cut answer
PROBLEM_LIMIT = 2000  # characters kept of an error (some quote the whole answer)


def keep(raw: Any) -> tuple[Any, int | None]:
    """Return what to store of `raw` and its size in bytes as JSON (None for no answer)."""
    if raw is None:
        return None, None
    try:
        data = orjson.dumps(raw, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:  # not JSON-able, or nested too deep: keep its text
        text = repr(raw)
        return cut_text(text, RAW_LIMIT), len(text.encode(errors="replace"))
    if len(data) <= RAW_LIMIT:
        return raw, len(data)
    kept = _cut(raw)
    if len(orjson.dumps(kept, option=orjson.OPT_NON_STR_KEYS)) > RAW_LIMIT:
        kept = cut_text(data.decode(errors="replace"), RAW_LIMIT // 2)
    return kept, len(data)


def cut_text(text: str, limit: int) -> str:
    """Return `text`, or its first `limit` characters and how long it was."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… [cut: {len(text):,} characters in all]"


def _cut(value: Any) -> Any:
    if isinstance(value, str):
        return cut_text(value, STRING_LIMIT)
    if isinstance(value, list):
        kept = [_cut(v) for v in value[:ITEMS_LIMIT]]
        if len(value) > ITEMS_LIMIT:
            kept.append(f"… [cut: {len(value):,} items in all]")
        return kept
    if isinstance(value, dict):
        kept_dict = {k: _cut(v) for k, v in list(value.items())[:ITEMS_LIMIT]}
        if len(value) > ITEMS_LIMIT:
            kept_dict["…"] = f"[cut: {len(value):,} keys in all]"
        return kept_dict
    return value
