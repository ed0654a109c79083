"""Signals read from what the user asked: goal-drift and skipped-requirement-hint."""

from __future__ import annotations

import re
from typing import Any

from auditor.api import Evidence, Signal, is_typed_user

from .signals_common import Call, goal_message, prose

# -- goal-drift (explicit change phrases plus word-set divergence: docs/design.md) -----------

# Decided on the development labels (benchmarks/signal_thresholds.py): against the thread's
# first message, 0.4 fires at 7 of 25 checkpoints that needed a correction and 9 of 69 that did
# not (0.5: 1 and 0, so a full change of topic, 0.40 without a change phrase, never fired);
# against the previous goal, 0.4 fires at 3 of 25 and 7 of 69, no better than chance.
GOAL_DRIFT = {
    "threshold": 0.4,  # fires when the combined score reaches this
    "phrase_weight": 0.6,
    "divergence_weight": 0.4,
    "min_words": 4,  # both messages need this many content words for divergence to count
    "phrase_chars": 300,  # change phrases count in the opening words only; the rest is often pasted
}
_DRIFT_PHRASES = re.compile(
    # "actually" only where it turns the sentence ("Actually, ...", "I actually want..."), not
    # as emphasis ("the only thing that actually loaded").
    r"(?:(?:^|[.,;:!?]\s*|\b(?:i|we|i'd|i'm)\s+)actually\b)|\b(?:instead|on second thought|new plan|change of plans?|change (?:the )?plan|scratch that"
    r"|never ?mind|forget (?:about )?(?:that|it|this|the previous|what i said)|ignore (?:that|my last|what i said)"
    r"|different (?:approach|task|direction|thing)|switch (?:gears|to)|let'?s (?:pivot|move on to|switch)"
    r"|new task|rather than|stop (?:doing|working on))\b",
    re.IGNORECASE,
)
_LEAD = re.compile(r"^[^a-z]*(?:(?:i|we|i'd|i'm)\s+)?")
_WORD = re.compile(r"[a-z][a-z0-9_]{2,}")
_STOP = frozenset(
    [
        "the",
        "and",
        "for",
        "are",
        "but",
        "not",
        "you",
        "all",
        "any",
        "can",
        "had",
        "her",
        "was",
        "one",
        "our",
        "out",
        "has",
        "have",
        "this",
        "that",
        "with",
        "from",
        "they",
        "will",
        "would",
        "there",
        "their",
        "what",
        "when",
        "which",
        "who",
        "how",
        "its",
        "also",
        "just",
        "into",
        "then",
        "than",
        "them",
        "these",
        "those",
        "your",
        "about",
        "could",
        "should",
        "some",
        "please",
        "make",
        "sure",
        "like",
        "need",
        "want",
        "let",
        "lets",
        "now",
        "here",
        "more",
        "only",
        "very",
        "much",
        "use",
        "using",
        "get",
        "got",
        "does",
        "did",
        "done",
        "doing",
        "been",
        "being",
        "were",
        "way",
        "well",
        "still",
        "yet",
        "too",
        "each",
        "other",
        "such",
        "may",
        "might",
        "able",
        "okay",
        "thanks",
        "thank",
        "yes",
        "sure",
    ]
)
_MAX_CHARS = 2000  # a pasted log says little about the goal


def words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text[:_MAX_CHARS].lower()) if w not in _STOP}


def goal_drift(messages: list, start: int, opts: dict[str, Any]) -> Signal | None:
    if start < 0 or not is_typed_user(messages[start]):
        return None
    goal = goal_message(messages)
    current = messages[start]
    if goal is None or goal is current:
        return None
    text, goal_text = prose(current.text), prose(goal.text)
    found = _DRIFT_PHRASES.finditer(text[: opts["phrase_chars"]])
    phrases = sorted({_LEAD.sub("", m.group(0).lower()) for m in found})
    phrase = min(1.0, 0.5 * len(phrases))
    a, b = words(goal_text), words(text)
    divergence = 0.0
    if len(a) >= opts["min_words"] and len(b) >= opts["min_words"]:
        divergence = 1.0 - len(a & b) / len(a | b)
    score = opts["phrase_weight"] * phrase + opts["divergence_weight"] * divergence
    if score < opts["threshold"]:
        return None
    said = _sentence(text, phrases[0]) if phrases else text
    return Signal(
        "goal-drift",
        score,
        [Evidence(current.native_id, said), Evidence(goal.native_id, "goal: " + goal_text)],
        {"phrases": phrases, "divergence": round(divergence, 3)},
    )


def _sentence(text: str, phrase: str, width: int = 140) -> str:
    i = text.lower().find(phrase)
    if i < 0:
        return text
    start = max(text.rfind(".", 0, i), text.rfind("\n", 0, i)) + 1
    return text[start : start + width].strip()


# -- skipped-requirement-hint ---------------------------------------------------------------

SKIPPED_REQUIREMENT = {
    "min_tool_calls": 1
}  # a turn with fewer tool calls asked or planned; not a skip

