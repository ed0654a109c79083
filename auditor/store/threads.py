"""Reading threads back out of the store: listing, lookup by id, loading messages."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import MISSING, dataclass, fields
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ..errors import AmbiguousName, AuditorError, UnknownName
from ..model import Block
from .dialect import iso_utc

# The instruction files a thread was given, kept here too for those who read them with it.
from .guidance_texts import DISK as DISK
from .guidance_texts import GIT as GIT
from .guidance_texts import READ as READ
from .guidance_texts import TRANSCRIPT as TRANSCRIPT
from .guidance_texts import GuidanceText
from .short_ids import literal_prefix, pick, shortest_forms

if TYPE_CHECKING:
    from sqlalchemy import Engine


def _like(text: str) -> str:
    escaped = text.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def list_threads(
    engine: Engine,
    limit: int | None = None,
    agent: str | None = None,
    since: datetime | None = None,
    project: str | None = None,
    query: str | None = None,
) -> list[dict[str, Any]]:
    """Return one dict per thread, newest first, with token totals and the agent's cost.

    `since`: threads with a message since then; `project`: whose working directory contains
    it; `query`: whose id, title or project contains it (any case). `title` is the
    transcript's, else the first line of the first message the user typed. `agent_usd` is
    what the agent's calls cost at the price table (None when a model has no price).
    """
    from sqlalchemy import func, or_, select

    from . import schema as s  # here: ingest, which loads this module, never needs the models

    u = s.TokenUsage
    tokens = (
        select(
            u.thread_id,
            func.sum(u.input_tokens).label("input_tokens"),
            func.sum(u.output_tokens).label("output_tokens"),
            func.sum(u.cache_read_tokens).label("cache_read_tokens"),
            func.sum(u.cache_write_tokens).label("cache_write_tokens"),
        )
        .group_by(u.thread_id)
        .subquery()
    )
    t = s.Thread
    q = (
        select(
            t.__table__,
            tokens.c.input_tokens,
            tokens.c.output_tokens,
            tokens.c.cache_read_tokens,
            tokens.c.cache_write_tokens,
        )
        .outerjoin(tokens, tokens.c.thread_id == t.id)
        .order_by(t.started_at.desc().nulls_last(), t.id.desc())
    )
    if agent:
        q = q.where(t.agent == agent)
    if since is not None:
        at = since.astimezone(UTC).replace(tzinfo=None) if since.tzinfo else since
        q = q.where(func.coalesce(t.ended_at, t.started_at) >= at)
    if project:
        q = q.where(func.lower(t.cwd).like(_like(project), escape="\\"))
    if query:
        like = _like(query)
        q = q.where(
            or_(*(func.lower(c).like(like, escape="\\") for c in (t.native_id, t.title, t.cwd)))
        )
    if limit:
        q = q.limit(limit)
    out = []
    with engine.connect() as conn:
        for row in conn.execute(q):
            th = row
            out.append(
                {
                    "id": th.id,
                    "native_id": th.native_id,
                    "agent": th.agent,
                    "parent": th.parent_native_id,
                    "is_sidechain": th.is_sidechain,
                    "title": th.title,
                    "cwd": th.cwd,
                    "git_branch": th.git_branch,
                    "started": _iso(th.started_at),
                    "ended": _iso(th.ended_at),
                    "messages": th.message_count,
                    "tool_calls": th.tool_call_count,
                    "file_edits": th.file_edit_count,
                    "models": th.models.split(",") if th.models else [],
                    "input_tokens": int(row.input_tokens or 0),
                    "output_tokens": int(row.output_tokens or 0),
                    "cache_read_tokens": int(row.cache_read_tokens or 0),
                    "cache_write_tokens": int(row.cache_write_tokens or 0),
                }
            )
        firsts = _first_prompts(conn, [r["id"] for r in out if not r["title"]])
        for r in out:
            r["title"] = r["title"] or firsts.get(r["id"])
        shorts = shortest_forms(
            [r["native_id"] for r in out], conn.scalars(select(t.native_id)).all()
        )
    costs = thread_costs(engine) if out else {}
    for r in out:
        r["short_id"] = shorts[r["native_id"]]
        r["agent_usd"] = costs.get(r["id"], 0.0)
    return out


def _first_prompts(conn, thread_ids: list[int]) -> dict[int, str]:
    """The first line of the first message typed by the user in each of `thread_ids`."""
    from sqlalchemy import func, select

    from ..model import SOURCE_TYPED
    from . import schema as s

    m = s.Message
    out: dict[int, str] = {}
    for start in range(0, len(thread_ids), 500):
        chunk = thread_ids[start : start + 500]
        first = (
            select(func.min(m.id))
            .where(m.thread_id.in_(chunk), m.role == "user", m.source_type == SOURCE_TYPED)
            .group_by(m.thread_id)
        )
        for thread_id, blocks in conn.execute(
            select(m.thread_id, m.blocks).where(m.id.in_(first))
        ).all():
            text = " ".join(
                b.get("text") or ""
                for b in blocks or []
                if isinstance(b, dict) and b.get("kind") == "text"
            )
            line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
            if line:
                out[thread_id] = line[:200]
    return out


def thread_costs(engine: Engine) -> dict[int, float | None]:
    """What each thread's agent calls cost (None: a model without a price), by thread id."""
    from ..reports.costs import cost_report

    return {r["thread"]: r["agent_usd"] for r in cost_report(engine, ("thread",)).rows}


