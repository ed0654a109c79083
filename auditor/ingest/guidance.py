"""The instruction files an agent was given (CLAUDE.md, AGENTS.md...), found and kept.

An observer can only hold an agent to its project's rules if it sees them. They come from
three places:

- **disk**: in the thread's working directory and each parent up to the repository root (the
  first directory holding `.git`; outside a repository, up to the home directory or the
  filesystem root), the files `CLAUDE.md`, `.claude/CLAUDE.md`, `CLAUDE.local.md` and
  `AGENTS.md`, and the user's own file of the agent (`~/.claude/CLAUDE.md`,
  `~/.codex/AGENTS.md`). `@path` imports in a CLAUDE file are followed, as Claude Code does.
  Read where the directory exists: at ingest, and always by the Stop hook, which runs where the
  agent works. An old session must be judged against the rules it had, not today's: inside a
  git repository, a file the repository tracks is taken as it was committed when the session
  started (origin `git`; a file added later is left out), and only the others (untracked, the
  user's own, outside a repository) are today's. The formatter says so of a file read after the
  checkpoint (`for_checkpoint`).
- **read**: the agent read one of these files itself, with a tool call (Claude Code's `Read`,
  `cat` / `sed -n` / `head` / `nl` in a shell). Its result is what the agent saw. A read of a
  file the agent had already changed in the same thread is its own work, not guidance, and is
  left out.
- **the transcript's own record**: Codex's `AGENTS.md` instructions, Claude Code's injected
  CLAUDE.md and Amp's AGENTS.md entries that carry their text are parsed by their formats into
  `threads.guidance`. Amp entries that only name a file (`meta["guidance_paths"]`) are read
  from disk where they are.

The first two are kept in `guidance_files` with their sha256 and when they were read (a file
that changed gets a row per version). `for_checkpoint` gives the formatter what applies at a
checkpoint: the transcript's record, the disk files, and the agent's reads made up to it.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import subprocess
from collections.abc import Collection, Iterable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

import orjson

from ..store.guidance_texts import DISK, GIT, READ, TRANSCRIPT, GuidanceText
from ..store.sql_text import DriverSql, marks, read_json, read_time, stored_time

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from ..store.threads import StoredThread

# In each directory, in the order they are shown.
NAMES = ("CLAUDE.md", ".claude/CLAUDE.md", "CLAUDE.local.md", "AGENTS.md")
BASENAMES = frozenset(PurePosixPath(n).name for n in NAMES)
# The user's own instructions, by agent.
USER_FILES = {"claude-code": ("~/.claude/CLAUDE.md",), "codex": ("~/.codex/AGENTS.md",)}
MAX_BYTES = 256 * 1024  # read at most this much of one file
MAX_IMPORT_DEPTH = 5  # Claude Code follows `@path` imports this deep
MAX_IMPORTS = 20


# -- disk ------------------------------------------------------------------------------------
def _read(path: Path) -> str | None:
    """The text of a regular file (its head when it is large), or None."""
    try:
        if not path.is_file():
            return None
        with open(path, "rb") as fh:
            data = fh.read(MAX_BYTES)
    except OSError:
        return None
    if b"\0" in data:
        return None
    text = data.decode("utf-8", "replace")
    return text if text.strip() else None


def _directories(cwd: Path, home: Path | None) -> list[Path]:
    """`cwd` and its parents up to the repository root (or home, or /), outermost first."""
    out = []
    for d in (cwd, *cwd.parents):
        out.append(d)
        if (d / ".git").exists() or d == home:
            break
    return out[::-1]


_FENCE = re.compile(r"^\s*(```|~~~)")
_IMPORT = re.compile(r"(?:^|(?<=\s))@((?:~/|\.{0,2}/)?[\w.\-/]+\.md)\b")


def _imports(text: str, base: Path, home: Path | None) -> list[Path]:
    """The files a CLAUDE file imports with `@path` (outside code), as paths."""
    out, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        for m in _IMPORT.finditer(re.sub(r"`[^`]*`", "", line)):
            ref = m.group(1)
            if ref.startswith("~/"):
                if home is None:
                    continue
                out.append(home / ref[2:])
            else:
                out.append(base / ref)
    return out


GIT_TIMEOUT = 10.0  # seconds one git command may take


class _History:
    """A repository's files as committed at a moment: the last commit before it on HEAD."""

    def __init__(self, root: Path, as_of: datetime):
        self.root = root
        when = as_of if as_of.tzinfo else as_of.replace(tzinfo=UTC)
        found = self._git("log", "-1", "--format=%H %cI", f"--before={when.isoformat()}", "HEAD")
        commit, _, date = (found or "").strip().partition(" ")
        self.commit = commit or None
        self.committed = datetime.fromisoformat(date) if date else None

    def _git(self, *args: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", "-C", str(self.root), *args],
                capture_output=True,
                timeout=GIT_TIMEOUT,
                check=False,
            )
        except (OSError, subprocess.SubprocessError):
            return None  # no git here, or it hangs: today's files are what there is
        if done.returncode != 0:
            return None
        return done.stdout[:MAX_BYTES].decode("utf-8", "replace")

    def version(self, path: Path) -> tuple[str, str | None]:
        """("committed", text), ("absent", None) for a file the repository got only later, or
        ("untracked", None) when history cannot say (untracked, or outside the repository)."""
        try:
            rel = path.resolve().relative_to(self.root.resolve()).as_posix()
        except (OSError, ValueError):
            return "untracked", None
        if self.commit is None:
            return "untracked", None
        text = self._git("show", f"{self.commit}:{rel}")
        if text is not None:
            return "committed", text if text.strip() else None
        if self._git("log", "-1", "--format=%H", "HEAD", "--", rel):
            return "absent", None  # committed after the session started
        return "untracked", None


