"""JSON for the hooks' fast path: the standard library's own C parser and encoder (`_json`),
without the `json` package around them.

`import json` imports `re` and compiles the package's patterns: about half of a bare
interpreter start, more than everything else a hook event does. The C parts are what
`json.loads` and `json.dumps` use anyway (the same scanner, the same encoder, called with the
same settings), so the text read and written is the same; a test compares them with `json`
on hook payloads and on the odd cases (non-ASCII text, lone surrogates, NaN, big numbers,
nesting, bad input). A Python without `_json` gets the `json` package.
"""

from __future__ import annotations

_JSON_WS = " \t\n\r"


_CONSTANTS = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}


class _Parsing:
    """What `_json.make_scanner` reads of a decoder: `json.JSONDecoder()`'s defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = _CONSTANTS.__getitem__


def _not_serializable(o):
    raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")


try:
    import _json
except ImportError:  # pragma: no cover - CPython has it
    _json = None  # type: ignore[assignment]

if _json is not None:
    _scan = _json.make_scanner(_Parsing())  # type: ignore[arg-type]
    # json.dumps's defaults: `, ` and `: `, NaN allowed, keys in their order, no indent.
    _encoders = {
        only_ascii: _json.make_encoder(
            None, _not_serializable, quote, None, ": ", ", ", False, False, True
        )
        for only_ascii, quote in (
            (True, _json.encode_basestring_ascii),
            (False, _json.encode_basestring),
        )
    }


def loads(text: str | bytes):
    """`json.loads(text)`: a ValueError on bad input. Bytes are read as UTF-8 (what the
    spool's files hold; `json` also guesses UTF-16 and UTF-32)."""
    if _json is None:  # pragma: no cover
        import json

        return json.loads(text)
    if not isinstance(text, str):
        text = text.decode("utf-8", "surrogatepass")
    start = len(text) - len(text.lstrip(_JSON_WS))
    try:
        obj, end = _scan(text, start)
    except (StopIteration, ValueError, SystemError):
        # Bad input. The scanner raises `json.decoder`'s error class, which it only finds
        # once the json package was imported (before that it fails with a SystemError): the
        # package then reads the text again and says what is wrong, as `json.loads` does.
        import json

        return json.loads(text)
    if text[end:].strip(_JSON_WS):
        raise ValueError(f"Extra data: char {end}")
    return obj


def dumps(obj, ensure_ascii: bool = True) -> str:
    """`json.dumps(obj, ensure_ascii=ensure_ascii)`: a TypeError for a value JSON has not."""
    if _json is None:  # pragma: no cover
        import json

        return json.dumps(obj, ensure_ascii=ensure_ascii)
    if isinstance(obj, str):  # as json does: the encoder is for containers
        quote = _json.encode_basestring_ascii if ensure_ascii else _json.encode_basestring
        return quote(obj)
    return "".join(_encoders[ensure_ascii](obj, 0))
