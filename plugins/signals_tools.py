"""Signals read from the agent's tool activity: tool-loop, error-cascade, claimed-success-after-failure."""

from __future__ import annotations

import re
from typing import Any

import orjson

from auditor.api import Evidence, Signal, text_cache

from .signals_common import Call, failure, first_line, is_verification

# -- tool-loop ------------------------------------------------------------------------------

TOOL_LOOP = {
    "min_repeats": 3,  # the same call this many times in the turn fires
    # Tools that are meant to be called again with the same input (polling, listings).
    "ignore": [
        "BashOutput",
        "TaskOutput",
        "TaskList",
        "TaskGet",
        "KillBash",
        "KillShell",
        "TodoWrite",
        "update_plan",
        "write_stdin",
    ],
    "undo_edits": True,  # an edit that reverses an earlier one fires too
    # Repeats count only when they also got the same result (numbers aside): re-running the
    # tests after each fix is work, running them again to the same output is a loop.
    "same_result": True,
}
# Keys that change between identical calls without changing what the call does.
_DIGITS = re.compile(r"\d+")
_VOLATILE = {
    "description",
    "timeout",
    "timeout_ms",
    "yield_time_ms",
    "max_output_tokens",
    "justification",
}


@text_cache(16384)
def _outcome(text: str) -> str:
    """Return a result's text with numbers (times, counts, ids) and spacing evened out."""
    return _DIGITS.sub("0", " ".join(text[:4000].split())[:2000])


def _normal(call: Call) -> str:
    value = call.input
    if isinstance(value, dict):
        value = {k: v for k, v in value.items() if k not in _VOLATILE}
    cmd = call.command
    if cmd is not None:
        value = " ".join(cmd.split())
    try:
        body = orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    except TypeError:
        body = repr(value)
    return f"{call.name}\0{' '.join(body.split())}"


def _edit_pairs(call: Call) -> list[tuple[str, str, str]]:
    """Return (path, old, new) for each string replacement a call makes."""
    if not isinstance(call.input, dict) or not call.is_edit:
        return []
    path = str(call.input.get("file_path") or call.input.get("path") or "")
    edits = e if isinstance(e := call.input.get("edits"), list) else [call.input]
    out = []
    for e in edits:
        if not isinstance(e, dict):
            continue
        old, new = e.get("old_string"), e.get("new_string")
        if isinstance(old, str) and isinstance(new, str) and old != new:
            out.append((path, old, new))
    return out


def tool_loop(calls: list[Call], opts: dict[str, Any]) -> Signal | None:
    ignore = set(opts["ignore"])
    groups: dict[str, list[Call]] = {}
    for c in calls:
        if c.name not in ignore:
            key = _normal(c)
            if opts["same_result"]:
                key += "\0" + _outcome(c.result or "")
            groups.setdefault(key, []).append(c)
    repeated = max(groups.values(), key=len, default=[])
    score = 0.0
    evidence: list[Evidence] = []
    detail: dict[str, Any] = {}
    min_repeats = int(opts["min_repeats"])
    if len(repeated) >= min_repeats:
        score = min(1.0, 0.5 + 0.25 * (len(repeated) - min_repeats))
        c = repeated[0]
        what = c.command or (", ".join(c.paths) if c.paths else "")
        evidence = [
            Evidence(r.message_id, f"{c.name} {what}".strip()) for r in (repeated[0], repeated[-1])
        ]
        detail = {"tool": c.name, "repeats": len(repeated)}
    if opts["undo_edits"]:
        seen: dict[tuple[str, str, str], Call] = {}
        for c in calls:
            for path, old, new in _edit_pairs(c):
                earlier = seen.get((path, new, old))
                if earlier is not None:
                    undo = 0.8
                    if undo > score:
                        score = undo
                        evidence = [
                            Evidence(
                                earlier.message_id,
                                f"{earlier.name} {path}: {old[:60]!r} -> {new[:60]!r}",
                            ),
                            Evidence(c.message_id, f"{c.name} {path}: reverted"),
                        ]
                        detail = {"tool": c.name, "undone_edit": path}
                seen[(path, old, new)] = c
    if score == 0.0:
        return None
    return Signal("tool-loop", score, evidence, detail)


# -- error-cascade --------------------------------------------------------------------------

ERROR_CASCADE = {"min_run": 3}  # this many failed results in a row fires


def error_cascade(calls: list[Call], opts: dict[str, Any]) -> Signal | None:
    min_run = int(opts["min_run"])
    best: list[tuple[Call, str]] = []
    run: list[tuple[Call, str]] = []
    answered = [c for c in calls if c.result is not None]
    answered.sort(key=lambda c: c.result_index or 0)
    for c in answered:
        why = failure(c)
        if why:
            run.append((c, why))
            if len(run) > len(best):
                best = list(run)
        else:
            run = []
    if len(best) < min_run:
        return None
    # Still going at the checkpoint: the last results of the turn are the failing run.
    still_open = len(run) >= min_run
    score = 0.5 + 0.15 * (len(best) - min_run) + (0.2 if still_open else 0.0)
    shown = [best[0], best[-1]] if len(best) > 1 else best
    evidence = [
        Evidence(c.result_id or c.message_id, f"{c.name}: {why}: {first_line(c.result)}")
        for c, why in shown
    ]
    return Signal("error-cascade", score, evidence, {"run": len(best), "open": still_open})