def discover(
    cwd: str | os.PathLike | None,
    agent: str | None = None,
    home: str | os.PathLike | None = None,
    as_of: datetime | None = None,
) -> list[GuidanceText]:
    """The instruction files that apply in `cwd` (none if it is not there).

    The user's own file comes first, then each directory from the repository root down to
    `cwd`; a file's imports follow it. `home` defaults to the current user's. With `as_of`
    (when the session started) and `cwd` in a git repository, a file the repository tracks is
    its version committed by then (origin `git`), and one committed only later is left out;
    the other files are read from disk now.
    """
    if not cwd:
        return []
    here = Path(cwd).expanduser()
    if not here.is_absolute() or not here.is_dir():
        return []
    home_dir = Path(home).expanduser() if home else Path.home()
    candidates = [home_dir / f[2:] for f in USER_FILES.get(agent or "", ())]
    directories = _directories(here, home_dir)
    for d in directories:
        candidates += [d / name for name in NAMES]
    history = None
    if as_of is not None and (directories[0] / ".git").exists():
        history = _History(directories[0], as_of)
    now = datetime.now(UTC)
    out: list[GuidanceText] = []
    seen: set[str] = set()

    def version(path: Path) -> GuidanceText | None:
        key = os.path.normpath(path)
        if history is not None:
            state, text = history.version(path)
            if state == "committed":
                return GuidanceText(key, text, GIT, history.committed) if text else None
            if state == "absent":
                return None
        text = _read(path)
        return GuidanceText(key, text, DISK, now) if text is not None else None

    def visit(path: Path, depth: int) -> None:
        key = os.path.normpath(path)
        if key in seen or len(seen) >= len(candidates) + MAX_IMPORTS:
            return
        found = version(path)
        if found is None:
            return
        text = found.text
        seen.add(key)
        out.append(found)
        if depth < MAX_IMPORT_DEPTH and path.name.startswith("CLAUDE"):
            for ref in _imports(text, path.parent, home_dir):
                visit(ref, depth + 1)

    for path in candidates:
        visit(path, 0)
    return out


def read_paths(paths: Iterable[Any]) -> list[GuidanceText]:
    """The files at `paths` (absolute, as a transcript names them) that are here to read."""
    now, out = datetime.now(UTC), []
    for p in paths:
        if isinstance(p, str) and os.path.isabs(p):
            text = _read(Path(p))
            if text is not None:
                out.append(GuidanceText(os.path.normpath(p), text, DISK, now))
    return out


