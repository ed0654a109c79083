"""Replace secrets with `[REDACTED:kind]` before any transcript text leaves the machine.

The observer is a model from another vendor, so everything the formatter sends goes through
`redact`. The patterns aim at things that are unambiguously credentials (vendor key prefixes,
JWTs, private key blocks, passwords inside URLs, signed-URL parameters) plus `NAME=value`
assignments whose name says they hold a secret. Ordinary code must survive: a git sha, a
content hash, `token = get_token()` or `password: str` are left alone.

Speed matters because the formatter calls this on every prompt. Every pattern is compiled once,
starts with a literal where possible (Python's `re` then scans for it with a fast substring
search; a leading look-behind or character class makes it try every position), and only runs
when a substring test on the lower-cased text says it could match.
"""

from __future__ import annotations

import re
from collections.abc import Callable

__all__ = ["KINDS", "redact"]


def _mark(kind: str) -> str:
    return f"[REDACTED:{kind}]"


Replacement = str | Callable[[re.Match[str]], str]
# (kind, lower-case substrings one of which must occur, compiled pattern, replacement)
_RULES: list[tuple[str, tuple[str, ...], re.Pattern[str], Replacement]] = []


def _rule(
    kind: str,
    triggers: tuple[str, ...],
    pattern: str,
    repl: Replacement | None = None,
    flags: int = 0,
) -> None:
    _RULES.append(
        (kind, triggers, re.compile(pattern, flags), repl if repl is not None else _mark(kind))
    )


def _prefixed(kind: str, prefix: str, body: str) -> None:
    """Add a rule for a token that starts with the literal `prefix`.

    The look-behind sits after the literal so the scan stays fast; it keeps the prefix from
    matching inside a longer word (`task-sk-...`, `xghp_...`).
    """
    lit = re.escape(prefix)
    _rule(kind, (prefix.lower(),), lit + r"(?<![A-Za-z0-9_\-]" + lit + ")" + body)


# -- private key blocks, also when the END line was cut off ---------------------------------
_rule(
    "private-key",
    ("private key",),
    r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"
    r"(?:[\s\S]*?-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|[A-Za-z0-9+/=\s\\]*)",
)


# -- `scheme://user:password@host`: keep the user and the host ------------------------------
def _url_password(m: re.Match[str]) -> str:
    password = m.group(2)
    if password.startswith(("$", "{", "<", "%(", "[REDACTED")) or set(password) <= {"*", "x", "X"}:
        return m.group(0)
    return f"://{m.group(1)}:{_mark('password')}@"


_rule(
    "password", ("://",), r"://([^\s:/@?#'\"<>`]{1,100}):([^\s@/?#'\"<>`]{1,200})@", _url_password
)

# -- signed-URL parameters (AWS SigV4 and SigV2, Google Cloud Storage, Azure SAS) -----------
_SIGNED = {
    "x-amz-signature": "aws-signature",
    "x-amz-credential": "aws-credential",
    "x-amz-security-token": "aws-session-token",
    "x-goog-signature": "gcs-signature",
    "x-goog-credential": "gcs-credential",
    "signature": "url-signature",
    "sig": "url-signature",
}
_rule(
    "url-signature",
    ("signature=", "credential=", "security-token=", "sig="),
    r"([?&](X-Amz-Signature|X-Amz-Credential|X-Amz-Security-Token|X-Goog-Signature"
    r"|X-Goog-Credential|Signature|sig)=)[^&\s\"'<>`\\]+",
    lambda m: m.group(1) + _mark(_SIGNED[m.group(2).lower()]),
    re.IGNORECASE,
)

# -- tokens recognisable by their prefix -------------------------------------------------------
_prefixed("jwt", "eyJ", r"[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}")
_prefixed("anthropic-key", "sk-ant-", r"[A-Za-z0-9_\-]{20,}")
# OpenAI (`sk-`, `sk-proj-`, `sk-svcacct-`...): real keys are long and random, so a digit is
# required to keep hyphenated words such as `sk-some-long-css-class-name` out.
_prefixed("openai-key", "sk-", r"(?=[A-Za-z0-9_\-]*[0-9])[A-Za-z0-9_\-]{20,}")
for _p in ("sk_live_", "rk_live_"):
    _prefixed("stripe-key", _p, r"[A-Za-z0-9]{16,}")
