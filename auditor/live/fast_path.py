"""The hooks' fast path: record the event, hand over a finished correction, start the worker.

`auditor hook claude-code` (and `codex`) runs after every tool call, at every prompt and at
every stop, so it must cost next to nothing and never wait for an observer. This module is
all a hook event runs: it imports only the standard library (no click, no SQLAlchemy, no
plugins) and touches only small files in a per-session spool directory:

    STATE/AGENT/SESSION/
        events.jsonl   one line per hook event (the fields the worker needs; no prompt text)
        outbox/        corrections the worker found, checked by the loop guards, ready to go
        sent/          claimed by a hook that printed them (the worker records the delivery)
        dropped/       taken back because the user wrote first (recorded as held back)
        worker.lock    held (flock) by the session's worker while it runs
        worker.log     the worker's own output

The audit runs in a detached worker (`auditor hook worker AGENT DIR`), one per session,
started by the first event that finds none holding the lock and exiting once the session is
idle. A crashed or hung worker never holds a hook up: the hook never waits on the lock, and
the next event after a crash finds the lock free and starts a new worker, which carries on
from the spool (the store keeps anything from being audited twice).

What each event does:
- `PostToolUse` (and `PostToolUseFailure`, Claude Code's event for a tool call that failed):
  hand over a finished correction as `additionalContext` (Claude Code reads it with the tool's
  result, before its next model call) and make sure the worker audits the tool round;
- `Stop`/`SubagentStop`: hand over a finished correction as `{"decision": "block"}`, unless
  `stop_hook_active` says the agent already goes on because of a Stop hook; the worker audits
  the end of the turn. Its correction goes out through the `--rewake` handler, which Claude
  Code runs in the background (`asyncRewake`) and which wakes Claude with it (exit status 2,
  the message on stderr) unless the user wrote first; else at the next event, if the user
  has not written since (Codex: its next Stop);
- `UserPromptSubmit`: take back every correction not yet handed over; the worker cancels the
  audits under way (recorded as cancelled, with what the call had cost), and a worker is
  started, so that it is ready by the turn's first audit. A prompt the client
  wrote itself (Claude Code's `<task-notification>` when a background task or a re-wake
  finishes; see `auditor.client_texts`) is recorded as not typed and does none of this;
- `SessionEnd`: the worker finishes the audits under way and exits.

Gemini CLI's events are recorded under Claude Code's names: `AfterTool` as `PostToolUse` (its
correction goes out as `additionalContext` too), `BeforeAgent` as `UserPromptSubmit` (a prompt
that is auditor's own correction, which Gemini CLI sends back as the next prompt after an
`AfterAgent` block, is recorded as not typed), `AfterAgent` as `Stop`.

The `--rewake` handler says "deliver" with its own exit status, DELIVER; the command that
`auditor hook install` writes turns that into the 2 Claude Code wakes on, and any other failure
into 1, so that an `auditor` that cannot start (gone, a broken venv, a usage error, which
Python and click report as 2) never wakes Claude and never erases a prompt.
"""

from __future__ import annotations

import os
import stat  # loaded by `os` already
import sys
import time

from ..client_texts import written_by_client
from .hook_json import dumps, loads
from .transcript_places import refusal