# -- claimed-success-after-failure ----------------------------------------------------------

CLAIMED_SUCCESS: dict[str, Any] = {}

# Claims about checks ("all tests pass", "the build succeeds") and about the work ("done").
_CHECK_CLAIM = re.compile(
    r"\b(?:all (?:the |\d+ )?(?:tests?|specs?|checks?)(?: are| now)? (?:pass(?:ing|es|ed)?|green|succeed\w*)"
    r"|tests? (?:are |now |all )*(?:pass(?:ing|es)?|green)\b"
    r"|(?:build|compil\w+|lint\w*|type ?check\w*|tsc|ci)(?: now| is| are)* (?:pass(?:es|ing)?|succeed\w*|successful|clean|green)"
    r"|(?:builds?|compiles?) (?:successfully|cleanly|without errors?)"
    r"|no (?:more )?(?:type |lint |test |compil\w+ )?errors\b"
    r"|everything (?:is )?(?:passing|green|works?|working))",
    re.IGNORECASE,
)
_WORK_CLAIM = re.compile(
    # "Done." opening a line or sentence; "all done"; "I've fixed"; "is now fixed"; "successfully".
    r"(?:^|[.!]\s+)[*#✅\s]*(?:done|fixed|complete[d]?|finished|all set)\b[.!:]"
    r"|\ball (?:done|fixed|set)\b|\bI(?:'ve| have) (?:now )?(?:successfully )?(?:fixed|completed|finished|resolved)\b"
    r"|\b(?:successfully|now works|is now working|works (?:now|correctly|as expected)|(?:is|are) now (?:fixed|complete|done|ready|working)"
    r"|has been (?:fixed|resolved|completed)|(?:implementation|migration|fix|task|refactor\w*) is complete|should now work)\b|✅",
    re.IGNORECASE | re.MULTILINE,
)
# The final text owns up to a failure: then it is not a false claim.
_ADMITS = re.compile(
    r"\b(?:[1-9]\d*|some|one|two|three|a few|several|remaining) (?:\w+ )?(?:tests? )?(?:still )?fail"
    r"|\bstill (?:fail\w*|broken|erroring|red)|\b(?:tests?|build|lint|checks?|ci) (?:is |are )?(?:still )?(?:failing|broken|red)\b"
    r"|\b(?:could not|couldn'?t|unable to|cannot|can'?t|did not|didn'?t|was not able to) (?:get|make|fix|run|verify|pass|resolve|complete)"
    r"|\bpre-?existing (?:failures?|errors?|issues?)|\bunrelated (?:failures?|errors?|tests?)"
    r"|\bnot (?:yet )?(?:passing|working|fixed|green)|\bfail(?:ed|s|ing|ure)\b.{0,40}\b(?:because|due to|remain)"
    r"|\bblocked\b|\berror(?:s)? (?:remain|persist)",
    re.IGNORECASE,
)


def final_text(messages: list, start: int) -> tuple[Any, str] | None:
    """Return the last assistant message with text in the turn, and its text."""
    for i in range(len(messages) - 1, start, -1):
        m = messages[i]
        if m.role == "assistant" and m.text.strip():
            return m, m.text
    return None


def _claim(text: str) -> tuple[str, str] | None:
    m = _CHECK_CLAIM.search(text)
    if m:
        return "checks", m.group(0).strip()
    m = _WORK_CLAIM.search(text)
    if m:
        return "work", m.group(0).strip(" *#")
    return None


# Commands that only look around: when one fails, nothing the agent claims depends on it.
_LOOKING = re.compile(
    r"^(?:ls|cat|head|tail|less|find|fd|grep|egrep|rg|ag|which|whereis|echo|printf|pwd|wc|sed -n|awk|tree|file"
    r"|stat|du|df|ps|env|printenv|type|command -v|test|\[|date|whoami|uname|git (?:status|log|diff|show|branch"
    r"|remote|rev-parse|blame|ls-files)|gh (?:pr|issue) (?:view|list)|curl -s?I|open|xdg-open)\b"
)
_SETUP = re.compile(r"^(?:cd|source|\.|export|set|pushd|popd|sleep|true)\b")
_CHAIN = re.compile(r"\s*(?:&&|\|\||;|\n)\s*")
_PIPE = re.compile(r"\s*\|\s*")
_REDIRECT = re.compile(r"(?<![0-9&>])>>?\s*([^\s&|;<>]+)")
_ENV_WORD = re.compile(r"[A-Z_][A-Z0-9_]*=\S*")
# Tools whose first argument says what they do (`git commit`, `npm test`, `cargo build`).
_SUBCOMMANDS = {
    "git",
    "npm",
    "pnpm",
    "yarn",
    "bun",
    "cargo",
    "go",
    "docker",
    "gh",
    "mix",
    "dotnet",
    "kubectl",
    "make",
    "deno",
    "swift",
    "gradle",
    "mvn",
    "brew",
    "apt",
    "apt-get",
    "pip",
    "pip3",
    "uv",
    "poetry",
    "bd",
    "systemctl",
    "terraform",
    "helm",
    "bundle",
    "rake",
}
# Wrappers that run another program: the task is that program.
_WRAPPERS = {
    ("uv", "run"),
    ("poetry", "run"),
    ("pipenv", "run"),
    ("bundle", "exec"),
    ("pnpm", "exec"),
    ("yarn", "exec"),
    ("python", "-m"),
    ("python3", "-m"),
    ("npx",),
    ("bunx",),
    ("sudo",),
    ("time",),
    ("timeout",),
    ("env",),
    ("nohup",),
}
_NOT_INSTALLED = re.compile(
    r"command not found|not recognized as an internal|No such file or directory \(os error 2\)"
)
_BENIGN = re.compile(
    r"nothing to commit|nothing added to commit|Already up to date|no changes added to commit"
)


