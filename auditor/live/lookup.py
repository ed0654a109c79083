"""What a hook event is about: its thread in the store and the checkpoint that just ended.

Both live paths start an audit the same way, the Stop hook that audits while the agent waits
(`sync_hook`, `--sync`) and the session's worker that audits in the background (`worker`):
read the new tail of the event's transcript into the store, find the thread the event names,
and find the checkpoint the event is about once the stored thread holds it. A stop is about an
end of turn, a tool event about the tool round that holds its result. The agent writes its
transcript around the time it runs the hook, so "once the stored thread holds it" matters:
each helper here says None while the file lags, and the caller decides how long to wait.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..audit.checkpoints import Checkpoint

# What a stop's last message is compared by: its last characters, spaces folded. The spool
# keeps more of it than this (`fast_path.LAST_MESSAGE_KEPT`).
COMPARED_CHARS = 300
# Bytes of a transcript one hook event reads at most, on both paths: a `transcript_path` naming
# a huge file (gigabytes of NUL bytes) costs each event a bounded read, and the next events go
# on from where it stopped. The store is never locked while it is parsed (`auditor.ingest`).
READ_PER_EVENT = 256 << 20


def ingest(engine, plugins, format_name: str, path) -> Any:
    """Read the new tail of the transcript at `path` into the store, `READ_PER_EVENT` bytes
    of it at most; its result, or None when there is no such file (yet)."""
    import os

    from ..ingest.ingester import Ingester

    if not isinstance(path, (str, os.PathLike)) or not path or not os.path.isfile(path):
        return None
    return Ingester(engine, plugins, format_name, read_limit=READ_PER_EVENT).run([path])


def find_thread(engine, agent: str, native_id: str):
    """The stored thread row of `agent` with the native id `native_id`, or None."""
    from sqlalchemy import select

    from ..store import schema as s

    t = s.Thread.__table__
    with engine.connect() as conn:
        return conn.execute(select(t).where(t.c.agent == agent, t.c.native_id == native_id)).first()


def _norm(text: str) -> str:
    return " ".join(text.split())


def same_text(m, last_message: str) -> bool:
    """True when the stored message `m` ends as the agent's `last_message` does."""
    want, have = _norm(last_message)[-COMPARED_CHARS:], _norm(m.text)
    return bool(have) and (have.endswith(want) or want.endswith(have[-COMPARED_CHARS:]))


def caught_up(messages: list, last_message: str) -> bool:
    """True when the stored thread ends with the agent message a stop names."""
    for m in reversed(messages):
        if m.role == "assistant" and m.text.strip():
            return same_text(m, last_message)
        if m.role == "user" and m.source_type not in ("meta", "command"):
            return False
    return False


def end_of_turn(thread_id: int, messages: list, last_message: str | None = None):
    """The end of turn a stop is about: the thread's last checkpoint when it is the end of
    its last agent message and nobody wrote after it, else None. With `last_message` (what
    the stop says the agent wrote last), None too until the stored thread ends with it."""
    from ..audit.checkpoints import END_TURN, checkpoint_at
    from ..model import SOURCE_COURSE_CORRECTION

    if last_message and last_message.strip() and not caught_up(messages, last_message):
        return None
    # Its last agent message ends a turn when it waits on no tool (it is the last of its turn):
    # only that turn is looked at, however long the session.
    final = next(
        (i for i in range(len(messages) - 1, -1, -1) if messages[i].role == "assistant"), -1
    )
    if final < 0:
        return None
    m = messages[final]
    if m.source_type == SOURCE_COURSE_CORRECTION or any(b.kind == "tool_use" for b in m.blocks):
        return None
    cp = checkpoint_at(thread_id, messages, m.native_id, END_TURN)
    return None if cp.user_wrote_after else cp