# -- the agent's own reads -------------------------------------------------------------------
READ_TOOLS = frozenset({"read", "read_file", "readfile", "view"})
SHELL_TOOLS = frozenset(
    {
        "bash",
        "shell",
        "shell_command",
        "exec_command",
        "local_shell",
        "run_shell_command",
        "run_terminal_cmd",
    }
)
SHELLS = frozenset({"bash", "sh", "zsh", "dash", "fish"})
PRINTERS = frozenset({"cat", "head", "nl", "sed", "bat", "less", "more"})
_LINE_NUMBER = re.compile(r"^ *\d+(?:→|\t)", re.MULTILINE)
_REMINDER = re.compile(r"\s*<system-reminder>.*?</system-reminder>\s*", re.DOTALL)
_HEADER_LINE = re.compile(r"^[A-Z][A-Za-z ]{1,30}: .*$")


def _shell_words(command: Any) -> list[str] | None:
    """The words of a single simple command (`sh -lc SCRIPT` unwrapped), or None."""
    if isinstance(command, list) and all(isinstance(w, str) for w in command):
        if (
            len(command) == 3
            and PurePosixPath(command[0]).name in SHELLS
            and command[1] in ("-lc", "-c")
        ):
            command = command[2]
        else:
            return command
    if not isinstance(command, str):
        return None
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        words = list(lexer)
    except ValueError:
        return None
    if any(w and set(w) <= set("();<>|&") for w in words):
        return None  # a pipeline, a list or a redirection: its output is not the file's
    return words


def _printed_file(words: list[str]) -> str | None:
    """The one file a `cat`/`sed -n`/`head`/`nl` command prints, when it prints one."""
    if not words or PurePosixPath(words[0]).name not in PRINTERS:
        return None
    rest = words[1:]
    if PurePosixPath(words[0]).name == "sed":
        if "-n" not in rest:
            return None
        rest = [w for w in rest if not re.fullmatch(r"\d+(,(\d+|\$))?p", w)]
    files = [w for w in rest if not w.startswith("-") and not w.isdigit()]
    return files[0] if len(files) == 1 else None


def _clean_output(text: str, numbered: bool) -> str:
    text = _REMINDER.sub("\n", text).strip("\n")
    lines = text.split("\n")
    # A shell result may start with `Exit code: 0` / `Wall time: ...` lines and `Output:`.
    if lines and _HEADER_LINE.match(lines[0]) and "Output:" in lines[:8]:
        text = "\n".join(lines[lines.index("Output:") + 1 :])
    if numbered:
        body = [ln for ln in text.split("\n") if ln.strip()]
        if body and all(_LINE_NUMBER.match(ln) for ln in body):
            text = _LINE_NUMBER.sub("", text)
    return text


def read_by_call(
    name: str | None, tool_input: Any, result: str | None, cwd: str | None = None
) -> tuple[str, str] | None:
    """(path, text) when a tool call printed a whole instruction file, else None.

    `result` is the call's output; a relative path is taken against the call's own working
    directory (`workdir`) or `cwd`.
    """
    if not name or not isinstance(tool_input, dict) or not result:
        return None
    tool = name.lower()
    if tool in READ_TOOLS:
        path = next(
            (
                tool_input[k]
                for k in ("file_path", "path", "absolute_path", "filePath")
                if isinstance(tool_input.get(k), str)
            ),
            None,
        )
        numbered = True
    elif tool in SHELL_TOOLS:
        words = _shell_words(tool_input.get("command", tool_input.get("cmd")))
        path = _printed_file(words) if words else None
        numbered = bool(words and PurePosixPath(words[0]).name == "nl")
    else:
        return None
    if not path or PurePosixPath(path.replace("\\", "/")).name not in BASENAMES:
        return None
    workdir = (
        next(
            (
                tool_input[k]
                for k in ("workdir", "cwd", "directory")
                if isinstance(tool_input.get(k), str)
            ),
            None,
        )
        or cwd
    )
    if not path.startswith(("/", "~")) and workdir:
        path = os.path.join(workdir, path)
    text = _clean_output(result, numbered)
    return (os.path.normpath(path), text) if text.strip() else None


