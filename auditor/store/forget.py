"""Forgetting threads: their rows go (messages, tool calls, usage, checkpoints, verdicts...,
through the foreign keys' cascades) and a tombstone stays in `forgotten_threads`, which ingest
reads so that a file that grows, a copy from another machine or a re-read does not bring the
thread back; `ingest --include-forgotten` does, reading the files it came from again."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from . import search
from .db import utcnow
from .sql_text import DriverSql, marks

if TYPE_CHECKING:
    from sqlalchemy import ColumnElement, Engine

# The transcripts shipped with auditor to try it on (`auditor forget --samples`).
SAMPLES_DIR = Path(__file__).resolve().parent.parent.parent / "data" / "samples"


@dataclass
class Forgotten:
    threads: int = 0
    messages: int = 0


def select_threads(
    engine: Engine,
    *,
    thread_ids: Sequence[int] = (),
    project: str | None = None,
    agent: str | None = None,
    samples: bool = False,
) -> list[int]:
    """Return the ids of the threads any of the choices names, with their sub-agents."""
    from sqlalchemy import func, or_, select

    from . import schema as s  # here: ingest reads the tombstones without the models

    t, f = s.Thread, s.SourceFile
    conds: list[ColumnElement[bool]] = []
    if thread_ids:
        conds.append(t.id.in_(list(thread_ids)))
    if project:
        conds.append(func.lower(t.cwd).contains(project.lower(), autoescape=True))
    if agent:
        conds.append(t.agent == agent)
    if samples:
        under = str(SAMPLES_DIR) + "/"
        fed = select(f.id).where(f.path.startswith(under, autoescape=True))
        conds.append(t.source_file_id.in_(fed))
    if not conds:
        return []
    with engine.connect() as conn:
        chosen = conn.execute(select(t.id, t.agent, t.native_id).where(or_(*conds))).all()
        ids = {r.id for r in chosen}
        for r in chosen:  # a session's sub-agents go with it
            subs = select(t.id).where(
                t.agent == r.agent, t.native_id.startswith(r.native_id + "/", autoescape=True)
            )
            ids.update(conn.scalars(subs))
    return sorted(ids)


def forget(engine: Engine, thread_ids: list[int]) -> Forgotten:
    """Delete the threads `thread_ids` and leave a tombstone for each."""
    from sqlalchemy import delete, func, select

    from . import schema as s

    t, m, u = s.Thread, s.Message, s.TokenUsage
    done = Forgotten()
    with engine.begin() as conn:
        for start in range(0, len(thread_ids), 500):
            chunk = thread_ids[start : start + 500]
            rows = conn.execute(
                select(t.id, t.agent, t.native_id, t.source_file_id).where(t.id.in_(chunk))
            ).all()
            done.messages += conn.scalar(select(func.count()).where(m.thread_id.in_(chunk))) or 0
            files: dict[int, set[int]] = {r.id: {r.source_file_id} - {None} for r in rows}
            for table in (m, u):
                for tid, fid in conn.execute(
                    select(table.thread_id, table.source_file_id)
                    .where(table.thread_id.in_(chunk), table.source_file_id.is_not(None))
                    .distinct()
                ):
                    if fid is not None:
                        files[tid].add(fid)
            now = utcnow()
            for r in rows:
                conn.execute(
                    delete(s.ForgottenThread).where(
                        s.ForgottenThread.agent == r.agent,
                        s.ForgottenThread.native_id == r.native_id,
                    )
                )
                conn.execute(
                    s.ForgottenThread.__table__.insert().values(
                        agent=r.agent,
                        native_id=r.native_id,
                        files=sorted(files[r.id]),
                        forgotten_at=now,
                    )
                )
            # The parent link first: a sub-agent's parent may go in another chunk.
            conn.execute(t.__table__.update().where(t.parent_id.in_(chunk)).values(parent_id=None))
            if conn.dialect.name == "sqlite":  # its messages' words out of the index first
                search.unindex(DriverSql(conn), f"thread_id IN ({marks(len(chunk))})", chunk)
            conn.execute(delete(t).where(t.id.in_(chunk)))
            done.threads += len(rows)
    return done


def tombstones(conn) -> set[tuple[str, str]]:
    """The (agent, native id) of every forgotten thread."""
    rows = DriverSql(conn).all("SELECT agent, native_id FROM forgotten_threads")
    return {(agent, native) for agent, native in rows}


def remember_again(conn) -> None:
    """Drop every tombstone, and the read positions of the files their threads came from, so
    that the next reads take those files from their start (`ingest --include-forgotten`)."""
    db = DriverSql(conn)
    files: set[int] = set()
    for (ids,) in db.all("SELECT files FROM forgotten_threads"):
        files.update(orjson.loads(ids) if isinstance(ids, str | bytes) else ids or [])
    if files:
        ordered = sorted(files)
        db.execute(f"DELETE FROM source_files WHERE id IN ({marks(len(ordered))})", ordered)
    db.execute("DELETE FROM forgotten_threads")