_TEST_PATH = re.compile(
    r"(?:^|/)(?:tests?|specs?|__tests__)/|(?:^|/)test_[^/]*$|[._-](?:test|spec)\.\w+$|_test\.\w+$",
    re.IGNORECASE,
)
_DOC_PATH = re.compile(r"\.(?:md|mdx|rst|adoc|txt)$|(?:^|/)docs?/|readme|changelog", re.IGNORECASE)
_LINT_CMD = re.compile(
    r"\b(?:lint|ruff|eslint|flake8|pylint|clippy|credo|golangci|prettier|black|biome|rubocop|stylelint)\b",
    re.IGNORECASE,
)
_TYPE_CMD = re.compile(
    r"\b(?:mypy|pyright|tsc|typecheck|type-check|check-types|dialyzer)\b", re.IGNORECASE
)
_TEST_CMD = re.compile(
    r"\b(?:test|tests|pytest|jest|vitest|mocha|rspec|phpunit|spec|playwright|cypress|ctest)\b",
    re.IGNORECASE,
)
_BUILD_CMD = re.compile(r"\b(?:build|compile|make|tsc)\b", re.IGNORECASE)
_COMMIT_CMD = re.compile(r"\bgit\b[^|;&\n]*\bcommit\b")


def _edited(calls: list[Call], pattern: re.Pattern[str]) -> bool:
    return any(c.is_edit and any(pattern.search(p) for p in c.paths) for c in calls)


def _ran(calls: list[Call], pattern: re.Pattern[str]) -> bool:
    return any(c.command and pattern.search(c.command) for c in calls)


# (name, what the user says, whether the turn did it)
ASKS: list[tuple[str, re.Pattern[str], Any]] = [
    (
        "add-tests",
        re.compile(
            r"\b(?:add|write|include|create|with|cover (?:it|this|them) with)\s+(?:\w+\s+){0,2}?(?:unit |integration |e2e |regression )?tests?\b(?! (?:pass|run|suite))"
            r"|\b(?:save[ds]?|turn|make)\b[^.\n?]{0,30}?\b(?:into )?an? (?:permanent |proper |real )*(?:unit |regression )?test\b",
            re.IGNORECASE,
        ),
        lambda calls: _edited(calls, _TEST_PATH),
    ),
    (
        "run-tests",
        re.compile(
            r"\b(?:run|rerun|re-run)\b[^.\n?]{0,15}?\b(?:the )?(?:tests?|test suite|specs?)\b"
            r"|\bmake sure[^.\n?]{0,30}?\btests? (?:pass|still pass|are green)|\bdo (?:all )?(?:the )?tests pass\b",
            re.IGNORECASE,
        ),
        lambda calls: _ran(calls, _TEST_CMD),
    ),
    (
        "run-lint",
        re.compile(
            r"\b(?:run|fix)\b[^.\n?]{0,15}?\b(?:the )?(?:lint(?:er|ing)?|ruff|eslint|flake8|clippy)\b|\blint (?:it|the code|everything)\b",
            re.IGNORECASE,
        ),
        lambda calls: _ran(calls, _LINT_CMD),
    ),
    (
        "typecheck",
        re.compile(
            r"\b(?:run|fix)\b[^.\n?]{0,25}?\b(?:the )?(?:type ?check(?:er|ing|s)?|check-types|type-check|mypy|pyright|tsc)\b|\btype ?check (?:it|the code|everything)\b",
            re.IGNORECASE,
        ),
        lambda calls: _ran(calls, _TYPE_CMD),
    ),
    (
        "update-docs",
        re.compile(
            r"\b(?:update|add|write|document|adjust|fix|fill in|fill out|edit)\b[^.\n?]{0,25}?\b(?:the )?(?:docs?|documentation|readme|changelog)\b",
            re.IGNORECASE,
        ),
        lambda calls: _edited(calls, _DOC_PATH),
    ),
    (
        "commit",
        re.compile(
            r"\b(?:and|then) commit\b|\bcommit (?:it|this|that|them|everything|the (?:changes|work)|your (?:changes|work))\b"
            r"|\bcommit and push\b|\b(?:create|make) (?:an? )?(?:empty |new |single )?commit\b",
            re.IGNORECASE,
        ),
        lambda calls: _ran(calls, _COMMIT_CMD),
    ),
    (
        "build",
        re.compile(
            r"\b(?:run|make sure|check)\b[^.\n?]{0,20}?\b(?:the )?build\b(?! a| an| the| new)",
            re.IGNORECASE,
        ),
        lambda calls: _ran(calls, _BUILD_CMD),
    ),
]
_NEGATION = re.compile(
    r"\b(?:don'?t|do not|no need to|without|skip|never|not|no)\b[^.\n]{0,20}$", re.IGNORECASE
)


def asks_in(text: str) -> list[tuple[str, str]]:
    """Return (ask name, the words that asked) for each explicit ask in a user's message."""
    found = []
    for name, pattern, _done in ASKS:
        for m in pattern.finditer(text[: _MAX_CHARS * 2]):
            if _NEGATION.search(text[max(0, m.start() - 40) : m.start()]):
                continue
            found.append((name, m.group(0)))
            break
    return found


def skipped_requirement(
    messages: list, start: int, calls: list[Call], opts: dict[str, Any]
) -> Signal | None:
    if start < 0 or not is_typed_user(messages[start]) or len(calls) < opts["min_tool_calls"]:
        return None
    last = messages[-1]
    if last.role != "assistant" or any(b.kind == "tool_use" for b in last.blocks):
        return None  # the turn is still going: nothing is skipped yet
    user = messages[start]
    asks = asks_in(prose(user.text))
    if not asks:
        return None
    done = {name: check for name, _p, check in ASKS}
    unmet = [(name, said) for name, said in asks if not done[name](calls)]
    if not unmet:
        return None
    score = 0.4 + 0.4 * len(unmet) / len(asks)
    evidence = [Evidence(user.native_id, f"{name}: {said}") for name, said in unmet]
    return Signal(
        "skipped-requirement-hint",
        score,
        evidence,
        {"unmet": [n for n, _ in unmet], "asks": [n for n, _ in asks]},
    )