def _block(blocks: Iterable[dict] | None, kind: str, call_id: str) -> dict | None:
    return next(
        (b for b in blocks or () if b.get("kind") == kind and b.get("tool_use_id") == call_id), None
    )


def reads_in_threads(
    conn: Connection,
    cwds: dict[int, str | None],
    since_message: int = 0,
    named: Collection[tuple[int, str]] | None = None,
    answered: Collection[tuple[int, str]] | None = None,
) -> dict[int, list[GuidanceText]]:
    """The instruction files the agent of each thread (id -> its cwd) read with its tool calls,
    results stored after row `since_message` of `messages` (all when 0), leaving out files it
    had changed before reading them.

    `named`, on SQLite: the (thread id, native id) of the messages stored after that row whose
    text names an instruction file, when the caller knows them all (ingest, which wrote them):
    the text of only the earlier messages is searched, those of the calls in `answered`
    ((thread id, call id): the calls whose results were stored after the row; with `named`,
    all of them)."""
    db, threads = DriverSql(conn), list(cwds)
    if named is not None and not db.sqlite:
        named = None  # the list is read with SQLite's json_each
    if named is not None:
        named = sorted({k for k in named if k[0] in cwds})
    if named is not None and not named and not since_message:
        return {}  # no message names a file
    listed = marks(len(threads))
    names = sorted(BASENAMES)
    naming = f"({' OR '.join(['CAST(m.blocks AS TEXT) LIKE ?'] * len(names))})"
    likes = [f"%{n}%" for n in names]
    cols = "SELECT m.id, m.thread_id, m.native_id, m.blocks"
    if named is not None:
        # SQLite, the new rows naming a file known: those rows, and the earlier calls a new
        # row answered, each found by its thread and id through a unique index: neither walks
        # the thread, however long (a live session's), nor tries every thread of a group
        # with every id (a cold ingest's).
        key = "json_extract(k.value, '$[0]')", "json_extract(k.value, '$[1]')"
        naming_rows = (
            f"{cols} FROM json_each(?) k JOIN messages m "
            f"ON m.thread_id = {key[0]} AND m.native_id = {key[1]} WHERE m.id > ? "
            f"UNION {cols} FROM json_each(?) k JOIN tool_calls tc "
            f"ON tc.thread_id = {key[0]} AND tc.call_id = {key[1]} "
            "JOIN messages m ON m.thread_id = tc.thread_id AND m.native_id = tc.call_message_id "
            f"WHERE m.id <= ? AND {naming}"
        )
        mine = sorted({k for k in answered or () if k[0] in cwds})
        params: list[Any] = [orjson.dumps(named).decode(), since_message]
        params += [orjson.dumps(mine).decode(), since_message, *likes]
    else:
        scope = f"m.thread_id IN ({listed})"
        params = [*threads]
        if since_message:
            # Only the calls stored after the row, and those whose result was: a thread's
            # earlier messages are not searched again at every ingest of its new tail.
            scope += (
                " AND (m.id > ? OR m.native_id IN (SELECT tc.call_message_id FROM tool_calls tc "
                "JOIN messages a ON a.thread_id = tc.thread_id "
                "AND a.native_id = tc.result_message_id "
                f"WHERE tc.thread_id IN ({listed}) AND a.id > ?))"
            )
            params += [since_message, *threads, since_message]
        naming_rows = f"{cols} FROM messages m WHERE {scope} AND {naming}"
        params += likes
    # The messages naming an instruction file, looked for once each (materialized: without it
    # PostgreSQL may scan every message's text again for every tool call).
    rows = db.all(
        f"WITH c AS MATERIALIZED ({naming_rows}) "
        "SELECT tc.thread_id, tc.call_id, tc.name, c.blocks, r.blocks, r.native_id, "
        "r.timestamp, r.seq FROM tool_calls tc "
        "JOIN c ON c.thread_id = tc.thread_id AND c.native_id = tc.call_message_id "
        "JOIN messages r ON r.thread_id = tc.thread_id AND r.native_id = tc.result_message_id "
        f"WHERE tc.thread_id IN ({listed}) AND (c.id > ? OR r.id > ?) "
        "AND (tc.is_error IS NULL OR tc.is_error = ?) ORDER BY tc.thread_id, r.seq",
        (
            *params,
            *threads,
            since_message,
            since_message,
            False,
        ),
    )
    found: dict[int, list[tuple[int, GuidanceText]]] = {}
    for thread_id, call_id, tool, call_blocks, result_blocks, native_id, when, seq in rows:
        use = _block(read_json(call_blocks), "tool_use", call_id)
        result = _block(read_json(result_blocks), "tool_result", call_id)
        if not use or not result or result.get("is_error"):
            continue
        name, tool_input = use.get("tool_name") or tool, use.get("tool_input")
        hit = read_by_call(name, tool_input, result.get("text"), cwds[thread_id])
        if hit:
            read_at = read_time(when) or datetime.now(UTC)
            text = GuidanceText(hit[0], hit[1], READ, read_at, native_id)
            found.setdefault(thread_id, []).append((seq, text))
    out = {}
    for thread_id, reads in found.items():
        edited = _edits(db, thread_id, cwds[thread_id])
        out[thread_id] = [
            g for seq, g in reads if not any(at < seq for at in edited.get(g.path, ()))
        ]
    return out