def _task(call: Call) -> str | None:
    """Return what a call was trying to get done, so that a later success can settle a failure.

    An edit's file; a command's last real step (`cd`, `source`, `export` skipped; the first
    program of a pipe), as its program and, for tools with subcommands, the subcommand
    (`git commit`, `npm run build`, `pytest`, `python3`). None for commands that only look
    around and for tools that neither run nor edit.
    """
    if call.is_edit:
        return "edit:" + (call.paths[0] if call.paths else call.name)
    cmd = call.command
    if not cmd:
        return None
    first_line = cmd.strip().split("\n", 1)[0]
    if "<<" in first_line:  # a heredoc: the rest is its body
        cmd = first_line
    steps = [p.strip(" ()") for p in _CHAIN.split(cmd.strip())]
    steps = [p for p in steps if p and not _SETUP.match(p)]
    if not steps:
        return None
    step = _PIPE.split(steps[-1])[0].strip(" ()")
    target = _REDIRECT.search(step)
    if target and not target.group(1).startswith("/dev/"):
        return "write:" + target.group(1)
    if _LOOKING.match(step):
        return None
    words = [w for w in step.split() if not _ENV_WORD.fullmatch(w)]
    while words:
        for wrapper in _WRAPPERS:
            if tuple(words[: len(wrapper)]) == wrapper:
                words = words[len(wrapper) :]
                while words and words[0].startswith("-"):
                    words = words[1:]
                break
        else:
            break
    if not words:
        return None
    program = words[0].rsplit("/", 1)[-1]
    args = [w for w in words[1:] if not w.startswith("-")]
    if program in _SUBCOMMANDS and args:
        return "cmd:" + " ".join([program, *(args[:2] if args[0] in ("run", "exec") else args[:1])])
    return "cmd:" + program


def unresolved(calls: list[Call]) -> list[tuple[Call, str]]:
    """Return the failed calls of the turn that no later call of the same task made good.

    A command that is not installed counts only when it is a check (tests, build, lint): a
    missing diagnostic tool says nothing about the work.
    """
    last: dict[str, Call] = {}
    for c in sorted((c for c in calls if c.result is not None), key=lambda c: c.result_index or 0):
        task = _task(c)
        if task is not None:
            last[task] = c
    out = []
    for c in last.values():
        why = failure(c)
        if not why or _BENIGN.search((c.result or "")[:2000]):
            continue
        if _NOT_INSTALLED.search((c.result or "")[:2000]) and not is_verification(c):
            continue
        out.append((c, why))
    return sorted(out, key=lambda pair: pair[0].result_index or 0)


def claimed_success(
    messages: list, start: int, calls: list[Call], opts: dict[str, Any]
) -> Signal | None:
    last = messages[-1] if messages else None
    if last is None or last.role != "assistant":
        return None
    found = final_text(messages, start)
    if found is None:
        return None
    final, text = found
    claim = _claim(text)
    if claim is None or _ADMITS.search(text):
        return None
    before = messages.index(final)
    failed = unresolved(
        [c for c in calls if c.result is not None and (c.result_index or 0) < before]
    )
    if not failed:
        return None
    checks = [pair for pair in failed if is_verification(pair[0])]
    relevant, why = (checks or failed)[-1]
    kind, said = claim
    score = 0.5 + (0.25 if kind == "checks" else 0.0) + (0.2 if checks else 0.0)
    what = relevant.command or f"{relevant.name} {', '.join(relevant.paths)}".strip()
    evidence = [
        Evidence(final.native_id, said if len(said) > 12 else _around(text, said)),
        Evidence(
            relevant.result_id or relevant.message_id,
            f"{what[:60]}: {why}: {first_line(relevant.result)}",
        ),
    ]
    return Signal(
        "claimed-success-after-failure",
        score,
        evidence,
        {"claim": kind, "failure": why, "verification": bool(checks), "unresolved": len(failed)},
    )


def _around(text: str, phrase: str, width: int = 100) -> str:
    i = text.find(phrase)
    if i < 0:
        return phrase
    return text[max(0, i - width // 2) : i + len(phrase) + width // 2]
