"""Which Claude Code tool calls change files, and which files.

Structured edit tools (`Edit`, `Write`, `MultiEdit`, `NotebookEdit`, file-writing MCP tools) name
their file in the input. `Bash` commands are read with a small shell tokenizer that is deliberately
conservative: only `sed -i`/`perl -i`, `tee`, stdout redirections to a file (`>`, `>>`, `&>`),
`git apply` and `patch` count. Redirections of stderr or to `/dev/null`, quoted text and heredoc
bodies do not.
"""

from __future__ import annotations

import re
from typing import Any

# Tool name -> input key naming the edited file.
EDIT_TOOLS = {
    "Edit": "file_path",
    "Write": "file_path",
    "MultiEdit": "file_path",
    "NotebookEdit": "notebook_path",
}
# MCP tools (mcp__<server>__<tool>) whose tool part writes files.
MCP_EDIT_TOOLS = ("create_or_update_file", "push_files", "write_file", "edit_file", "create_file")
MAX_PATHS = 20

# Cheap pre-filter: a command without any of these cannot be an edit.
_BASH_HINTS = (">", "sed", "tee", "apply", "patch", "perl")
_NOT_FILES = {"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty", "-"}
_HEREDOC = re.compile(r"(?<!<)<<-?(?!<)\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1")
# Shell tokens: operators (redirections with an optional fd, heredoc, separators) or words made
# of plain characters, escapes and quoted strings.
_TOKEN = re.compile(
    r"""(?P<op>\d*(?:>>|>\||>&|>)|&>>?|<<<|<<-?|<&|<|&&|\|\||[;&|()\n])"""
    r"""|(?P<word>(?:[^\s'"\\;&|<>()]|\\.|'[^']*'|"(?:\\.|[^"\\])*")+)""",
    re.DOTALL,
)
_UNQUOTE = re.compile(r"""\\(.)|'([^']*)'|"((?:\\.|[^"\\])*)\"""", re.DOTALL)
_PREFIX_COMMANDS = {"sudo", "command", "env", "time", "nohup", "exec", "builtin", "xargs", "doas"}


def tool_edits(name: str | None, tool_input: Any) -> tuple[bool, list[str] | None]:
    """Return (is_file_edit, edited paths or None) for one tool call."""
    if not isinstance(name, str) or not isinstance(tool_input, dict):
        return False, None
    key = EDIT_TOOLS.get(name)
    if key is not None:
        path = tool_input.get(key)
        return True, [path] if isinstance(path, str) and path else None
    if name == "Bash":
        command = tool_input.get("command")
        if isinstance(command, str):
            return bash_edits(command)
        return False, None
    if name.startswith("mcp__") and name.rsplit("__", 1)[-1] in MCP_EDIT_TOOLS:
        paths = []
        path = tool_input.get("path") or tool_input.get("file_path")
        if isinstance(path, str) and path:
            paths.append(path)
        files = tool_input.get("files")
        if isinstance(files, list):
            paths.extend(
                f["path"] for f in files if isinstance(f, dict) and isinstance(f.get("path"), str)
            )
        return True, paths[:MAX_PATHS] or None
    return False, None


def _strip_heredoc_bodies(command: str) -> str:
    """Drop the bodies of heredocs, which are data and not shell syntax."""
    lines = command.split("\n")
    out: list[str] = []
    pending: list[str] = []
    for line in lines:
        if pending:
            body_line = line.strip()
            if body_line == pending[0]:
                pending.pop(0)
            continue
        out.append(line)
        if "<<" in line:
            pending.extend(m.group(2) for m in _HEREDOC.finditer(line))
    return "\n".join(out)


def _unquote(word: str) -> str:
    if "'" not in word and '"' not in word and "\\" not in word:
        return word
    return _UNQUOTE.sub(lambda m: m.group(1) or m.group(2) or m.group(3) or "", word)


def _files_after_script(args: list[str], script_opts: tuple[str, ...]) -> list[str]:
    """For `sed`/`perl` arguments: the operands after the script (the edited files)."""
    files: list[str] = []
    script_given = False
    skip_next = False
    for i, arg in enumerate(args):
        if skip_next:
            skip_next = False
            continue
        if arg.startswith("-") and arg != "-":
            if arg in script_opts or arg.startswith(("--expression", "--file")):
                script_given = True
                skip_next = "=" not in arg
            elif (
                arg.startswith("-") and not arg.startswith("--") and arg[-1] in "ef" and "i" in arg
            ):
                # Combined flags such as `-pie` or `-ie`: the script follows.
                script_given = True
                skip_next = True
            elif arg in ("-i", "--in-place") and i + 1 < len(args) and args[i + 1] == "":
                skip_next = True  # BSD sed: `-i ''`
            continue
        if not script_given:
            script_given = True  # the first operand is the script
            continue
        files.append(arg)
    return files