def _edits(db: DriverSql, thread_id: int, cwd: str | None) -> dict[str, list[int]]:
    """Path -> positions (message seq) of the thread's calls that changed it."""
    rows = db.all(
        "SELECT tc.edited_paths, m.seq FROM tool_calls tc "
        "JOIN messages m ON m.thread_id = tc.thread_id AND m.native_id = tc.call_message_id "
        "WHERE tc.thread_id = ? AND tc.is_file_edit = ?",
        (thread_id, True),
    )
    out: dict[str, list[int]] = {}
    for paths, seq in rows:
        for p in read_json(paths) or ():
            if isinstance(p, str):
                full = p if p.startswith(("/", "~")) or not cwd else os.path.join(cwd, p)
                out.setdefault(os.path.normpath(full), []).append(seq)
    return out


# -- the store -------------------------------------------------------------------------------
def store(conn: Connection, thread_id: int, texts: Iterable[GuidanceText]) -> int:
    """Keep `texts` for the thread (a version already kept stays as it was); return how many."""
    db = DriverSql(conn)
    rows = [
        (
            thread_id,
            g.path,
            g.origin,
            g.sha256,
            g.text,
            # As the engine wrote it: on SQLite the time as it reads, its zone left out.
            stored_time(_local(g.read_at or datetime.now(UTC), db.sqlite), db.sqlite),
            g.message_id,
        )
        for g in texts
    ]
    if not rows:
        return 0
    db.many(
        "INSERT INTO guidance_files (thread_id, path, origin, sha256, text, read_at, "
        "message_native_id) VALUES (?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (thread_id, path, sha256) DO NOTHING",
        rows,
    )
    return len(rows)


def _local(when: datetime, sqlite: bool) -> datetime:
    return when.replace(tzinfo=None) if sqlite else when


