"""The formatter's text tools: token estimates, abbreviation, quoting and fencing, and the
detail levels at which tool inputs and outputs are shown.

`abbreviate` keeps the lines of a text that decide what happened (test-runner summaries, a
commit's header, files that hold credentials, failures: tracebacks, `FAILED`, `error:`, non-zero
exit codes...) and then its head and tail, with a marker saying how much was cut. `quote` and `fence` keep what a transcript says from passing for the prompt's own
structure. Everything here depends only on its input.
"""

from __future__ import annotations

import bisect
import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from auditor.api import redact, text_cache


def estimate_tokens(text: str) -> int:
    """Estimate the tokens of `text`: a quarter of its UTF-8 bytes, rounded up.

    Counting bytes rather than characters charges non-Latin text (3 bytes a character, about a
    token each) closer to what tokenizers do; for English and code it is the usual chars/4.
    """
    return -(-len(text.encode("utf-8", "surrogatepass")) // 4)


# Redacting is the costliest step and a thread's messages come back at every checkpoint of a
# run, so results are remembered (keyed by the text itself).
clean: Callable[[str], str] = text_cache(8192)(redact)


_LINE_END_SPACE = re.compile(r"[ \t]+$", re.MULTILINE)


def trim_line_ends(text: str) -> str:
    """Drop the spaces and tabs that end a line: in a tool's output they say nothing (ASCII art
    and padded tables end every line with them) and would take the room of words. Indentation,
    at the start of a line, stays."""
    if " \n" not in text and "\t\n" not in text and not text.endswith((" ", "\t")):
        return text
    return _LINE_END_SPACE.sub("", text)


# Codex heads what a command printed with its exit code, its wall time and an `Output:` label.
# The exit code says how the command ended; the time it took and the label say nothing a
# reviewer weighs, in every call of a session.
_CODEX_HEAD = re.compile(r"\A(Exit code: -?\d+\n)Wall time: [\d.]+ seconds?\n(?:Output:\n)?")
# Claude Code numbers the lines of a file it read, right-aligned to six columns (`     7→`): the
# numbers stay, the spaces aligning them go.
_GUTTER = re.compile(r"^ +(?=\d+→)", re.MULTILINE)


def plain_output(text: str) -> str:
    """A tool's output without what its harness wraps every output in: spaces ending a line
    (`trim_line_ends`), blank lines ending the output, Codex's wall time and `Output:` label,
    the spaces aligning Claude Code's line numbers. Every word and number of the output stays."""
    text = trim_line_ends(text).rstrip("\n")
    if text.startswith("Exit code: "):
        text = _CODEX_HEAD.sub(r"\1", text, count=1)
    if "→" in text:
        text = _GUTTER.sub("", text)
    return text


# -- abbreviation --------------------------------------------------------------------------------
# Lines worth keeping from anywhere in a long output, before its head and tail.
FAILURE = re.compile(
    r"Traceback \(most recent call last\)|\b[A-Z]\w*(?:Error|Exception)\b|\b(?:error|ERROR|Error)(?:\[\w+\])?:"
    r"|\bFAIL(?:ED|URES?)?\b|\b[Ff]ailed\b|\b\d+ (?:failed|failing|errors?)\b|^(?:> )?E {2,}\S"
    r"|\b(?:[Ee]xit|[Rr]eturn) (?:code|status)[: =]+-?[1-9]|non-zero exit|panicked at|Segmentation fault"
    r"|core dumped|command not found|No such file or directory|Permission denied|^(?:> )?fatal:|npm ERR!|[✗✘❌]"
    r"|\b(?:[Uu]nable to|[Cc]annot|[Cc]ould not|[Ff]ailed to)\b"
    r"|\berror [A-Z]{1,4}\d+\b",  # compiler codes: tsc's `error TS2345`, C#'s `error CS1002`
    re.MULTILINE,
)
# Lines that say how a whole command ended, and files nobody should publish: kept first, since
# one of them decides a checkpoint. Test-runner summaries (`collected 3 items / 2 errors`,
# `=== 1 failed, 9 passed in 2s ===`, `Tests: 2 failed`, `test result:`, tsc's `Found 3 errors`),
# a commit's header and count (`[main 1a2b3c4] ...`, `3 files changed`), git's state lines, and
# a file list's entries that name credentials (`create mode 100644 .codex/auth.json`, `.env`).
_CREDENTIAL_FILE = (
    r"(?:^|[\s/'\"])(?:\.env(?:\.[\w-]+)?|auth\.json|credentials(?:\.\w+)?|secrets?\.\w+|id_[rde]sa\w*"
    r"|[\w.-]+\.pem|\.netrc|\.npmrc|\.pypirc)(?=$|[\s'\"])"
)
_TEST_SUMMARY = (
    r"^(?:> )?[^\w\n]*collected \d+ items?\b|^(?:> )?=+ .*\b(?:passed|failed|errors?|no tests ran)\b.* in [\d.]+m?s\b"
    r"|^(?:> )?[ \t]*Tests?(?: Files| Suites)?:\s+\d|\btest result: |\bFound \d+ errors?\b"
    # bun's and node's counts (` 2 pass`, ` 10 fail`, `# fail 10`), `Ran 12 tests in 0.1s`
    # (unittest) or `across 3 files` (bun), and a coverage threshold (pytest-cov)
    r"|^(?:> )?[ \t]*(?:\d+ (?:pass|fail)|# (?:pass|fail) \d+)[ \t]*$|\bRan \d+ tests? (?:in|across)\b"
    r"|\bRequired test coverage of [\d.]+% (?:not )?reached\b"
)
_DECISIVE = re.compile(
    _TEST_SUMMARY
    + r"|^(?:> )?\[[\w./-]+(?: \(root-commit\))? [0-9a-f]{7,}\]|\b\d+ files? changed\b"
    r"|^(?:> )?(?:On branch |Your branch |nothing to commit|Changes (?:not staged|to be committed)|Untracked files:)"
    rf"|{_CREDENTIAL_FILE}",
    re.MULTILINE,
)
# A commit or a file list that takes in a file holding credentials: what it did lasts past its
# turn (the secret is in the history), so the formatter keeps such a call longer.
_CREDENTIALS_TAKEN = re.compile(
    rf"^(?:> )?\s*(?:create mode \d+|new file:|A  |add ').*{_CREDENTIAL_FILE}", re.MULTILINE
)


_TEST_SUMMARY_LINE = re.compile(_TEST_SUMMARY, re.MULTILINE)


@text_cache(16384)
def sums_up_tests(text: str) -> bool:
    """True when a command's output holds a test runner's summary: how the tests stood then."""
    return bool(text) and _TEST_SUMMARY_LINE.search(text) is not None


def takes_in_credentials(text: str) -> bool:
    """True when a command's output shows a file holding credentials committed or staged."""
    return bool(text) and _CREDENTIALS_TAKEN.search(text) is not None


# Lines that say how a command ended when it did not fail: summaries of tests and checks and
# commits first, then plain words of success.
_OUTCOME = re.compile(
    r"\b\d+ (?:passed|tests?|examples?|specs?|checks?|skipped|warnings?|files? changed)\b"
    r"|\bTests?:?\s+\d|\bAll checks passed\b|^(?:> )?\[[\w./-]+ [0-9a-f]{7,}\]|^(?:> )?(?:OK|PASS)\b",
    re.MULTILINE,
)
_SUCCESS = re.compile(r"\b(?:[Ss]uccess(?:ful(?:ly)?)?|succeeded|[Dd]one|PASSED)\b|[✓✔]")
NOTHING = re.compile(r"(?!)")
# Lines naming files in a patch or diff; kept so that the paths a call touches stay visible.
_FILE_HEADER = re.compile(
    r"^(?:\*\*\* (?:Add|Update|Delete|Move) File|\+\+\+ |--- |diff --git )", re.MULTILINE
)
# A line without a word in it, after the line number a file read puts in front: a blank line or a
# rule of `#`, `-`, `=`, `*`, `~`, `_`, `/` or `;`. The first few of them in the head or the tail
# of a cut output take no share of their room, so that a file's banner does not spend the head on
# its rules and leave out the title between them (`# Monitor configuration: LAST KNOWN WORKING
# STATE`). Measured on the development labels: one evidence string more, 7 tokens more of
# median prompt.
_BARE = re.compile(r"^\s*(?:\d+\t)?[\s#/*;=~_-]*$")
_BARE_WIDTH = 120  # a longer line counts as it is
_BARE_FREE = 8  # and so do those after this many in the head or in the tail
_MAX_LINE = 400  # a kept line longer than this is itself cut in the middle
_KEPT_LINE = 240  # a line kept for what it says is cut beyond this
_NEIGHBOURS = 2  # lines kept on each side of a line the checkpoint is about
_ONE_LINE_CUT = "[... 1 line cut ...]"


# An output is shortened again at every checkpoint of its thread, at several detail levels and
# with a focus that grows with the thread; which of its lines match a pattern depends on
# neither, so it is found once per output (a long live session would otherwise search every
# earlier output again at each new event).
@text_cache(16384)
def _matching_lines(text: str, pattern: re.Pattern[str]) -> tuple[int, ...]:
    """Return the numbers of the lines of `text` that match `pattern`, last first."""
    found: list[int] = []
    line_no, pos = 0, 0
    for m in pattern.finditer(text):
        line_no += text.count("\n", pos, m.start())
        pos = m.start()
        if not found or found[-1] != line_no:
            found.append(line_no)
    return tuple(found[::-1])


def _focus_lines(lines: list[str], focus: tuple[str, ...]) -> list[int]:
    """Return the lines that contain one of the `focus` strings, each with its neighbours."""
    text = "\n".join(lines)
    starts = [0]
    for line in lines[:-1]:
        starts.append(starts[-1] + len(line) + 1)
    hits: set[int] = set()
    for f in focus:
        if "\n" in f:
            continue  # no single line holds it
        at = text.find(f)
        while at >= 0:
            i = bisect.bisect_right(starts, at) - 1
            hits.add(i)
            at = text.find(f, starts[i + 1]) if i + 1 < len(lines) else -1
    near: list[int] = []
    for i in sorted(hits):
        near += range(max(i - _NEIGHBOURS, 0), min(i + _NEIGHBOURS + 1, len(lines)))
    return list(dict.fromkeys(near))


def _cut_line(line: str, limit: int) -> str:
    half = max(limit // 2, 20)
    cut = len(line) - 2 * half
    # A cut no longer than the marker that says so would make the line longer: kept whole.
    if len(line) <= limit or cut <= len(f" [... {cut} chars cut ...] "):
        return line
    return f"{line[:half]} [... {cut} chars cut ...] {line[-half:]}"


@text_cache(16384)  # the same outputs are shortened again at every checkpoint
def abbreviate(
    text: str, limit: int, keep: re.Pattern[str] = FAILURE, focus: tuple[str, ...] = ()
) -> str:
    """Shorten `text` to about `limit` characters: the lines that decide first, then head and tail.

    Up to half the limit goes to chosen lines, in this order: lines matching `keep` (for a
    command's output, FAILURE: its summary lines first, those reporting a failure before the
    others, then its failures; a summary line in the head or the tail is not cut to their
    width either), then the lines
    around one that contains a `focus` string (what the checkpoint is about: a name the user or
    the agent quoted, a line the agent went on to replace), then a command's outcome lines and
    words of success; within a group the latest first, since a command's last words say how it
    ended. What the limit has left goes to the head and the tail. Every stretch that was cut
    leaves a `[... N lines cut ...]` marker.
    """
    if len(text) <= limit:
        return text
    lines = text.split("\n")
    if len(lines) == 1:
        return _cut_line(text, limit)
    line_cap = max(min(_MAX_LINE, limit // 2), 40)
    chosen: set[int] = set()
    budget = max(limit // 2, 120)
    first = (_DECISIVE, keep) if keep is FAILURE else (keep,)
    groups: list[Sequence[int]] = [_matching_lines(text, pattern) for pattern in first]
    if keep is FAILURE:  # a summary that reports a failure goes before one that does not
        failing = set(groups[1])
        groups[0] = sorted(groups[0], key=lambda i: i not in failing)
    if focus:
        groups.append(_focus_lines(lines, focus))
    if keep is FAILURE:
        groups += [_matching_lines(text, pattern) for pattern in (_OUTCOME, _SUCCESS)]
    # A decisive line shown as part of the head or the tail is not cut to their width either.
    decisive = set(groups[0]) if keep is FAILURE else set()
    for group in groups:
        for line_no in group:
            if line_no in chosen:
                continue
            cost = min(len(lines[line_no]), _KEPT_LINE) + 1
            if budget - cost < 0:
                break
            budget -= cost
            chosen.add(line_no)
    # Head and tail share what is left of the limit, each at least 40 characters.
    used = sum(min(len(lines[i]), _KEPT_LINE) + 1 for i in chosen)
    ends = max((limit - used) // 2, 40)
    ends = min(ends, max(limit * 2 // 5, 40))

    def width(line: str, bare: int) -> int:
        if bare < _BARE_FREE and len(line) <= _BARE_WIDTH and _BARE.match(line):
            return 1
        return min(len(line), line_cap) + 1

    head: list[int] = []
    spent = bare = 0
    for i, line in enumerate(lines):
        cost = width(line, bare)
        if head and spent + cost > ends:
            break
        head.append(i)
        spent += cost
        bare += cost == 1
    tail: list[int] = []
    spent = bare = 0
    for i in range(len(lines) - 1, head[-1], -1):
        cost = width(lines[i], bare)
        if tail and spent + cost > ends:
            break
        tail.append(i)
        spent += cost
        bare += cost == 1
    out: list[str] = []
    previous = -1
    shown = set(head) | set(tail) | chosen
    # A lone line no longer than the marker that would stand for it is shown instead.
    for i, line in enumerate(lines):
        if i not in shown and i - 1 in shown and i + 1 in shown | {len(lines)}:
            if len(line) <= len(_ONE_LINE_CUT):
                shown.add(i)
    for i in sorted(shown):
        if i - previous > 1:
            gap = i - previous - 1
            out.append(_ONE_LINE_CUT if gap == 1 else f"[... {gap} lines cut ...]")
        out.append(_cut_line(lines[i], _KEPT_LINE if i in chosen or i in decisive else line_cap))
        previous = i
    if previous < len(lines) - 1:
        gap = len(lines) - 1 - previous
        out.append(_ONE_LINE_CUT if gap == 1 else f"[... {gap} lines cut ...]")
    return "\n".join(out)


@text_cache(16384)  # a thread's messages are quoted again at every checkpoint
def quote(text: str) -> str:
    """Quote transcript text: every line gets `> ` in front (a blank line, `>` alone).

    What a person or the agent wrote never starts a line of the prompt, so no heading, closing
    line or correction in it can pass for the prompt's own structure. Every kind of line break
    counts (`\\r`, `\\u2028`...), since a model may read any of them as one.
    """
    return "\n".join(f"> {line}" if line.strip() else ">" for line in text.splitlines() or [""])


def fence(body: str) -> str:
    ticks = "```"
    if "```" in body:
        ticks = "`" * (max(len(run) for run in re.findall(r"`{3,}", body)) + 1)
    return f"{ticks}\n{body}\n{ticks}"


# -- detail levels ---------------------------------------------------------------------------------
# Compared by identity (there are only LEVELS and UNCUT): a level is part of the key of every
# rendering kept between checkpoints, and hashing its fields each time cost more than the lookup.
@dataclass(frozen=True, eq=False)
class Level:
    result: int  # characters kept of a tool result
    value: int  # characters kept of one tool-input value
    command: int  # characters kept of a command
    text: int | None  # characters kept of the agent's (non-final) text; None: all
    note: int  # characters kept of harness notes, command output and summaries


# A tool call gives up its output first (levels 1-2 cut results only), then its input; the
# agent's prose keeps all its text until level 3.
LEVELS = (
    Level(result=3000, value=1200, command=1200, text=None, note=1500),
    Level(result=1200, value=1200, command=1200, text=None, note=600),
    Level(result=400, value=1200, command=1200, text=None, note=300),
    Level(result=240, value=500, command=600, text=1500, note=200),
    Level(result=160, value=200, command=400, text=400, note=120),
)
RESULTS_ONLY = 3  # levels below this one cut tool results and nothing else
UNCUT = Level(result=2**31, value=2**31, command=2**31, text=None, note=2**31)  # level -1
# Level -2: what the agent wrote (a tool call's input) whole, everything else as at level 0.
WRITTEN = Level(result=LEVELS[0].result, value=2**31, command=2**31, text=None, note=LEVELS[0].note)


# Input keys shown in full (paths) or with a larger allowance (commands) at every level.
PATH_KEYS = frozenset(
    [
        "file_path",
        "path",
        "paths",
        "notebook_path",
        "filePath",
        "file",
        "filename",
        "target_file",
        "cwd",
        "workdir",
        "directory",
        "dir",
        "url",
    ]
)
COMMAND_KEYS = frozenset(("command", "cmd", "script", "commands"))
RUN_IN = frozenset(("workdir", "cwd"))  # the directory a command runs in


def value_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:  # e.g. an integer wider than 64 bits
        return str(value)


def _todos(value: Any) -> str | None:
    if not (
        isinstance(value, list)
        and value
        and all(isinstance(t, dict) and "content" in t for t in value)
    ):
        return None
    marks = {"completed": "[x]", "in_progress": "[~]"}
    return "\n".join(f"{marks.get(t.get('status'), '[ ]')} {t.get('content')}" for t in value)


def render_tool_input(
    tool_input: Any, level: Level, focus: tuple[str, ...] = (), cwd: str | None = None
) -> str:
    """Render a tool call's input as `key: value` lines, abbreviated to `level`.

    A long value keeps the lines naming files of a patch first, then those around a `focus`
    string (what the checkpoint is about), then its head and tail. A directory to run in that
    is `cwd`, the session's own (which the prompt's header names), is left out, and so is a
    value that says nothing: empty, or a flag left off (`replace_all: false` with every edit
    Claude Code makes).
    """
    if tool_input is None or tool_input == {}:
        return ""
    if not isinstance(tool_input, dict):
        return abbreviate(clean(value_text(tool_input)), level.command, _FILE_HEADER, focus)
    out: list[str] = []
    for key, value in tool_input.items():
        if value is None or value is False or value in ("", []) or (key in RUN_IN and value == cwd):
            continue
        if (
            key in COMMAND_KEYS
            and isinstance(value, list)
            and all(isinstance(v, str) for v in value)
        ):
            value = shlex.join(value)  # argv lists (Codex `shell`) read as one shell line
        todos = _todos(value) if key == "todos" else None
        if todos is not None:
            text, limit = clean(todos), level.value * 2
        else:
            text = clean(value_text(value))
            limit = (
                600 if key in PATH_KEYS else level.command if key in COMMAND_KEYS else level.value
            )
        text = abbreviate(text, limit, _FILE_HEADER, focus)
        if "\n" in text:
            out.append(f"{key}:\n" + "\n".join("  " + line for line in text.split("\n")))
        else:
            out.append(f"{key}: {text}")
    return "\n".join(out)