STATE_ENV = "AUDITOR_STATE_DIR"
LOCK_FD_ENV = "AUDITOR_WORKER_LOCK_FD"  # the worker lock a starting worker inherits
TAKEOVER_ENV = "AUDITOR_WORKER_TAKEOVER"  # set: wait for the lock the outgoing worker holds
# What a worker reads from its environment: the observers' keys and endpoints, the store, the
# PostgreSQL driver's password, auditor's own settings. Each event records a digest of them;
# a worker started with other values hands the session over (see `env_mark`).
ENV_PREFIXES = ("AUDITOR_", "GEMINI_", "GOOGLE_", "ANTHROPIC_", "OPENAI_", "PG")
ENV_OWN = (LOCK_FD_ENV, TAKEOVER_ENV)
EVENTS = "events.jsonl"
PROMPT = "UserPromptSubmit"
STOPS = ("Stop", "SubagentStop")
TOOL_EVENTS = ("PostToolUse", "PostToolUseFailure")  # a tool call came back (or failed)
SESSION_END = "SessionEnd"
NO_WORKER_GRACE = 3.0  # seconds a waiting Stop handler goes on without a live worker
DELIVER = 42  # `--rewake`'s exit status for "wake the agent with this" (see the docstring)
# auditor.live.delivery.CORRECTION_MARKER, which the fast path does not import (a test keeps them equal)
CORRECTION_MARKER = "[auditor course-correction]"
# The agents whose formats ship with auditor and declare live hooks (`LiveHooks`), each with
# its own names for the events auditor handles (`LiveHooks.events`; the spool records Claude
# Code's names). A copy of those declarations, since the fast path loads no plugin: a test
# keeps the two equal. Any other agent a format declares takes the full command line, which
# loads the plugins and hands its declaration in (`main`). Why a copy and not a file written
# at install time: docs/design.md, *What an agent declares for the live hooks*.
AGENT_EVENTS: dict[str, dict[str, str]] = {
    "claude-code": {},
    "codex": {},
    "gemini-cli": {"AfterTool": "PostToolUse", "BeforeAgent": PROMPT, "AfterAgent": "Stop"},
}
DEADLINE = 30.0  # seconds `--rewake` waits for the observer (as `--deadline`), plus 5
# The payload fields the worker needs; the prompt's text and tool output stay out of the spool.
KEEP = (
    "hook_event_name",
    "session_id",
    "transcript_path",
    "cwd",
    "agent_id",
    "agent_transcript_path",
    "stop_hook_active",
    "last_assistant_message",
    "turn_id",
    "tool_name",
    "tool_use_id",
)
# Of the agent's last message, the worker needs only the end (to see that the transcript has
# caught up with the Stop, `lookup.same_text`, which compares the last 300 characters).
LAST_MESSAGE_KEPT = 1000
# A hook's input is read up to this many bytes: a bigger one (a tool's huge output inside it)
# is ignored, said in one line, rather than read whole into memory. Kept fields are cut to
# FIELD_KEPT characters (ids and paths are far shorter).
STDIN_LIMIT = 64 << 20
FIELD_KEPT = 4096
# Options of `auditor hook AGENT` that take a value (so that their value is not read as a flag).
GLOBAL_VALUE_OPTIONS = ("--db",)


def env_mark(environ=None) -> str:
    """A digest of the environment a worker depends on (never the values themselves: the
    events file is no place for a key). A hook event whose digest differs from its worker's
    means the user changed a key or the store: that worker finishes and a new one, started
    by the event with the new environment, takes the session over."""
    env = os.environ if environ is None else environ
    items = sorted(
        f"{k}={v}" for k, v in env.items() if k.startswith(ENV_PREFIXES) and k not in ENV_OWN
    )
    return _sha256("\0".join(items).encode()).hexdigest()[:16]


_SHA256: list = []  # the function `_sha256` found


def _sha256(data: bytes):
    """SHA-256 from Python's own implementation where it has one: `hashlib` loads OpenSSL,
    which is a fifth of what a hook event costs beyond a bare interpreter start; the digest
    is the same (a test compares them). Looked up once: a failed import is not remembered."""
    if not _SHA256:
        try:
            from _sha2 import sha256  # type: ignore[import-not-found]  # Python 3.12 on
        except ImportError:
            try:
                from _sha256 import sha256  # type: ignore[import-not-found]  # 3.11
            except ImportError:  # a Python built without them
                from hashlib import sha256
        _SHA256.append(sha256)
    return _SHA256[0](data)


def split_argv(
    argv: list[str], agents: dict[str, dict[str, str]] = AGENT_EVENTS
) -> tuple[list[str], str, list[str]] | None:
    """Split `[global options] hook AGENT [options]` for the fast path, else return None.

    None for everything the fast path does not handle: other commands, `hook install`, an
    agent not in `agents`, and `--sync`, `--help` and the worker (the full command line
    answers those).
    """
    i = 0
    head: list[str] = []
    while i < len(argv) and argv[i] != "hook":
        a = argv[i]
        if a in GLOBAL_VALUE_OPTIONS and i + 1 < len(argv):
            head += argv[i : i + 2]
            i += 2
        elif a.startswith("--db=") or a == "--debug":
            head.append(a)
            i += 1
        else:
            return None
    if i + 1 >= len(argv) or argv[i + 1] not in agents:
        return None
    rest = argv[i + 2 :]
    if any(a in ("--sync", "--help", "-h") for a in rest):
        return None
    return head, argv[i + 1], rest