def collect(
    conn: Connection,
    thread_ids: Iterable[int],
    since_message: int = 0,
    named: Collection[tuple[int, str]] | None = None,
    answered: Collection[tuple[int, str]] | None = None,
) -> None:
    """Find and keep the guidance of `thread_ids`: the agent's reads in messages stored after
    row `since_message` (`named`, `answered`: see `reads_in_threads`), and the files on disk where the
    thread's directory exists."""
    db = DriverSql(conn)
    ids = sorted(set(thread_ids))
    on_disk: dict[tuple[str, str, datetime | None], list[GuidanceText]] = {}
    for i in range(0, len(ids), 500):
        chunk = ids[i : i + 500]
        threads = [
            (tid, agent, cwd, read_json(meta), read_time(started))
            for tid, agent, cwd, meta, started in db.all(
                "SELECT id, agent, cwd, meta, started_at FROM threads "
                f"WHERE id IN ({marks(len(chunk))})",
                chunk,
            )
        ]
        cwds = {tid: cwd for tid, _, cwd, _, _ in threads}
        reads = reads_in_threads(conn, cwds, since_message, named, answered)
        for tid, agent, cwd, meta, started in threads:
            texts = reads.get(tid, [])
            if cwd:
                key = (cwd, agent, started)
                if key not in on_disk:
                    on_disk[key] = discover(cwd, agent, as_of=started)
                texts = on_disk[key] + texts
            paths = (meta or {}).get("guidance_paths") if isinstance(meta, dict) else None
            store(conn, tid, read_paths(paths or []) + texts)


def collect_disk(conn: Connection, thread_id: int, cwd: str | None, agent: str | None) -> int:
    """Read the guidance in `cwd` from disk now and keep it for the thread."""
    return store(conn, thread_id, discover(cwd, agent))


# -- at a checkpoint -------------------------------------------------------------------------
def _same(text: str) -> str:
    return hashlib.sha256(" ".join(text.split()).encode()).hexdigest()


LATER_NOTE = "read after this moment, so the agent may have had another version"


def for_checkpoint(conn: Connection, thread: Any, messages: list) -> StoredThread:
    """`thread` (a row or a `StoredThread`) with the guidance known at the checkpoint that ends
    `messages`, in its `guidance_files`.

    First what the transcript recorded, then the files on disk or from the repository's
    history (of each path, the version last read or committed by the time of the checkpoint,
    else the first one read), then the files the agent read up to the checkpoint (of each path,
    its last read). The same text is shown once. A file read from disk only after the
    checkpoint carries a note saying the agent may have had another version.
    """
    from sqlalchemy import select

    from ..store import schema as s  # here: ingest collects guidance without the models
    from ..store.threads import StoredThread

    thread = StoredThread.of(thread)
    g = s.GuidanceFile
    rows = conn.execute(
        select(g.path, g.origin, g.text, g.read_at, g.message_native_id)
        .where(g.thread_id == thread.id)
        .order_by(g.id)
    ).all()
    recorded = thread.guidance or {}
    files = [
        GuidanceText(name, text, TRANSCRIPT)
        for name, text in recorded.items()
        if isinstance(text, str) and text.strip()
    ]
    at = _aware(
        next((m.timestamp for m in reversed(messages) if getattr(m, "timestamp", None)), None)
    )
    # Where in the thread each read was made: only the reading messages are looked for (most
    # checkpoints of a long thread have none to place).
    read_by = {r.message_native_id or "" for r in rows if r.origin == READ}
    position = (
        {m.native_id: i for i, m in enumerate(messages) if m.native_id in read_by}
        if read_by
        else {}
    )
    disk: dict[str, GuidanceText] = {}
    reads: dict[str, tuple[int, GuidanceText]] = {}
    for r in rows:
        text = GuidanceText(r.path, r.text, r.origin, _aware(r.read_at), r.message_native_id)
        if r.origin == READ:
            where = position.get(r.message_native_id or "")
            if where is not None and (r.path not in reads or reads[r.path][0] < where):
                reads[r.path] = (where, text)
        elif r.path not in disk or (at is not None and text.read_at and text.read_at <= at):
            disk[r.path] = text
    for path, text in disk.items():
        if text.origin == DISK and at is not None and text.read_at and text.read_at > at:
            disk[path] = replace(text, note=LATER_NOTE)
    files += list(disk.values()) + [t for _, t in sorted(reads.values(), key=lambda p: p[0])]
    seen, out = set(), []
    for f in files:
        key = _same(f.text)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return replace(
        thread, guidance_files=tuple(out), guidance={f.path: f.text for f in out} or None
    )


def _aware(when: datetime | None) -> datetime | None:
    if when is not None and when.tzinfo is None:
        return when.replace(tzinfo=UTC)
    return when
