"""Replace secrets with `[REDACTED:kind]` before any transcript text leaves the machine.

The observer is a model from another vendor, so everything the formatter sends goes through
`redact`. The patterns aim at things that are unambiguously credentials (vendor key prefixes,
JWTs, private key blocks, passwords inside URLs and on command lines (`mysql -pPW`,
`curl -u user:PW`, `--password PW`), webhook URLs, signed-URL parameters, cookies) plus
`NAME=value` assignments whose name says they hold a secret, and "my password is ..." in prose.
Names that only sometimes hold a secret (`session`, `auth`, `credentials`, `cookie`,
`SOMETHING_KEY`, `X-...` HTTP headers) count when their value looks generated: long, letters
and digits mixed, many distinct characters. Ordinary code must survive: a git sha, a content
hash, a UUID, `token = get_token()` or `password: str` are left alone.

`auditor.secret_values` judges the values found; `auditor.printable` is the other half of
showing transcript text safely (no terminal escapes).

The core redacts every prompt whatever formatter wrote it (`CheckpointPlanner.render`),
and `auditor show` and `auditor export html` redact what they print (`shown`).

Speed matters because the formatter calls this on every prompt. Every pattern is compiled once,
starts with a literal where possible (Python's `re` then scans for it with a fast substring
search; a leading look-behind or character class makes it try every position), and only runs
when the lower-cased text holds one of its trigger substrings.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cache

from .printable import printable
from .secret_values import (
    COMMON_WORDS,
    is_placeholder,
    kind_of,
    looks_generated,
    mark,
)

__all__ = ["KINDS", "redact", "shown"]

Replacement = str | Callable[[re.Match[str]], str]
# (kind, lower-case substrings one of which must occur, pattern, flags, replacement), compiled
# at the first text redacted (`_compiled`): most commands import this module and redact
# nothing (an ingest, a report), and compiling every rule cost them ~25 ms.
_RULES: list[tuple[str, tuple[str, ...], str, int, Replacement]] = []


def _rule(
    kind: str,
    triggers: tuple[str, ...],
    pattern: str,
    repl: Replacement | None = None,
    flags: int = 0,
) -> None:
    _RULES.append((kind, triggers, pattern, flags, repl if repl is not None else mark(kind)))


@cache
def _compiled() -> list[tuple[tuple[str, ...], re.Pattern[str], Replacement]]:
    """The rules, their patterns compiled, in their order."""
    return [
        (triggers, re.compile(pattern, flags), repl) for _, triggers, pattern, flags, repl in _RULES
    ]


def _words(kind: str, words: tuple[str, ...], rest: str, repl: Replacement, flags: int = 0) -> None:
    """Add a rule per word: the word (not inside a longer one), then `rest`.

    One rule per spelling keeps a literal at the start of each pattern (fast to scan for).
    """
    for word in words:
        lit = re.escape(word)
        _rule(kind, (word.lower(),), lit + r"(?<![A-Za-z0-9_]" + lit + ")" + rest, repl, flags)


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
    if (
        password.startswith(("$", "{", "<", "%(", "[REDACTED"))
        or set(password) <= {"*", "x", "X"}
        or m.group(1).startswith("[REDACTED")  # `https://[REDACTED:github-token]@github.com`
    ):
        return m.group(0)
    return f"://{m.group(1)}:{mark('password')}@"


_rule(
    "password", ("://",), r"://([^\s:/@?#'\"<>`]{0,100}):([^\s@/?#'\"<>`]{1,200})@", _url_password
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
    lambda m: m.group(1) + mark(_SIGNED[m.group(2).lower()]),
    re.IGNORECASE,
)

# -- tokens recognisable by their prefix -------------------------------------------------------
# JWTs: a header and a payload that are base64 of a JSON object (`{"` gives `eyJ`; written
# with a space or a line break after the brace, `eyA`, `ewo`, `ew0`), then the signature, which
# some libraries write in standard base64 (`+`, `/`, `=` padding) rather than the URL-safe form.
_JSON_START = "(?:eyJ|eyA|ewo|ew0)"
_B64URL = r"[A-Za-z0-9_\-+/]"
for _p in ("eyJ", "eyA", "ewo", "ew0"):
    _prefixed(
        "jwt",
        _p,
        _B64URL + r"{8,}=*\." + _JSON_START + _B64URL + r"{8,}=*\." + _B64URL + r"{8,}=*",
    )
_prefixed("anthropic-key", "sk-ant-", r"[A-Za-z0-9_\-]{20,}")
# OpenAI (`sk-`, `sk-proj-`, `sk-svcacct-`...): real keys are long and random, so a digit is
# required to keep hyphenated words such as `sk-some-long-css-class-name` out.
_prefixed("openai-key", "sk-", r"(?=[A-Za-z0-9_\-]*[0-9])[A-Za-z0-9_\-]{20,}")
for _p in ("sk_live_", "rk_live_"):
    _prefixed("stripe-key", _p, r"[A-Za-z0-9]{16,}")
_prefixed("google-api-key", "AIza", r"[0-9A-Za-z_\-]{35}")
for _p in ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"):
    _prefixed("github-token", _p, r"[A-Za-z0-9]{36,}")
    # The same 36 characters cut by a line break (a wrapped terminal line, a JSON `\n`), with
    # the next line's indentation: every part of the token is a secret.
    _prefixed(
        "github-token",
        _p,
        r"(?=[A-Za-z0-9]{1,35}(?:\r?\n|\\(?:r\\)?n))"
        r"(?:[A-Za-z0-9](?:(?:\r?\n|\\(?:r\\)?n)[ \t]*)?){35}[A-Za-z0-9](?![A-Za-z0-9])",
    )
_prefixed("github-token", "github_pat_", r"[A-Za-z0-9_]{22,}")
_prefixed("gitlab-token", "glpat-", r"[A-Za-z0-9_\-]{20,}")
_prefixed("slack-token", "xox", r"[abposr]-[A-Za-z0-9\-]{10,}")
_prefixed("huggingface-token", "hf_", r"[A-Za-z0-9]{30,}")
_prefixed("npm-token", "npm_", r"[A-Za-z0-9]{36}")
_prefixed("slack-token", "xapp-", r"[0-9]-[A-Za-z0-9\-]{10,}")
_prefixed("google-oauth-token", "ya29.", r"[A-Za-z0-9_\-]{20,}")
_prefixed("google-client-secret", "GOCSPX-", r"[A-Za-z0-9_\-]{20,}")
_prefixed("sendgrid-key", "SG.", r"[A-Za-z0-9_\-]{16,}\.[A-Za-z0-9_\-]{16,}")
_prefixed("pypi-token", "pypi-AgE", r"[A-Za-z0-9_\-]{30,}")
for _p in ("sk_test_", "rk_test_"):
    _prefixed("stripe-key", _p, r"[A-Za-z0-9]{16,}")
for _p in ("shpat_", "shpca_", "shppa_", "shpss_"):
    _prefixed("shopify-token", _p, r"[a-fA-F0-9]{32}")
_prefixed("digitalocean-token", "dop_v1_", r"[a-f0-9]{64}")
_prefixed("docker-hub-token", "dckr_pat_", r"[A-Za-z0-9_\-]{20,}")
_prefixed("linear-key", "lin_api_", r"[A-Za-z0-9]{30,}")
_prefixed("vault-token", "hvs.", r"[A-Za-z0-9_\-]{24,}")
_prefixed("age-secret-key", "AGE-SECRET-KEY-1", r"[0-9A-Z]{50,}")
for _p in ("glptt-", "glrt-", "gldt-"):
    _prefixed("gitlab-token", _p, r"[A-Za-z0-9_\-]{20,}")
# Twilio API keys: `SK` and 32 lower-case hex digits (letters and digits both, as any real one).
_rule(
    "twilio-key",
    ("sk",),
    r"SK(?<![A-Za-z0-9_]SK)(?=[0-9a-f]{0,31}[a-f])(?=[0-9a-f]{0,31}[0-9])[0-9a-f]{32}"
    r"(?![0-9A-Za-z_])",
)
# Telegram bot tokens: `123456789:AA` and 33 more characters.
_rule(
    "telegram-token",
    (":aa",),
    r"(?<![0-9])[0-9]{8,10}:AA[0-9A-Za-z_\-]{33}(?![0-9A-Za-z_\-])",
)

# -- webhook URLs: the path is the credential -------------------------------------------------
_rule(
    "webhook-url",
    ("hooks.slack.com", "/api/webhooks/", "webhook.office.com"),
    r"((?:https?://)?(?:hooks\.slack\.com/(?:services|workflows|triggers)/"
    r"|(?:discord(?:app)?\.com|[a-z0-9.-]*\.?discord\.com)/api/webhooks/"
    r"|[a-z0-9-]+\.webhook\.office\.com/webhookb2/))[A-Za-z0-9_@/\-]{8,}",
    lambda m: m.group(1) + mark("webhook-url"),
)


# -- passwords on command lines -----------------------------------------------------------------
def _keep_all_but(group: str, kind: str) -> Callable[[re.Match[str]], str]:
    """A replacement keeping the whole match except `group` (unless that is a placeholder)."""

    def repl(m: re.Match[str]) -> str:
        value = m.group(group)
        if is_placeholder(value) or re.fullmatch(r"[A-Z][A-Z0-9_]*", value):
            return m.group(0)
        start, end = m.start(group) - m.start(), m.end(group) - m.start()
        return m.group(0)[:start] + mark(kind) + m.group(0)[end:]

    return repl


# A quoted argument (which may hold spaces) or a bare one.
_ARG = r"(?P<q>['\"])?(?P<value>(?(q)[^'\"\n]{1,200}|[^\s'\"]{1,200}))(?(q)(?P=q))"
# `mysql -uroot -pPASSWORD` (MySQL and MariaDB clients take the password stuck to `-p`).
_words(
    "password",
    ("mysql", "mariadb"),
    r"(?:dump|admin|import|check|show|binlog|slap|pump|sh|-dump|-admin)?\b"
    r"[^\n|;&]*?\s-p(?=[^\s-])" + _ARG,
    _keep_all_but("value", "password"),
)
# `sshpass -p PW`, `redis-cli -a PW`, `docker login -p PW`, `openssl ... -passin pass:PW`.
_words("password", ("sshpass",), r"\s+-p\s*" + _ARG, _keep_all_but("value", "password"))
_words(
    "password",
    ("redis-cli",),
    r"\b[^\n|;&]*?\s-a\s+" + _ARG,
    _keep_all_but("value", "password"),
)
_words(
    "password",
    ("docker",),
    r"\s+login\b[^\n|;&]*?\s-p\s+" + _ARG,
    _keep_all_but("value", "password"),
)
_rule(
    "password",
    ("-pass",),
    r"-pass(?:in|out)?\s+pass:" + _ARG,
    _keep_all_but("value", "password"),
)
# `curl -u user:PW`, `curl --user user:PW`.
_words(
    "password",
    ("curl",),
    r"\b[^\n|;&]*?\s(?:-u\s*|--user[ =])(?P<q>['\"]?)[^\s:'\"]{1,100}:"
    r"(?P<value>[^\s'\"]{1,200})(?P=q)",
    _keep_all_but("value", "password"),
)
# `--password PW`, `--token PW`, `--api-key PW`... (with `=`, see the assignments below).
_rule(
    "password",
    ("--",),
    r"--(?:[A-Za-z0-9]+-)*(?P<word>password|passwd|token|secret|api-?key|access-key|secret-key|"
    r"private-key)(?![A-Za-z0-9_\-])[ \t]+" + _ARG,
    lambda m: (
        m.group(0)
        if len(m.group("value")) < 4
        or m.group("value").startswith("-")
        or m.group("value").lower() in COMMON_WORDS
        else _keep_all_but("value", kind_of(m.group("word")))(m)
    ),
    re.IGNORECASE,
)


# -- "my password is ..." in prose -----------------------------------------------------------
def _prose_password(m: re.Match[str]) -> str:
    value = m.group("value").rstrip(".,;:)")
    if not value or is_placeholder(value) or value.lower() in COMMON_WORDS:
        return m.group(0)
    before = m.string[max(0, m.start() - 4) : m.start()].lower()
    complex_ = m.group("q") or not value.isalpha() or not value.islower()
    if not (complex_ or before.endswith(("my ", "our "))):
        return m.group(0)
    return (
        m.group(0)[: m.start("value") - m.start()]
        + mark("password")
        + m.group(0)[m.start("value") - m.start() + len(value) :]
    )


_words(
    "password",
    ("password", "Password", "PASSWORD", "passphrase", "Passphrase", "passcode", "pwd"),
    r"(?:\s+(?i:for|to|of|on)\b[^\n.:;=]{1,40}?)?"
    r"\s+(?i:is|was)(?:\s+(?i:now|still|set\s+to|just|simply))?\s*:?\s+"
    r"(?P<q>[\"'`\u201c]?)(?P<value>[^\s\"'`\u201d]{3,100})",
    _prose_password,
)


# An AWS access key id, and the 40-character secret when it directly follows it (CSV exports,
# `id:secret`, `id secret`).
def _aws_key(m: re.Match[str]) -> str:
    out = mark("aws-access-key-id")
    if m.group(2):
        out += m.group(1) + mark("aws-secret-key")
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
    return m.group(1) + mark("bearer-token")


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
    lambda m: m.group(1) + mark("basic-auth"),
)

# -- cookies: `Cookie:` / `Set-Cookie:` headers, `--cookie`, and cookie objects in JSON --------
# Cookie names that say the cookie is a credential.
_SECRETISH = re.compile(
    r"sess|sid|token|auth|csrf|xsrf|jwt|secret|key|login|remember|cred|pass", re.I
)
_COOKIE_PAIR = re.compile(r"([^\s=;,]+)=([^\s;,]+)")


def _cookie_value(name: str, value: str) -> bool:
    if len(value) < 8 or is_placeholder(value):
        return False
    return looks_generated(value, 12) or _SECRETISH.search(name) is not None


def _cookies(m: re.Match[str]) -> str:
    def one(p: re.Match[str]) -> str:
        if _cookie_value(p.group(1), p.group(2)):
            return p.group(1) + "=" + mark("cookie")
        return p.group(0)

    return m.group(1) + _COOKIE_PAIR.sub(one, m.group(2))


for _p in ("Cookie", "cookie", "COOKIE"):
    _rule(
        "cookie",
        (_p.lower(),),
        "(" + _p + r"(?<![A-Za-z0-9_]" + _p + r")[\"']?[ \t]*:[ \t]*[\"']?)([^\n\"']*)",
        _cookies,
    )
_rule("cookie", ("--cookie",), r"(--cookie[ =][\"']?)([^\n\"']*)", _cookies)
_rule(
    "cookie",
    ('"value"',),
    r'("name"\s*:\s*"(?P<name>[^"\n]{1,80})"\s*,\s*"value"\s*:\s*")(?P<value>[^"\n]{8,4000})"',
    lambda m: (
        m.group(1) + mark("cookie") + '"'
        if _SECRETISH.search(m.group("name")) and _cookie_value(m.group("name"), m.group("value"))
        else m.group(0)
    ),
)

# -- HTTP headers: `X-Anything: <generated value>`, `curl -H 'Name: <generated value>'` ----------
# Headers whose values are ids, hashes or dates, not credentials.
_HEADER_SAFE = re.compile(
    r"request|trace|correlation|span|sha|content|date|cache|ratelimit|served|timer|runtime"
    r"|upstream|cf-|amz-id|forwarded|powered|version|frame|xss|etag|match|(?:^|-)id$",
    re.I,
)
_HEADER_SECRET = re.compile(r"auth|key|token|secret|session|sig|cred|pass|cookie|api|hmac", re.I)


def _header(m: re.Match[str]) -> str:
    name, value = m.group("name"), m.group("value")
    if not looks_generated(value, 20) or (
        _HEADER_SAFE.search(name) and not _HEADER_SECRET.search(name)
    ):
        return m.group(0)
    return m.group(1) + mark("secret")


_HEADER_VALUE = r"[\"']?[ \t]*:[ \t]*[\"']?)(?P<value>[A-Za-z0-9+/_.~=\-]{20,400})"
for _p in ("X-", "x-"):
    _rule(
        "secret",
        (_p.lower(),),
        "(" + _p + r"(?<![A-Za-z0-9_\-]" + _p + r")(?P<name>[A-Za-z0-9\-]{2,60})" + _HEADER_VALUE,
        _header,
    )
_rule(
    "secret",
    ("-h", "--header"),
    r"((?:-H|--header)[ =]?[\"']?(?P<name>[A-Za-z][A-Za-z0-9\-]{1,60})" + _HEADER_VALUE,
    _header,
)

# -- `NAME=value`, `name: value`, `"name": "value"` where the name says it holds a secret --------
# Searched for in the lower-cased text: the end of the name, then `=`, `:` or `:=` (never `==`).
_NAME_END = (
    r"(?P<word>pass(?:word|wd|phrase)|pwd|secret|token|key|credentials?|auth|session(?:_?id)?"
    r"|cookie|sid)(?![a-z0-9_])"
    r"(?P<sep>(?:\\?[\"'])?[ \t]*(?::=|=(?!=)|:(?!:))[ \t]*)"
)
_NAME_END_LOW = re.compile(_NAME_END)  # run on the lower-cased text: much faster than re.I
_NAME_END_ANY = re.compile(_NAME_END, re.IGNORECASE)
_ASSIGNMENT_TRIGGERS = (
    "pass",
    "pwd",
    "secret",
    "token",
    "key",
    "cred",
    "auth",
    "session",
    "cookie",
    "sid",
)
# Names that hold a secret only sometimes: their value must look generated.
_WEAK_WORDS = (
    "credential",
    "credentials",
    "auth",
    "session",
    "sessionid",
    "session_id",
    "cookie",
    "sid",
)
# Other names ending in `key` that hold a secret when their value looks generated (besides
# upper-case `.env` names such as `DATADOG_APP_KEY`); `file_key`, `cache_key` do not.
_WEAK_KEY_NAMES = re.compile(
    r"(?:app|client|license|licence|service|consumer|developer|admin|bot|webhook|deploy|root|sdk"
    r"|subscription|write|read|server|hmac|jwt|session|crypto|aes|decryption|encryption|cipher"
    r"|integration|ingest|master|storage|account|tenant|merchant)[_.\-]?key$",
    re.I,
)
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
    "accountkey",
    "sharedaccesskey",
    "account_key",
    "account-key",
    "encryption_key",
    "encryption-key",
    "client_key",
)
_VALUE = re.compile(
    # Quoted (the quotes may be backslash-escaped, as in JSON inside a string) or bare.
    r"(?P<open>\\?[\"'])(?P<quoted>[^\"'\n\\]{1,300})(?P<close>\\?[\"'])"
    # A bare value stops at `&name=` (the next URL query parameter) but may contain `&`.
    r"|(?P<bare>(?:[^\s\"'`,;&|<>()\[\]{}\\]|&(?![A-Za-z_][A-Za-z0-9_]*=)){1,300})"
)
_ENV_NAME = re.compile(r"[A-Z][A-Z0-9_]*")
_IDENTIFIER = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*(?:\.[A-Za-z_$][A-Za-z0-9_$]*)*")


def _secret_value(name: str, sep: str, value: str, quoted: bool) -> bool:
    """Decide whether `value`, assigned to `name`, is a secret rather than code or prose."""
    if is_placeholder(value):
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
        word = m.group("word").lower()
        weak = word in _WEAK_WORDS
        if word == "key" and not name.lower().endswith(_KEY_NAMES):
            if "public" in name.lower() or not (
                _ENV_NAME.fullmatch(name.lstrip("-")) or _WEAK_KEY_NAMES.search(name)
            ):
                continue
            weak = True  # `DATADOG_APP_KEY=...`: a secret when the value looks generated
        v = _VALUE.match(text, m.end())
        if v is None:
            continue
        group = "quoted" if v.group("quoted") is not None else "bare"
        value = v.group(group)
        if weak:
            if is_placeholder(value) or not looks_generated(value):
                continue
        elif not _secret_value(name, m.group("sep"), value, group == "quoted"):
            continue
        out.append(text[done : v.start(group)])
        out.append(mark(kind_of(name)))
        done = v.end(group)
    if not out:
        return text
    out.append(text[done:])
    return "".join(out)


KINDS = sorted(
    {kind for kind, *_ in _RULES}
    | set(_SIGNED.values())
    | {"password", "token", "secret", "api-key", "aws-secret-key", "session", "credential"}
    | {"encoded-secret"}
)

# Which rules may run is decided by the lower-case substrings (triggers) the text holds. Each
# is looked for once per text, in its UTF-8 bytes: bytes search is several times faster than
# str search on text that is not all ASCII (every trigger is ASCII).
_TRIGGERS = [
    (t, t.encode())
    for t in sorted({t for _, triggers, *_ in _RULES for t in triggers} | set(_ASSIGNMENT_TRIGGERS))
]


def redact(text: str) -> str:
    """Return `text` with secrets replaced by `[REDACTED:kind]` markers."""
    if not text:
        return text
    return _redact_plain(_decoded_secret(text))


def _redact_plain(text: str) -> str:
    gate = text.encode("utf-8", "surrogatepass").lower()
    present = {t for t, b in _TRIGGERS if b in gate}
    if not present:
        return text
    for triggers, pattern, repl in _compiled():
        # The triggers are not looked for again after a substitution, so they can only let an
        # extra pattern run; a pattern they skip could not have matched.
        if not present.isdisjoint(triggers):
            text = pattern.sub(repl, text)
    if not present.isdisjoint(_ASSIGNMENT_TRIGGERS):
        text = _redact_assignments(text, text.lower())
    return text


# -- secrets inside base64: a `.env` or config file passed as one blob --------------------------
# (`echo ... | base64 -d > .env`, a CI variable, a Kubernetes manifest). A blob of text that
# decodes to text holding a secret goes whole; images and hashes decode to bytes that are not
# text and are left at the first check.
_BASE64 = re.compile(r"[A-Za-z0-9+/]{32,65536}={0,2}")
_BASE64_EDGE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=_-")


def _decoded_secret(text: str) -> str:
    import base64

    def repl(m: re.Match[str]) -> str:
        blob = m.group(0)
        start, end = m.start(), m.end()
        if (start and text[start - 1] in _BASE64_EDGE) or (
            end < len(text) and text[end] in _BASE64_EDGE
        ):
            return blob  # part of a longer run (cut at 65536): an image, not a config file
        if blob.islower() or blob.isupper() or blob.isdigit():
            return blob  # hex hashes, words: base64 of text mixes cases
        try:
            plain = base64.b64decode(blob + "=" * (-len(blob) % 4), validate=True).decode()
        except ValueError:  # not base64, or bytes that are not UTF-8 text
            return blob
        if not plain.replace("\n", "").replace("\t", "").replace("\r", "").isprintable():
            return blob
        return mark("encoded-secret") if _redact_plain(plain) != plain else blob

    return _BASE64.sub(repl, text)


def shown(redacting: bool = True) -> Callable[[str | None], str]:
    """Return what cleans transcript text for a terminal or a page: `printable`, then `redact`
    unless `redacting` is False (`--no-redact`)."""
    if not redacting:
        return printable
    return lambda text: redact(printable(text))