def _db_option(head: list[str]) -> str | None:
    for i, a in enumerate(head):
        if a == "--db":
            return head[i + 1]
        if a.startswith("--db="):
            return a[5:]
    return None


def state_root(db: str | None = None) -> str:
    """The spool directory for the store named by `db` (else $AUDITOR_DB, else the default)."""
    import zlib

    base = os.environ.get(STATE_ENV) or os.path.join(
        os.environ.get("XDG_STATE_HOME")
        or os.path.join(os.path.expanduser("~"), ".local", "state"),
        "auditor",
        "live",
    )
    value = db or os.environ.get("AUDITOR_DB") or "default"
    if "://" not in value and value != "default":
        value = os.path.abspath(os.path.expanduser(value))
    return os.path.join(base, f"{zlib.crc32(value.encode()):08x}")


def _safe(name: str) -> str:
    """`name` as one folder name: letters, digits, `-_.`; never `.` or `..` (which would put
    the spool in the folder above)."""
    safe = "".join(c if c.isascii() and (c.isalnum() or c in "-_.") else "_" for c in name)
    safe = safe[:200] or "_"
    return "_" + safe[1:] if set(safe) == {"."} else safe


def thread_of(agent: str, data: dict) -> str:
    """The native id of the thread an event is about (a Claude Code subagent has its own)."""
    session = data.get("session_id") or ""
    if agent == "claude-code" and data.get("agent_id"):
        return f"{session}/agent-{data['agent_id']}"
    return session


def session_dir(root: str, agent: str, session: str) -> str:
    return os.path.join(root, agent, _safe(session))


def _append(path: str, line: bytes) -> int:
    """Append one line; return the file's size before it (the line's offset).

    Appenders take the file's lock for the few microseconds they write: the kernel grows a
    file page by page during a long write, so without it another hook could see a line half
    written, take it for one a crash cut short and end it again (an empty line in the spool)."""
    import fcntl

    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # released when fd is closed, or the hook dies
        offset = os.lseek(fd, 0, os.SEEK_END)
        if offset and os.pread(fd, 1, offset - 1) != b"\n":
            # A last line cut short (a crash, a full disk) must not swallow this one.
            offset += os.write(fd, b"\n")
        os.write(fd, line)
    finally:
        os.close(fd)
    if os.path.basename(path) == EVENTS:
        wake(os.path.dirname(path))
    return offset


WAKE = "wake"  # the worker's wake-up pipe in the session's folder (see `wake`)