def tool_round(thread_id: int, messages: list, tool_use_id) -> Checkpoint | None:
    """The every-inference checkpoint of the tool round holding the result of `tool_use_id`,
    once every call of that round is answered, else None."""
    from ..audit.checkpoints import checkpoint_at

    at = round_answered(messages, tool_use_id)
    return None if at is None else checkpoint_at(thread_id, messages, at, "every-inference")


def round_answered(messages: list, tool_use_id) -> str | None:
    """The native id of the message that completes the tool round holding the result of
    `tool_use_id` (every call of the round answered), else None. Without an id (an older
    client), the thread's last message when it is a tool result."""
    from ..audit.checkpoints import is_tool_result

    if not isinstance(tool_use_id, str) or not tool_use_id:
        return messages[-1].native_id if messages and is_tool_result(messages[-1]) else None
    return _tool_round(messages, tool_use_id)[0]


def response_open(messages: list, tool_use_id) -> bool:
    """True when every call the transcript holds of the model answer that made `tool_use_id`
    is answered, but nothing written after that answer shows it is over: more of its calls
    may still come (see `_tool_round`). The round is complete once the next answer starts."""
    if not isinstance(tool_use_id, str) or not tool_use_id:
        return False
    return _tool_round(messages, tool_use_id)[1]


def _tool_round(messages: list, tool_use_id: str) -> tuple[str | None, bool]:
    """(the message completing the round, None while it is not complete; whether only the
    end of its model answer is missing).

    A round is every call of one model answer. Claude Code writes an answer as one line per
    content block, all with the answer's message id (`usage_key`), and runs a call as soon as
    its block has arrived: a result is often written before the answer's next call, and
    results come back in the order the calls finish. So the round is found from the lines
    sharing the answer's id, before and after the event's call, whatever results lie between
    them; and it is complete only once every call is answered and a line of something else
    follows (the next answer, or the user's next message). Until then a result answering every
    call written so far may be followed by another call of the same answer. The `stop_reason`
    on those lines is no sign: it is written on early lines as often as it is missing from the
    last (real transcripts of 2.1.x both ways). An agent that gives its messages no answer id
    writes a round's calls together: there, the round is the calls written next to each other,
    complete when all are answered."""
    from ..audit.checkpoints import is_tool_result, is_typed_user
    from ..model import SOURCE_COURSE_CORRECTION

    # The call is looked for from the end: a live event is about the latest rounds.
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if m.role == "assistant" and any(
            b.kind == "tool_use" and b.tool_use_id == tool_use_id for b in m.blocks
        ):
            break
    else:
        return None, False
    call = messages[i]
    key = getattr(call, "usage_key", None)

    def of_answer(m) -> bool:
        if m is call:
            return True
        if m.role != "assistant":
            return False
        if key:
            return getattr(m, "usage_key", None) == key
        return bool(m.blocks) and all(b.kind == "tool_use" for b in m.blocks)

    def other(m) -> bool:  # a line that is not of this answer: the next one, or the user's
        if m.role == "assistant":
            return not of_answer(m)
        return is_typed_user(m) or m.source_type == SOURCE_COURSE_CORRECTION

    first = i  # the answer's first line, across what was written between its lines
    for j in range(i - 1, -1, -1):
        if of_answer(messages[j]):
            first = j
        elif not key or other(messages[j]):
            break
    calls: set[str] = set()
    answered: set[str] = set()
    last = None  # the round's last result so far
    for m in messages[first:]:
        if of_answer(m):
            calls |= {b.tool_use_id for b in m.blocks if b.kind == "tool_use" and b.tool_use_id}
        elif is_tool_result(m):
            answered |= {b.tool_use_id for b in m.blocks if b.kind == "tool_result"}
            last = m
            if not key and calls <= answered:
                return m.native_id, False
        elif other(m):
            if key and last is not None and calls <= answered:
                return last.native_id, False
            return None, False
        # else: the client's own notes (meta lines) say nothing of the answer
    return None, bool(key) and last is not None and calls <= answered
