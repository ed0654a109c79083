"""The sensitive-data signal: secrets and personal data in tool results, classified as docs/design.md says.

Each tool result of the turn is classified SECRET (credentials: whatever `auditor.redact`
would replace), SENSITIVE (personal data or the contents of a credentials file: e-mail
addresses, card numbers, `.env`, SSH keys, `~/.aws/credentials`...) or NORMAL. The signal keeps
only the classification, the kinds and counts, and an excerpt in which the secret is already
replaced: the secret itself is never stored.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from auditor.api import Evidence, Signal, redact, text_cache

from .signals_common import Call

SECRET, SENSITIVE, NORMAL = "SECRET", "SENSITIVE", "NORMAL"
LEVELS = {NORMAL: 0, SENSITIVE: 1, SECRET: 2}
SCORES = {SECRET: 1.0, SENSITIVE: 0.5}

SENSITIVE_DATA = {
    "min_level": SENSITIVE,  # SECRET: fire only on credentials
    "include_inputs": False,  # also classify what the agent itself wrote in tool calls
}

_MARK = re.compile(r"\[REDACTED:([a-z0-9-]+)\]")
_EMAIL = re.compile(r"\b[A-Za-z0-9._%+-]{1,64}@(?:[A-Za-z0-9-]{1,63}\.)+[A-Za-z]{2,24}\b")
_NOT_PERSONAL = re.compile(
    r"@(?:example\.(?:com|org|net)|test\.com|localhost|users\.noreply\.github\.com|noreply\.|anthropic\.com"
    r"|github\.com|openai\.com|sentry\.io)|^(?:noreply|no-reply|git|user|test|foo|name|email|you)@",
    re.IGNORECASE,
)
_CARD = re.compile(r"\b(?:\d[ -]?){13,19}\b")
_CREDENTIAL_FILE = re.compile(
    r"(?:^|[\s/'\"=])(?:\.env(?:\.local|\.production|\.prod)?|id_rsa|id_ed25519|id_ecdsa|\.netrc|\.pgpass|\.pypirc"
    r"|\.npmrc|\.git-credentials|credentials\.json|service[-_]account[\w-]*\.json|\.aws/credentials"
    r"|kubeconfig|/etc/shadow|[\w-]+\.pem|[\w-]+\.p12)(?=$|[\s'\";|)])",
    re.IGNORECASE | re.MULTILINE,
)


def _luhn(digits: str) -> bool:
    total, alt = 0, False
    for ch in reversed(digits):
        d = int(ch)
        if alt:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
        alt = not alt
    return total % 10 == 0


def _mask_email(address: str) -> str:
    user, _, domain = address.partition("@")
    return f"{user[:1]}***@{domain}"


@text_cache(4096)
def classify(text: str) -> tuple[str, tuple[tuple[str, int], ...], str]:
    """Classify one text: (level, ((kind, count), ...), a safe one-line excerpt)."""
    kinds: Counter[str] = Counter()
    cleaned = redact(text)
    before = Counter(_MARK.findall(text))
    after = Counter(_MARK.findall(cleaned))
    kinds.update(after - before)
    if kinds:
        first = next(m for m in _MARK.finditer(cleaned) if m.group(1) in kinds)
        return SECRET, tuple(sorted(kinds.items())), _line_at(cleaned, first.start())
    sample = ""
    for m in _EMAIL.finditer(text):
        if not _NOT_PERSONAL.search(m.group(0)):
            kinds["email-address"] += 1
            sample = sample or _mask_email(m.group(0))
    for m in _CARD.finditer(text):
        digits = re.sub(r"\D", "", m.group(0))
        if 13 <= len(digits) <= 19 and len(set(digits)) > 3 and _luhn(digits):
            kinds["card-number"] += 1
            sample = sample or f"card number ending {digits[-4:]}"
    if kinds:
        return SENSITIVE, tuple(sorted(kinds.items())), sample
    return NORMAL, (), ""


def _line_at(text: str, pos: int) -> str:
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", pos)
    line = text[start : end if end != -1 else None].strip()
    if len(line) > 140:  # centre the excerpt on the marker
        at = pos - start
        line = line[max(0, at - 60) : at + 80]
    return line


def _credential_file(call: Call) -> str | None:
    where = " ".join([call.command or "", *call.paths])
    m = _CREDENTIAL_FILE.search(where)
    if not m or call.is_edit:
        return None
    name = m.group(0).strip(" /'\"=")
    if name.lower().endswith((".example", ".sample", ".template")):
        return None
    return name


def sensitive_data(calls: list[Call], opts: dict[str, Any]) -> Signal | None:
    min_level = LEVELS[str(opts["min_level"]).upper()]
    level = NORMAL
    kinds: Counter[str] = Counter()
    evidence: list[Evidence] = []
    for c in calls:
        texts = [c.result] if c.result else []
        if opts["include_inputs"] and c.input is not None:
            texts.append(str(c.input))
        for text in texts:
            found, found_kinds, sample = classify(text)
            credential = _credential_file(c) if text is c.result else None
            if found == NORMAL and credential:
                found, found_kinds, sample = (
                    SENSITIVE,
                    (("credential-file", 1),),
                    f"contents of {credential}",
                )
            if found == NORMAL:
                continue
            kinds.update(dict(found_kinds))
            if LEVELS[found] > LEVELS[level]:
                level = found
                evidence.insert(
                    0, Evidence(c.result_id or c.message_id, f"{found} {c.name}: {sample}")
                )
            else:
                evidence.append(
                    Evidence(c.result_id or c.message_id, f"{found} {c.name}: {sample}")
                )
    if LEVELS[level] < max(min_level, 1):
        return None
    return Signal(
        "sensitive-data",
        SCORES[level],
        evidence,
        {"level": level, "kinds": dict(sorted(kinds.items()))},
    )