def _in_place(args: list[str]) -> bool:
    for arg in args:
        if arg.startswith("--in-place"):
            return True
        if arg.startswith("-") and not arg.startswith("--") and "i" in arg[1:].split(".", 1)[0]:
            # -i, -i.bak, -pi, -ni, -Ei (but not -e/-f scripts, which hold no "i" before them)
            return True
    return False


def _git_subcommand(args: list[str]) -> str | None:
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg in ("-C", "-c", "--git-dir", "--work-tree", "--namespace"):
            skip = True
        elif not arg.startswith("-"):
            return arg
    return None


def _segment_edits(words: list[str]) -> tuple[bool, list[str]]:
    """Look at one simple command (its words, redirections removed)."""
    i = 0
    while i < len(words) and (
        "=" in words[i].split("/", 1)[0]
        and not words[i].startswith("-")
        or words[i] in _PREFIX_COMMANDS
    ):
        i += 1
        # Options of the prefix command (`sudo -u x`, `xargs -0`) are skipped with it.
        while i < len(words) and words[i].startswith("-") and words[i - 1] in _PREFIX_COMMANDS:
            i += 1
    if i >= len(words):
        return False, []
    cmd = words[i].rsplit("/", 1)[-1]
    args = words[i + 1 :]
    if cmd in ("sed", "gsed", "perl"):
        if _in_place(args):
            opts = ("-e", "-f") if cmd != "perl" else ("-e", "-E")
            return True, _files_after_script(args, opts)
        return False, []
    if cmd == "tee":
        return True, [a for a in args if not a.startswith("-") and a not in _NOT_FILES]
    if cmd == "git" and _git_subcommand(args) == "apply":
        if "--check" in args or "--stat" in args or "--numstat" in args:
            return False, []
        return True, []
    if cmd == "patch":
        if "--dry-run" in args:
            return False, []
        return True, []
    return False, []


def bash_edits(command: str) -> tuple[bool, list[str] | None]:
    """Return (is_file_edit, paths or None) for a shell command."""
    if not any(h in command for h in _BASH_HINTS):
        return False, None
    if "<<" in command:
        command = _strip_heredoc_bodies(command)
    edited = False
    paths: list[str] = []
    words: list[str] = []
    tokens = _TOKEN.finditer(command)
    for m in tokens:
        op = m.group("op")
        if op is None:
            word = m.group("word")
            if word[0] == "#":  # a comment runs to the end of the line
                for m2 in tokens:
                    if m2.group("op") == "\n":
                        break
                continue
            words.append(_unquote(word))
            continue
        if op.endswith((">", ">|", ">&")):
            fd = op.rstrip(">|&")
            target_m = next(tokens, None)
            target = (
                _unquote(target_m.group("word")) if target_m and target_m.group("word") else None
            )
            if fd.startswith("&"):
                fd = ""  # &> and &>>: stdout and stderr to a file
            if fd not in ("", "1") or target is None:
                continue
            if op.endswith(">&") and (target.isdigit() or target == "-"):
                continue  # >&2: duplicating a descriptor
            if target in _NOT_FILES or target.startswith("/dev/fd/"):
                continue
            edited = True
            paths.append(target)
            continue
        if op in ("<", "<<<", "<&"):
            next(tokens, None)  # the input file or string is not a command word
            continue
        if op.startswith("<<"):
            next(tokens, None)  # heredoc delimiter
            continue
        # A separator ends the simple command.
        if words:
            seg_edit, seg_paths = _segment_edits(words)
            edited = edited or seg_edit
            paths.extend(seg_paths)
            words = []
    if words:
        seg_edit, seg_paths = _segment_edits(words)
        edited = edited or seg_edit
        paths.extend(seg_paths)
    if not edited:
        return False, None
    seen: list[str] = []
    for p in paths:
        if p and p not in seen:
            seen.append(p)
    return True, seen[:MAX_PATHS] or None
