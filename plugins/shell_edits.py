"""Which shell commands change files, and which files: one rule set for every agent.

Claude Code's `Bash`, Codex's `shell`/`exec_command` (an argv list or a `bash -lc` script), the
command items of `codex exec --json` and the shell tools of OpenAI-style chat logs all come
here. The reading is deliberately conservative (best effort, no false alarms on reads):

* an edit: output redirections to a file (`>`, `>>`, `>|`, `&>`), `tee FILE`, `sed -i`,
  `perl -i`, `apply_patch` (argv or heredoc, with the files its patch names), `git apply` and
  `patch` (whose files are in the patch, so none are named);
* not an edit: stderr redirections and descriptor copies (`2>&1`, `>&2`), targets in scratch
  places (`/dev/...`, `/proc/...`, temporary directories), quoted text, comments, heredoc
  bodies, `git apply --check`/`--stat`, `patch --dry-run`, and commands whose writes cannot
  be seen from the command line (`mv`, `cp`, `python - <<EOF`).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

MAX_PATHS = 20

# Cheap pre-filter: a command without any of these cannot be an edit...
_HINTS = (">", "sed", "tee", "perl", "apply", "patch")
# ...once these redirections, never an edit, are left out: stderr sent to stdout (its `2` a word
# of its own: in `x2>&1y` the word is `x2` and the output goes to the file `1y`), and output sent
# to /dev/null (a third of the shell commands agents run have one of them).
_NO_EDITS = (" 2>&1", ">/dev/null")
_SHELLS = {"bash", "sh", "zsh", "dash", "ksh", "fish"}
# Where writing is not editing the project: devices, process files, temporary directories.
_SCRATCH = ("/dev/", "/proc/", "/tmp/", "/var/tmp/", "$TMPDIR/", "${TMPDIR}/")
_NOT_FILES = {"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty", "-"}
_PATCH_LINE = re.compile(r"^\*\*\* (?:(?:Add|Update|Delete) File|Move to): (.+?)\s*$", re.MULTILINE)
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


def patch_paths(patch: str) -> list[str]:
    """The files an `*** Begin Patch` envelope adds, updates, deletes or moves to."""
    return list(dict.fromkeys(m.group(1).strip() for m in _PATCH_LINE.finditer(patch)))


def shell_edits(command: str | list) -> tuple[bool, list[str] | None]:
    """Return (is_file_edit, edited paths or None) for a shell command string or argv list."""
    raw = command if isinstance(command, str) else " ".join(map(str, command))
    if ">" in raw:
        for redirect in _NO_EDITS:
            raw = raw.replace(redirect, " ")
    if not any(h in raw for h in _HINTS):
        return False, None  # the common case, decided without tokenising
    script, patch = _script(command)
    if patch is not None:
        return True, patch_paths(patch)[:MAX_PATHS] or None
    if not script:
        return False, None
    if "*** Begin Patch" in script and ("apply_patch" in script or "applypatch" in script):
        return True, patch_paths(script)[:MAX_PATHS] or None
    return _script_edits(script)


def _script(command: str | list) -> tuple[str | None, str | None]:
    """Return (shell script, apply_patch argument) for a command string or argv list."""
    if isinstance(command, list):
        argv = [str(a) for a in command]
        if not argv:
            return None, None
        if argv[0] in ("apply_patch", "applypatch") and len(argv) > 1:
            return None, argv[1]
        if _is_shell_c(argv) and len(argv) >= 3:
            return argv[2], None
        return shlex.join(argv), None
    first = command.lstrip().split(None, 1)[0] if command.strip() else ""
    if Path(first).name not in _SHELLS:
        return command, None
    try:
        argv = shlex.split(command)
    except ValueError:
        return command, None
    return (argv[2], None) if len(argv) == 3 and _is_shell_c(argv) else (command, None)


def _is_shell_c(argv: list[str]) -> bool:
    """`bash -c SCRIPT`, `bash -lc SCRIPT`..."""
    return (
        Path(argv[0]).name in _SHELLS
        and len(argv) > 1
        and argv[1].startswith("-")
        and ("c" in argv[1])
    )


def _is_scratch(target: str) -> bool:
    return target in _NOT_FILES or target.startswith(_SCRATCH)


def _strip_heredoc_bodies(command: str) -> str:
    """Drop the bodies of heredocs, which are data and not shell syntax."""
    out: list[str] = []
    pending: list[str] = []
    for line in command.split("\n"):
        if pending:
            if line.strip() == pending[0]:
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


def _script_edits(script: str) -> tuple[bool, list[str] | None]:
    if "<<" in script:
        script = _strip_heredoc_bodies(script)
    edited = False
    paths: list[str] = []
    words: list[str] = []
    tokens = _TOKEN.finditer(script)
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
            if not _is_scratch(target):
                edited = True
                paths.append(target)
            continue
        if op in ("<", "<<<", "<&") or op.startswith("<<"):
            next(tokens, None)  # the input file, string or heredoc delimiter is not a command word
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
    return True, list(dict.fromkeys(p for p in paths if p))[:MAX_PATHS] or None


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
        if not _in_place(args):
            return False, []
        opts = ("-e", "-f") if cmd != "perl" else ("-e", "-E")
        files = [f for f in _files_after_script(args, opts) if not _is_scratch(f)]
        return bool(files), files
    if cmd == "tee":
        files = [a for a in args if not a.startswith("-") and not _is_scratch(a)]
        return bool(files), files
    if cmd in ("apply_patch", "applypatch"):
        return True, []
    if cmd == "git" and _git_subcommand(args) == "apply":
        return not {"--check", "--stat", "--numstat", "--summary"} & set(args), []
    if cmd == "patch":
        return "--dry-run" not in args, []
    return False, []