EMPTY_STORE_HINT = (
    "The store has no threads yet: run `auditor ingest ~/.claude/projects ~/.codex/sessions` "
    "(or any folder of transcripts) first."
)


def empty_store_hint(engine: Engine) -> str | None:
    """Return a hint to ingest something when the store holds no thread at all, else None."""
    from sqlalchemy import select

    from . import schema as s

    with engine.connect() as conn:
        any_thread = conn.execute(select(s.Thread.id).limit(1)).first()
    return None if any_thread else EMPTY_STORE_HINT


def check_agent(engine: Engine, agent: str, known: Iterable[str]) -> None:
    """Raise UnknownName unless `agent` is one the formats write (`known`) or the store holds."""
    from sqlalchemy import select

    from . import schema as s

    known = set(known)
    if agent in known:
        return
    with engine.connect() as conn:
        stored = set(conn.execute(select(s.Thread.agent).distinct()).scalars())
    if agent not in stored:
        raise UnknownName("agent", agent, sorted(known | stored))


_iso = iso_utc


def find_thread(engine: Engine, ident: str):
    """Find a thread by database id, native id, or a short form of its native id (a unique
    prefix, or what `threads` shows: see `auditor.store.short_ids`)."""
    from sqlalchemy import or_, select

    from . import schema as s

    t = s.Thread.__table__
    with engine.connect() as conn:
        conds = [t.c.native_id == ident]
        if ident.isdigit():
            conds.append(t.c.id == int(ident))
        rows = conn.execute(select(t).where(or_(*conds))).all()
        if not rows:
            like = t.c.native_id.startswith(literal_prefix(ident), autoescape=True)
            near = conn.execute(select(t.c.id, t.c.native_id).where(like)).all()
            chosen = set(pick(ident, [r.native_id for r in near]))
            ids = [r.id for r in near if r.native_id in chosen]
            rows = conn.execute(select(t).where(t.c.id.in_(ids))).all() if ids else []
    if len(rows) == 1:
        return rows[0]
    if not rows:
        if empty_store_hint(engine):
            raise AuditorError(f"{ident!r} is not a known thread: {EMPTY_STORE_HINT}")
        raise UnknownName("thread", ident, [])
    names = sorted(r.native_id for r in rows)
    more = f" and {len(names) - 6} more" if len(names) > 6 else ""
    raise AmbiguousName(
        f"{ident!r} matches {len(names)} threads: {', '.join(names[:6])}{more}. "
        "Give more of the id (`auditor threads` shows one that is unique)."
    )


def short_ids(engine: Engine, native_ids: Iterable[str]) -> dict[str, str]:
    """Map each native id to the shortest form that picks its thread alone in the store, the
    form `find_thread` takes back (`auditor.store.short_ids`)."""
    from sqlalchemy import select

    from . import schema as s

    with engine.connect() as conn:
        every = list(conn.scalars(select(s.Thread.native_id)))
    return shortest_forms(native_ids, every)