_prefixed("google-api-key", "AIza", r"[0-9A-Za-z_\-]{35}")
for _p in ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"):
    _prefixed("github-token", _p, r"[A-Za-z0-9]{36,}")
_prefixed("github-token", "github_pat_", r"[A-Za-z0-9_]{22,}")
_prefixed("gitlab-token", "glpat-", r"[A-Za-z0-9_\-]{20,}")
_prefixed("slack-token", "xox", r"[abposr]-[A-Za-z0-9\-]{10,}")
_prefixed("huggingface-token", "hf_", r"[A-Za-z0-9]{30,}")
_prefixed("npm-token", "npm_", r"[A-Za-z0-9]{36}")


# An AWS access key id, and the 40-character secret when it directly follows it (CSV exports,
# `id:secret`, `id secret`).
def _aws_key(m: re.Match[str]) -> str:
    out = _mark("aws-access-key-id")
    if m.group(2):
        out += m.group(1) + _mark("aws-secret-key")
    return out


for _p in ("AKIA", "ASIA"):
    _rule(
        "aws-access-key-id",
        (_p.lower(),),
        _p + r"(?<![A-Za-z0-9]" + _p + r")[0-9A-Z]{16}(?![A-Za-z0-9])"
        r"(?:([\s,:;=|\"']{1,6})([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=]))?",
        _aws_key,
    )


# -- credentials in HTTP headers -------------------------------------------------------------
def _bearer(m: re.Match[str]) -> str:
    token = m.group(2)
    if re.fullmatch(r"[A-Z][A-Z0-9_]*", token):  # `Bearer YOUR_API_TOKEN`
        return m.group(0)
    return m.group(1) + _mark("bearer-token")


_rule(
    "bearer-token",
    ("bearer",),
    r"([bB][eE][aA][rR][eE][rR](?<![A-Za-z0-9]......)\s+)([A-Za-z0-9\-._~+/]{16,}=*)",
    _bearer,
)
_rule(
    "basic-auth",
    ("basic",),
    r"([aA][uU][tT][hH][oO][rR][iI][zZ][aA][tT][iI][oO][nN]\s*[:=]\s*[\"']?[bB][aA][sS][iI][cC]\s+)"
    r"[A-Za-z0-9+/]{8,}=*",
    lambda m: m.group(1) + _mark("basic-auth"),
)

