"""Whether a value is a secret: the judgements `auditor.redact` makes about a value it found.

A value that looks generated (long, random), a placeholder (`$TOKEN`, `<your key>`, `^9.0.2`),
a word of code or prose, and the kind of secret a name says it holds.
"""

from __future__ import annotations

import math
import re
from collections import Counter


def mark(kind: str) -> str:
    """The text that replaces a secret."""
    return f"[REDACTED:{kind}]"


_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


_FILE_END = re.compile(r"\.[A-Za-z][A-Za-z0-9]{0,4}$")
_SEPARATORS = re.compile(r"[\-_.:]+")
_WORDISH = re.compile(r"[A-Za-z]?[a-z]*|[A-Z]+|[vV]?[0-9]{1,4}")


def looks_generated(value: str, min_len: int = 16) -> bool:
    """Whether `value` looks like a generated credential rather than a word, a name or an id.

    Long, letters and digits both present, at least 3 bits of entropy per character; a UUID, a
    path or a dotted name is not.
    """
    if len(value) < min_len or len(value) > 400 or _UUID.fullmatch(value) or " " in value:
        return False
    digits = sum(c.isdigit() for c in value)
    letters = sum(c.isalpha() for c in value)
    if not letters or digits == len(value):
        return False
    if digits < 2:
        # Base64 of text can hold no digit; its case changes at random, unlike camelCase names.
        upper = sum(c.isupper() for c in value)
        if len(value) < 20 or not 0.25 <= upper / letters <= 0.75:
            return False
    if value.startswith(("/", "./", "../", "~")) or "://" in value or _FILE_END.search(value):
        return False  # a path or a URL
    parts = _SEPARATORS.split(value)
    if len(parts) > 1 and all(_WORDISH.fullmatch(part) for part in parts):
        return False  # words and small numbers joined: `test-session-123`, `build_2024_v2`
    counts = Counter(value)
    entropy = -sum(n / len(value) * math.log2(n / len(value)) for n in counts.values())
    return entropy >= 3.0


# Words that follow `password is` or `--password` in prose and help texts, not secrets.
COMMON_WORDS = frozenset(
    """required wrong incorrect correct invalid valid empty missing set not the a an too stored
    hashed encrypted saved shown hidden ignored used needed expired changed reset sent in on
    from being still now only never always optional case masked redacted visible plain
    plaintext weak strong long short null none available defined present generated random
    unknown what which that this your my our their its also already same different value
    and or for with when then file flag option argument if to is it be
    protected secure insecure mandatory enabled disabled checked validated accepted rejected
    updated configured read passed given provided supplied entered typed asked prompted
    requested incorrectly correctly sent handled there here""".split()
)

# Bare values that are code or placeholders, not secrets.
NOT_SECRET_WORDS = {
    "none",
    "null",
    "nil",
    "true",
    "false",
    "undefined",
    "str",
    "string",
    "bytes",
    "int",
    "bool",
    "any",
    "optional",
    "secretstr",
    "required",
    "self",
    "this",
    "env",
}


def kind_of(name: str) -> str:
    """The kind of secret a name (`DB_PASSWORD`, `apiKey`) says it holds."""
    low = name.lower()
    for word, kind in (
        ("pass", "password"),
        ("pwd", "password"),
        ("token", "token"),
        ("private", "private-key"),
        ("api", "api-key"),
        ("session", "session"),
        ("cookie", "cookie"),
        ("cred", "credential"),
        ("auth", "credential"),
    ):
        if word in low:
            return kind
    return "secret"


_VERSION = re.compile(r"[\^~>=<]{0,2}v?[0-9]+(?:\.[0-9x*]+){1,3}(?:[-+][0-9A-Za-z.\-]+)?")


def is_placeholder(value: str) -> bool:
    """Whether `value` stands for a secret rather than being one (a variable, a version, a word)."""
    if value.startswith(("$", "%", "{", "<", "[", "*", "#", "@", "(")) or set(value) <= set(
        "*xX.-_"
    ):
        return True
    if _VERSION.fullmatch(value):  # `"jsonwebtoken": "^9.0.2"` in a package.json
        return True
    low = value.lower()
    return low in NOT_SECRET_WORDS or low.startswith(
        ("your", "my-", "my_", "example", "changeme", "xxx")
    )