@dataclass(frozen=True)
class StoredThread:
    """A stored thread as the hooks see it (`compute_signals`, `gate_checkpoint`,
    `format_checkpoint`): what the transcript said about it, read-only.

    `id` is the store's id, `native_id` the agent's own (a Claude Code session id, a Codex
    rollout id; a sub-agent's is `<session>/agent-...`), `agent` the agent that wrote it
    (`claude-code`, `codex`...). `cwd`, `git_branch`, `title` and `version` are as the
    transcript recorded them, or None. `is_sidechain` is True for a sub-agent's run, started by
    `parent_native_id` as an `agent_type` (e.g. `Explore`). `started_at` and `ended_at` are the
    times of its first and last messages (UTC).

    `guidance` maps an instruction file's name or path (`AGENTS.md`, `CLAUDE.md`) to its text;
    at a checkpoint the formatter gets it with what applied there: `guidance_files` lists those
    texts (`GuidanceText`: path, text, where it came from) in the order to show them.
    """

    id: int
    agent: str
    native_id: str
    cwd: str | None = None
    git_branch: str | None = None
    title: str | None = None
    version: str | None = None
    is_sidechain: bool = False
    agent_type: str | None = None
    parent_native_id: str | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    guidance: dict[str, str] | None = None
    guidance_files: tuple[GuidanceText, ...] = ()

    @classmethod
    def of(cls, thread: Any) -> StoredThread:
        """Return `thread` (a row of the `threads` table, or a StoredThread) as a StoredThread."""
        if isinstance(thread, cls):
            return thread
        values: dict[str, Any] = {}
        for f in fields(cls):
            if f.default is MISSING and not hasattr(thread, f.name):
                raise TypeError(f"{thread!r} is not a thread: it has no {f.name!r}")
            values[f.name] = getattr(thread, f.name, f.default)
        values["guidance_files"] = tuple(values["guidance_files"] or ())
        if not isinstance(values["guidance"], dict):
            values["guidance"] = None
        return cls(**values)


@dataclass(slots=True)
class StoredMessage:
    id: int
    native_id: str
    role: str
    source_type: str | None
    timestamp: Any
    model: str | None
    seq: int
    blocks: list[Block]
    # The model call the message came from (`Message.usage_key`): the lines one answer was
    # written as share it, which is how the live hooks tell a tool round's calls apart.
    usage_key: str | None = None

    @property
    def text(self) -> str:
        return "\n\n".join(b.text for b in self.blocks if b.kind == "text" and b.text)


def find_message(thread, messages: list[StoredMessage], ident: str) -> str:
    """Return the native id of the message of `thread` that `ident` names: its id, or a
    prefix of it that no other message of the thread shares (`show` prints the ids)."""
    if any(m.native_id == ident for m in messages):
        return ident
    found = list(dict.fromkeys(m.native_id for m in messages if m.native_id.startswith(ident)))
    if len(found) == 1:
        return found[0]
    if not found:
        raise AuditorError(
            f"{ident!r} is not a message of thread {thread.native_id}: `auditor show "
            f"{thread.native_id}` shows each message's id in brackets"
        )
    more = f" and {len(found) - 6} more" if len(found) > 6 else ""
    raise AmbiguousName(
        f"{ident!r} matches {len(found)} messages of thread {thread.native_id}: "
        f"{', '.join(found[:6])}{more}. Give more of the id."
    )


def message_rows(
    engine: Engine, thread_id: int, after_id: int | None = None, blocks=None
) -> Sequence[Any]:
    """The stored rows of a thread's messages in order (only those stored after row `after_id`,
    if given), each with its blocks as the column expression `blocks` gives them (by default
    decoded JSON; the live worker's kept bodies read them as bytes)."""
    from sqlalchemy import select

    from . import schema as s

    m = s.Message
    q = select(
        m.id,
        m.native_id,
        m.role,
        m.source_type,
        m.timestamp,
        m.model,
        m.seq,
        m.blocks if blocks is None else blocks,
        m.usage_key,
    )
    if after_id is None:
        q = q.where(m.thread_id == thread_id)
    else:
        # The rows after `after_id` are the few with the largest ids (a live worker's new
        # rows): found from those ids, not by walking the thread's index (`+ 0`).
        q = q.where(m.id > after_id, m.thread_id + 0 == thread_id)
    with engine.connect() as conn:
        return conn.execute(q.order_by(m.seq, m.id)).all()


def stored_message(r, blocks: list[Block]) -> StoredMessage:
    """The message a row of `message_rows` holds, with `blocks` made from its blocks column."""
    return StoredMessage(
        r.id, r.native_id, r.role, r.source_type, r.timestamp, r.model, r.seq, blocks, r.usage_key
    )


def load_messages(
    engine: Engine, thread_id: int, after_id: int | None = None
) -> list[StoredMessage]:
    """Return the messages of a thread in order (only those stored after row `after_id`, if given)."""
    return [
        stored_message(r, [Block.from_json(b) for b in (r[7] or [])])
        for r in message_rows(engine, thread_id, after_id)
    ]