# -- `NAME=value`, `name: value`, `"name": "value"` where the name says it holds a secret --------
# Searched for in the lower-cased text: the end of the name, then `=`, `:` or `:=` (never `==`).
_NAME_END = (
    r"(?P<word>pass(?:word|wd|phrase)|pwd|secret|token|key)(?![a-z0-9_])"
    r"(?P<sep>[\"']?[ \t]*(?::=|=(?!=)|:(?!:))[ \t]*)"
)
_NAME_END_LOW = re.compile(_NAME_END)  # run on the lower-cased text: much faster than re.I
_NAME_END_ANY = re.compile(_NAME_END, re.IGNORECASE)
_ASSIGNMENT_TRIGGERS = ("pass", "pwd", "secret", "token", "key")
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
# `key` alone is far too common (`key = "name"`); only these names ending in it count.
_KEY_NAMES = (
    "api_key",
    "api-key",
    "apikey",
    "access_key",
    "access-key",
    "secret_key",
    "secret-key",
    "private_key",
    "private-key",
    "auth_key",
    "auth-key",
    "signing_key",
    "master_key",
)
_VALUE = re.compile(
    # Quoted (the quotes may be backslash-escaped, as in JSON inside a string) or bare.
    r"(?P<open>\\?[\"'])(?P<quoted>[^\"'\n\\]{1,300})(?P<close>\\?[\"'])"
    # A bare value stops at `&name=` (the next URL query parameter) but may contain `&`.
    r"|(?P<bare>(?:[^\s\"'`,;&|<>()\[\]{}\\]|&(?![A-Za-z_][A-Za-z0-9_]*=)){1,300})"
)
# Bare values that are code or placeholders, not secrets.
_NOT_SECRET_WORDS = {
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
_ENV_NAME = re.compile(r"[A-Z][A-Z0-9_]*")
_IDENTIFIER = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*(?:\.[A-Za-z_$][A-Za-z0-9_$]*)*")


def _kind_of(name: str) -> str:
    low = name.lower()
    for word, kind in (
        ("pass", "password"),
        ("pwd", "password"),
        ("token", "token"),
        ("private", "private-key"),
        ("api", "api-key"),
    ):
        if word in low:
            return kind
    return "secret"


def _is_placeholder(value: str) -> bool:
    if value.startswith(("$", "%", "{", "<", "[", "*", "#", "@", "(")) or set(value) <= set(
        "*xX.-_"
    ):
        return True
    low = value.lower()
    return low in _NOT_SECRET_WORDS or low.startswith(
        ("your", "my-", "my_", "example", "changeme", "xxx")
    )


def _secret_value(name: str, sep: str, value: str, quoted: bool) -> bool:
    """Decide whether `value`, assigned to `name`, is a secret rather than code or prose."""
    if _is_placeholder(value):
        return False
    if quoted:
        # A quoted value with spaces is prose (a label, a help text), not a credential.
        return " " not in value and len(value) >= 3
    dotted = "." in value and _IDENTIFIER.fullmatch(value) is not None
    # `.env` and config files: an upper-case name set with `=` (no spaces) or `:`.
    if _ENV_NAME.fullmatch(name.lstrip("-")) and (":" in sep or " " not in sep):
        return not dotted  # `SECRET: process.env.SECRET` is a reference
    # In code a bare word is a variable (`token = tok`, `password=password`,
    # `secret = args.secret`); only values that look random are taken.
    if len(value) < 6 or dotted or value.lower() == re.split(r"[.\-]", name)[-1].lower():
        return False
    return not (_IDENTIFIER.fullmatch(value) and not any(c.isdigit() for c in value))


def _redact_assignments(text: str, low: str) -> str:
    # Lower-casing keeps positions unless some character lower-cases to several (rare).
    if len(low) == len(text):
        matches = _NAME_END_LOW.finditer(low)
    else:
        matches = _NAME_END_ANY.finditer(text)
    out: list[str] = []
    done = 0
    for m in matches:
        if m.start() < done:
            continue
        start = m.start()
        while start > 0 and m.start() - start < 120 and text[start - 1] in _NAME_CHARS:
            start -= 1
        name = text[start : m.end("word")]
        if m.group("word").lower() == "key" and not name.lower().endswith(_KEY_NAMES):
            continue
        v = _VALUE.match(text, m.end())
        if v is None:
            continue
        group = "quoted" if v.group("quoted") is not None else "bare"
        if not _secret_value(name, m.group("sep"), v.group(group), group == "quoted"):
            continue
        out.append(text[done : v.start(group)])
        out.append(_mark(_kind_of(name)))
        done = v.end(group)
    if not out:
        return text
    out.append(text[done:])
    return "".join(out)


KINDS = sorted(
    {kind for kind, *_ in _RULES}
    | set(_SIGNED.values())
    | {"password", "token", "secret", "api-key", "aws-secret-key"}
)


def redact(text: str) -> str:
    """Return `text` with secrets replaced by `[REDACTED:kind]` markers."""
    if not text:
        return text
    gate = text.lower()
    changed = False
    for _kind, triggers, pattern, repl in _RULES:
        # The gate is not refreshed after a substitution, so it can only let an extra pattern
        # run; a pattern it skips could not have matched.
        if any(t in gate for t in triggers):
            text, n = pattern.subn(repl, text)
            changed = changed or n > 0
    if any(t in gate for t in _ASSIGNMENT_TRIGGERS):
        text = _redact_assignments(text, text.lower() if changed else gate)
    return text