def wake(sdir: str) -> None:
    """Tell the session's worker an event is there: a byte into its pipe, DIR/wake, which it
    waits on between its looks at the spool, so that it need not look often to answer at once.
    Nothing when no worker listens (the pipe is missing, or nobody has it open for reading),
    when the pipe is full (the worker is woken already) or when DIR/wake is no pipe."""
    try:
        fd = os.open(os.path.join(sdir, WAKE), os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        return
    try:
        if stat.S_ISFIFO(os.fstat(fd).st_mode):
            os.write(fd, b"\n")
    except OSError:
        pass
    finally:
        os.close(fd)


def typed(event: dict) -> bool:
    """True for a UserPromptSubmit the user typed (not one the client wrote itself)."""
    return event.get("hook_event_name") == PROMPT and event.get("typed") is not False


def prompt_since(sdir: str, offset: int, thread: str | None = None) -> bool:
    """True when a typed UserPromptSubmit was recorded at or after byte `offset` of the events."""
    try:
        with open(os.path.join(sdir, EVENTS), "rb") as fh:
            fh.seek(offset)
            tail = fh.read()
    except FileNotFoundError:
        return False
    if PROMPT.encode() not in tail:
        return False
    for line in tail.splitlines():
        if PROMPT.encode() in line:
            try:
                if typed(loads(line)):
                    return True
            except ValueError:
                continue
    return False


def claim(sdir: str, thread: str, event: str) -> dict | None:
    """Take the oldest finished correction for `thread` out of the outbox, or None.

    The claim is a rename, so two hooks never hand over the same one. A correction the user
    has written after is moved to dropped/ instead and never handed over.
    """
    outbox = os.path.join(sdir, "outbox")
    try:
        names = sorted(n for n in os.listdir(outbox) if n.endswith(".json"))
    except FileNotFoundError:
        return None
    for name in names:
        path = os.path.join(outbox, name)
        try:
            with open(path, "rb") as fh:
                entry = loads(fh.read())
        except (OSError, ValueError):
            continue
        owner = str(entry.get("thread"))
        if owner != thread and not (owner.startswith(f"{thread}/agent-") and "/" not in thread):
            continue  # another thread's (a subagent's correction also reaches its main agent)
        stale = prompt_since(sdir, int(entry.get("offset", 0)))
        where = "dropped" if stale else "sent"
        os.makedirs(os.path.join(sdir, where), exist_ok=True)
        try:
            os.rename(path, os.path.join(sdir, where, f"{name[:-5]}.{event}.json"))
        except FileNotFoundError:
            continue  # another hook took it
        if not stale:
            return entry
    return None


def drop_all(sdir: str, reason: str = PROMPT) -> int:
    """Take back every correction not yet handed over (the user wrote); return how many."""
    outbox = os.path.join(sdir, "outbox")
    try:
        names = [n for n in os.listdir(outbox) if n.endswith(".json")]
    except FileNotFoundError:
        return 0
    n = 0
    os.makedirs(os.path.join(sdir, "dropped"), exist_ok=True)
    for name in names:
        try:
            os.rename(
                os.path.join(outbox, name),
                os.path.join(sdir, "dropped", f"{name[:-5]}.{reason}.json"),
            )
            n += 1
        except FileNotFoundError:
            pass
    return n


class SessionSpool:
    """One live session's spool as an injector sees it: the outbox injector stages corrections
    here, and the session's next hook event hands them over (`claim`)."""

    def __init__(self, path: str):
        self.path = path

    def typed_prompt_since(self, offset: int) -> bool:
        """True when the user typed a prompt at or after byte `offset` of the events."""
        return prompt_since(self.path, offset)

    def waiting(self) -> list[dict]:
        """The corrections staged and not yet handed over (unreadable files left out)."""
        outbox = os.path.join(self.path, "outbox")
        try:
            names = sorted(n for n in os.listdir(outbox) if n.endswith(".json"))
        except FileNotFoundError:
            return []
        out = []
        for name in names:
            try:
                with open(os.path.join(outbox, name), "rb") as fh:
                    entry = loads(fh.read())
            except (OSError, ValueError):
                continue
            if isinstance(entry, dict):
                out.append(entry)
        return out

    def stage(self, name: str, entry: dict) -> str:
        """Put `entry` in the outbox as `name`, whole or not at all; return its path."""
        outbox = os.path.join(self.path, "outbox")
        os.makedirs(outbox, exist_ok=True)
        tmp = os.path.join(outbox, f".{name}.tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(dumps(entry, ensure_ascii=False))
        path = os.path.join(outbox, name)
        os.replace(tmp, path)
        return path

    def take_back_all(self) -> int:
        """Take back every correction not yet handed over; return how many."""
        return drop_all(self.path)


def worker_alive(sdir: str) -> bool:
    """True when a worker holds the session's lock (a dead one's lock is free again)."""
    import fcntl

    fd = os.open(os.path.join(sdir, "worker.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing drops the lock if we took it
    return False


def worker_dying(sdir: str, wait: float = 0.25) -> bool:
    """True when the session's lock is held by a worker that is already dead: a killed
    process's main thread can be a zombie while its other threads, which share its open files
    (and so the lock), are still torn down. Waits up to `wait` seconds for the lock to go."""
    try:
        with open(os.path.join(sdir, "worker.lock"), "rb") as fh:
            pid = int(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return False
    try:
        os.kill(pid, 0)
        with open(f"/proc/{pid}/stat", "rb") as fh:
            if fh.read().rsplit(b")", 1)[1].split()[0] != b"Z":
                return False  # alive
    except (ProcessLookupError, FileNotFoundError):
        pass  # gone
    except (OSError, IndexError):
        return False
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if not worker_alive(sdir):
            return True
        time.sleep(0.005)
    return False


def take_lock(sdir: str) -> int | None:
    """Take the session's worker lock for a worker about to start: its fd, or None when a
    worker holds it or another event is starting one."""
    import fcntl

    fd = os.open(os.path.join(sdir, "worker.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def start_worker(
    sdir: str, head: list[str], agent: str, rest: list[str], lock_fd: int | None = None
) -> int:
    """Start the session's worker, detached, its output in worker.log; return its pid.

    With `lock_fd` (the session's worker lock, taken by `take_lock`) the worker inherits the
    lock: it is held without a gap from this event until the worker exits, so the events that
    come while the worker's interpreter is still starting find it held and start no other."""
    rest = [a for a in rest if a != "--wait"]  # a handler's own way of answering
    # -P: the worker runs in the agent's project folder, which `-m` would put first on the
    # import path; a project with an `auditor` package of its own would run as the worker.
    argv = [sys.executable, "-P", "-m", "auditor", *head, "hook", "worker", agent, sdir, *rest]
    env = dict(os.environ)
    if lock_fd is not None:
        os.set_inheritable(lock_fd, True)
        env[LOCK_FD_ENV] = str(lock_fd)
    devnull = os.open(os.devnull, os.O_RDONLY)
    log = os.open(os.path.join(sdir, "worker.log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        pid = os.posix_spawn(
            sys.executable,
            argv,
            env,
            file_actions=[
                (os.POSIX_SPAWN_DUP2, devnull, 0),
                (os.POSIX_SPAWN_DUP2, log, 1),
                (os.POSIX_SPAWN_DUP2, log, 2),
            ],
            setsid=True,
        )
    finally:
        os.close(devnull)
        os.close(log)
    if lock_fd is not None:
        os.ftruncate(lock_fd, 0)
        os.pwrite(lock_fd, f"{pid}\n".encode(), 0)  # who holds it, from now on
        os.close(lock_fd)  # the worker's copy keeps the lock
    return pid


def note(message: str, event: str, agent: str = "claude-code") -> str:
    """The correction as what it is, an observer's note on the work, worded for the channel
    it reaches Claude Code by: beside a tool's result (`additionalContext`), or as the reason
    it does not stop yet (a Stop block, a re-wake), which the client shows as a hook's
    "blocking error". The observer writes `message` as the user would say it; the note says
    who relays it. The marker lets the transcript parsers know it again. (Other agents: the
    marked message.)"""
    if agent != "claude-code":
        return f"{CORRECTION_MARKER} {message}"
    from_whom = "Note from the observer auditing this session for the user"
    if event in TOOL_EVENTS:
        return f"{CORRECTION_MARKER} {from_whom} (not part of the tool's output): {message}"
    return (
        f"{CORRECTION_MARKER} {from_whom}, before you finish (not a failure of the hook): {message}"
    )


def answer(agent: str, event: str, message: str) -> str:
    """The hook's output that hands `message` to the agent at `event` (docs/live-hooks.md)."""
    out: dict[str, object]
    text = note(message, event, agent)
    if event in TOOL_EVENTS:
        name = "AfterTool" if agent == "gemini-cli" else event
        out = {"hookSpecificOutput": {"hookEventName": name, "additionalContext": text}}
    else:
        out = {"decision": "block", "reason": text}
    return dumps(out, ensure_ascii=False)


def handle(
    agent: str, raw: str, head: list[str], rest: list[str], names: dict[str, str] | None = None
) -> tuple[str, str]:
    """Handle one hook event; return (what was printed, what happened). `names`: the agent's
    own event names and those the spool records (else `AGENT_EVENTS`)."""
    printed, did, _ = _handle(agent, raw, head, rest, names)
    return printed, did


def _handle(
    agent: str, raw: str, head: list[str], rest: list[str], names: dict[str, str] | None = None
) -> tuple[str, str, dict]:
    """`handle`, also returning what `--wait` needs: the session's spool, the thread, the
    event and where its line ends in the events (empty when the event was ignored)."""
    try:
        data = loads(raw)
    except ValueError as exc:
        return "", f"ignored: the hook input on stdin is not JSON ({exc})", {}
    if not isinstance(data, dict) or not data.get("session_id"):
        return "", "ignored: the hook input has no session_id", {}
    # A session id that is no valid text (a lone surrogate escaped in the JSON) could not be
    # written to the store later: its bad characters become `?` here, once.
    data["session_id"] = str(data["session_id"]).encode("utf-8", "replace").decode()
    for key in ("transcript_path", "agent_transcript_path"):
        path = data.get(key)
        why = None if path is None else refusal(agent, key, path)
        if why is not None:
            return "", f"ignored: {why}", {}
    native = str(data.get("hook_event_name") or "Stop")
    event = (AGENT_EVENTS.get(agent, {}) if names is None else names).get(native, native)
    thread = thread_of(agent, data)
    sdir = session_dir(state_root(_db_option(head)), agent, str(data["session_id"]))
    os.makedirs(sdir, exist_ok=True)
    record = {
        k: data[k][:FIELD_KEPT] if isinstance(data[k], str) else data[k] for k in KEEP if k in data
    }
    record["last_assistant_message"] = _kept_message(data)
    if record["last_assistant_message"] is None:
        del record["last_assistant_message"]
    record["hook_event_name"] = event
    if native != event:
        record["agent_event"] = native
    record["thread"] = thread
    record["t"] = time.time()
    record["env"] = mark = env_mark()
    if event == PROMPT:
        given = data.get("prompt")
        prompt = given if isinstance(given, str) else ""
        record["prompt_chars"] = len(prompt)
        # Gemini CLI sends an AfterAgent block's reason back as the next prompt: auditor's own.
        ours = agent == "gemini-cli" and prompt.lstrip().startswith(CORRECTION_MARKER)
        record["typed"] = not (ours or written_by_client(agent, prompt))
    line = dumps(record).encode() + b"\n"
    if event == PROMPT:
        _append(os.path.join(sdir, EVENTS), line)  # first, so that a late correction sees it
        if not record["typed"]:
            return "", f"{PROMPT}: written by the client, not typed: nothing taken back", {}
        n = drop_all(sdir)
        did = f"{PROMPT}: {n} correction(s) taken back" if n else f"{PROMPT}: recorded"
        # The worker starts with the turn, so that it is ready when the turn's first round or
        # its end is audited (Codex's Stop handler waits for that audit).
        return "", did + _ensure_worker(sdir, head, agent, rest, mark), {}
    if event == SESSION_END:
        _append(os.path.join(sdir, EVENTS), line)  # the worker finishes and exits
        return "", f"{SESSION_END}: recorded", {}
    printed, did = "", f"{native}: nothing to hand over"
    if event in STOPS and data.get("stop_hook_active") is True:
        did = f"{native}: stop_hook_active, nothing handed over"
    else:
        # Claimed before the event is recorded, so that the worker knows of the hand-over
        # when it reads the event (no audit right after a correction).
        entry = claim(sdir, thread, native)
        if entry is not None:
            printed = answer(agent, event, entry["message"])
            did = f"{native}: handed over verdict {entry.get('verdict_id')}"
    end = _append(os.path.join(sdir, EVENTS), line) + len(line)
    did += _ensure_worker(sdir, head, agent, rest, mark)
    active = event in STOPS and data.get("stop_hook_active") is True
    return (
        printed,
        did,
        {"sdir": sdir, "thread": thread, "end": end, "active": active, "native": native},
    )


def _ensure_worker(sdir: str, head: list[str], agent: str, rest: list[str], mark: str) -> str:
    """Start the session's worker unless one lives or is starting; say what was done. `mark`:
    this event's `env_mark`.

    One start attempt per session while a worker lives or is starting: whoever takes the lock
    starts the worker and hands the lock over; the others see it held."""
    lock = take_lock(sdir)
    if lock is None and worker_dying(sdir):
        lock = take_lock(sdir)
    if lock is None:
        return _take_over(sdir, head, agent, rest, mark)
    return f"; worker {start_worker(sdir, head, agent, rest, lock)} started"


def _take_over(sdir: str, head: list[str], agent: str, rest: list[str], mark: str) -> str:
    """The worker that holds the session runs with another environment (a key or the store
    changed since it started): start one with this event's, which waits for the lock while
    the outgoing worker finishes what it has under way. One per new environment."""
    try:
        with open(os.path.join(sdir, "worker.env")) as fh:
            serving = fh.read().split()
    except OSError:
        return ""  # a worker from before the digests, or one still starting
    if not serving or mark in serving:
        return ""
    with open(os.path.join(sdir, "worker.env"), "a") as fh:
        fh.write(f" {mark}")  # the successor's, so that the next events start no other
    os.environ[TAKEOVER_ENV] = "1"
    try:
        return (
            f"; the environment changed: worker {start_worker(sdir, head, agent, rest)} takes over"
        )
    finally:
        del os.environ[TAKEOVER_ENV]


def wait(
    agent: str, raw: str, head: list[str], rest: list[str], names: dict[str, str] | None = None
) -> tuple[str, str]:
    """`--wait`, the Stop handler of Codex and Gemini CLI (AfterAgent): record the Stop, then
    wait for its end-of-turn audit.

    Neither has anything like Claude Code's asyncRewake: once a turn has ended, the next event
    is the user's next prompt, which takes any correction back. So this handler holds the turn
    open until the worker has audited it (at most `--deadline` seconds) and answers with the
    correction as `{"decision": "block"}` (Gemini CLI sends its `reason` as the next prompt);
    with nothing to say, or past the deadline, the agent stops as usual. Return (what was
    printed, what happened).
    """
    printed, did, at = _handle(agent, raw, head, rest, names)
    if printed or not at or at["active"]:
        return printed, did
    deadline = _deadline(rest)
    label = f"{at['native']}-wait"
    code, text = _await_audit(at["sdir"], at["thread"], lambda: at["end"], deadline, label)
    if code == DELIVER:
        return answer(agent, "Stop", text), f"{did}; handed over the end-of-turn correction"
    return "", f"{did}; {text}"


def _deadline(rest: list[str]) -> float:
    for i, a in enumerate(rest[:-1]):
        if a == "--deadline":
            return float(rest[i + 1])
    return DEADLINE


def rewake(agent: str, raw: str, head: list[str], rest: list[str]) -> tuple[int, str]:
    """`--rewake`: wait in the background for the end-of-turn audit of this Stop.

    Claude Code runs this handler with `asyncRewake` (it does not wait for it) and wakes
    Claude with the handler's stderr when it exits with status 2 (the installed command turns
    DELIVER into 2). Return (DELIVER, the note) when a correction is due and nobody wrote since
    the Stop, else (0, what happened).
    """
    data = loads(raw)
    if not isinstance(data, dict) or not data.get("session_id"):
        return 0, "ignored: the hook input has no session_id"
    if data.get("stop_hook_active") is True:
        return 0, "stop_hook_active: nothing to wake Claude for"
    thread = thread_of(agent, data)
    sdir = session_dir(state_root(_db_option(head)), agent, str(data["session_id"]))
    events = os.path.join(sdir, EVENTS)
    try:
        start = os.path.getsize(events)
    except OSError:
        start = 0
    # The other Stop handler records the event at about the same time: the audit to wait for
    # is the one of the first Stop of this thread recorded from a moment before now on.
    since = max(0, start - 64 * 1024)
    found: list[int] = []

    def stop_end() -> int | None:
        if not found:
            end = _find_stop(events, since, thread, data)
            if end is not None:
                found.append(end)
        return found[0] if found else None

    code, text = _await_audit(sdir, thread, stop_end, _deadline(rest) + 5, "Stop-rewake")
    return code, note(text, "Stop", agent) if code == DELIVER else text


def _await_audit(sdir: str, thread: str, stop_end, seconds: float, label: str) -> tuple[int, str]:
    """Wait up to `seconds` for the audit of the Stop whose events line ends at `stop_end()`:
    (DELIVER, the correction's message) when one is due and nobody wrote since, else (0, what
    happened)."""
    until = time.monotonic() + seconds
    gone_since: float | None = None
    while time.monotonic() < until:
        end = stop_end()
        if end is not None and prompt_since(sdir, end):
            return 0, "the user wrote first"
        entry = claim(sdir, thread, label)
        if entry is not None:
            return DELIVER, entry["message"]
        if end is not None and _done(sdir, thread) >= end:
            return 0, "the end of the turn needs no correction"
        # A worker that cannot start (a store out of reach, a broken install) leaves nobody
        # to answer: give up after a grace period instead of holding the handler to the end.
        if end is None or _worker_running(sdir):
            gone_since = None
        elif gone_since is None:
            gone_since = time.monotonic()
        elif time.monotonic() - gone_since > NO_WORKER_GRACE:
            return 0, "no worker serves the session (see its worker.log)"
        time.sleep(0.05)
    return 0, f"no answer within {seconds:g}s"


def _worker_running(sdir: str) -> bool:
    """True when the pid in worker.lock is a live process (read only: never takes the lock,
    which a hook starting a worker may be taking at this moment)."""
    try:
        with open(os.path.join(sdir, "worker.lock"), "rb") as fh:
            pid = int(fh.read().split()[0])
        os.kill(pid, 0)
    except (OSError, ValueError, IndexError):
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] != b"Z"  # a zombie is gone
    except (OSError, IndexError):
        return True  # no /proc (macOS): kill(0) answered


def _find_stop(events: str, since: int, thread: str, data: dict) -> int | None:
    """The end offset of this Stop's line in the events (matched by thread and message)."""
    try:
        with open(events, "rb") as fh:
            fh.seek(since)
            chunk = fh.read()
    except OSError:
        return None
    pos = since
    found = None
    for line in chunk.splitlines(keepends=True):
        pos += len(line)
        if not line.endswith(b"\n") or b"Stop" not in line:
            continue
        try:
            e = loads(line)
        except ValueError:
            continue
        if (
            e.get("hook_event_name") in STOPS
            and e.get("thread") == thread
            and e.get("last_assistant_message") == _kept_message(data)
        ):
            found = pos
    return found


def _done(sdir: str, thread: str) -> int:
    """How far into the events the worker has finished the audits of `thread`."""
    try:
        with open(os.path.join(sdir, "done.json"), "rb") as fh:
            return int(loads(fh.read()).get(thread, 0))
    except (OSError, ValueError, TypeError, AttributeError):
        return 0


def read_stdin() -> str:
    """The hook's input, or "" past STDIN_LIMIT bytes (the rest is drained unread)."""
    raw = sys.stdin.buffer.read(STDIN_LIMIT + 1)
    if len(raw) > STDIN_LIMIT:
        while sys.stdin.buffer.read(1 << 20):  # the agent must not block on a full pipe
            pass
        raise InputTooLarge(f"the hook input is over {STDIN_LIMIT >> 20} MB: ignored")
    return raw.decode("utf-8", "replace")


class InputTooLarge(Exception):
    pass


def _kept_message(data: dict):
    """The agent's last message as the spool keeps it (its end)."""
    last = data.get("last_assistant_message")
    return last[-LAST_MESSAGE_KEPT:] if isinstance(last, str) else last


def main(argv: list[str], agents: dict[str, dict[str, str]] = AGENT_EVENTS) -> None:
    """Run a hook event on the fast path; always exit 0 (the agent goes on regardless).

    `agents`: the agents served and their event names, the fast path's copy unless the full
    command line, which has loaded the plugins, hands in what the formats declare."""
    # The spool holds what the agent and the user wrote, and the worker this starts inherits
    # the mask: every folder and file made from here on is the user's alone (0700 / 0600).
    os.umask(0o077)
    head, agent, rest = split_argv(argv, agents) or ([], "", [])
    verbose = "-v" in rest or "--verbose" in rest
    started = time.perf_counter()
    if "--rewake" in rest:
        try:
            code, text = rewake(agent, sys.stdin.read(), head, rest)
        except Exception as exc:  # noqa: BLE001 - fail open
            code, text = 0, f"failed: {type(exc).__name__}: {exc}"
        if code == DELIVER:
            sys.stderr.write(text + "\n")
        elif verbose:
            sys.stderr.write(f"auditor hook {agent} --rewake: {text}\n")
        sys.stderr.flush()
        os._exit(code)
    try:
        raw = read_stdin()
        names = agents.get(agent, {})
        printed, did = (wait if "--wait" in rest else handle)(agent, raw, head, rest, names)
    except InputTooLarge as exc:
        printed, did, verbose = "", str(exc), True
    except Exception as exc:  # noqa: BLE001 - fail open: the agent must never be held up
        printed, did = "", f"failed: {type(exc).__name__}: {exc}"
        verbose = True
    if printed:
        sys.stdout.write(printed + "\n")
        sys.stdout.flush()
    if verbose:
        took = (time.perf_counter() - started) * 1000
        sys.stderr.write(f"auditor hook {agent}: {did} ({took:.1f} ms)\n")
        sys.stderr.flush()
    os._exit(0)
