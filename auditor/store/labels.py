"""Labels a person gave in the store: whether a checkpoint needed a course correction.

The review page of `auditor serve` shows each correction an observer asked for, and the
person marks it right (the checkpoint needed a correction) or wrong (it did not). The mark is
kept per checkpoint, as a labels file keeps it (`thread`, `at`, `needs_correction`), so that
`auditor eval` scores observers against the store's labels as against a file, and
`report verdicts` counts the corrections judged each way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, delete, select, tuple_

from ..errors import AuditorError
from . import schema as s
from .db import utcnow
from .search import searchable
from .verdict_rows import list_verdicts


@dataclass
class StoredLabel:
    id: int
    thread_id: int
    at: str  # the native id of the message the checkpoint ends at
    needs_correction: bool
    verdict_id: int | None


def mark(engine: Engine, verdict_id: int, right: bool | None) -> StoredLabel | None:
    """Label the checkpoint of correction `verdict_id`: right (it needed a correction), wrong
    (it did not), or None to take the label back. Return the label kept."""
    v, c, lb = s.Verdict, s.Checkpoint, s.Label
    with engine.begin() as conn:
        found: Any = conn.execute(
            select(v.thread_id, c.message_native_id, v.status, v.needs_correction)
            .join(c, c.id == v.checkpoint_id)
            .where(v.id == verdict_id)
        ).first()
        if found is None or found.status != "ok" or not found.needs_correction:
            raise AuditorError(
                f"verdict {verdict_id} is no correction in this store: "
                "`auditor verdicts --corrections` lists them"
            )
        conn.execute(
            delete(lb).where(lb.thread_id == found.thread_id, lb.message_native_id == found[1])
        )
        if right is None:
            return None
        new_id = conn.execute(
            lb.__table__.insert()
            .values(
                thread_id=found.thread_id,
                message_native_id=found[1],
                needs_correction=right,
                verdict_id=verdict_id,
                labelled_at=utcnow(),
            )
            .returning(lb.id)
        ).scalar_one()
    return StoredLabel(new_id, found.thread_id, found[1], right, verdict_id)


def stored_labels(engine: Engine) -> list[StoredLabel]:
    """Every label in the store, oldest first."""
    lb = s.Label
    with engine.connect() as conn:
        rows = conn.execute(select(lb).order_by(lb.labelled_at, lb.id)).all()
    return [
        StoredLabel(r.id, r.thread_id, r.message_native_id, r.needs_correction, r.verdict_id)
        for r in rows
    ]


def thread_marks(engine: Engine, thread_id: int) -> dict[str, bool]:
    """The labels of one thread's checkpoints, by the native id of the message each ends at:
    True where the person judged that a correction was needed there, False where not."""
    lb = s.Label
    with engine.connect() as conn:
        rows = conn.execute(
            select(lb.message_native_id, lb.needs_correction).where(lb.thread_id == thread_id)
        ).all()
    return {at: bool(needs) for at, needs in rows}


def corrections_with_labels(
    engine: Engine, *, unreviewed: bool = False, limit: int | None = None
) -> list[dict[str, Any]]:
    """The corrections observers asked for, newest first, as `list_verdicts` gives them (with
    cost and delivery), each with `label` (True: judged right, False: wrong, None: not yet)
    and `said` (the text of the message the checkpoint ends at, what the agent last said)."""
    rows = list_verdicts(engine, corrections=True, limit=None)
    keys = {(r["thread_id"], r["message_id"]) for r in rows}
    labels: dict[tuple[int, str], bool] = {}
    said: dict[tuple[int, str], str] = {}
    if keys:
        lb, m = s.Label, s.Message
        with engine.connect() as conn:
            for chunk in _chunks(sorted(keys)):
                for tid, at, needs in conn.execute(
                    select(lb.thread_id, lb.message_native_id, lb.needs_correction).where(
                        tuple_(lb.thread_id, lb.message_native_id).in_(chunk)
                    )
                ):
                    labels[(tid, at)] = bool(needs)
                for tid, at, blocks in conn.execute(
                    select(m.thread_id, m.native_id, m.blocks).where(
                        tuple_(m.thread_id, m.native_id).in_(chunk)
                    )
                ):
                    said[(tid, at)] = searchable(blocks)
    out = []
    for v in rows:
        key = (v["thread_id"], v["message_id"])
        v["label"] = labels.get(key)
        v["said"] = said.get(key, "")
        if unreviewed and v["label"] is not None:
            continue
        out.append(v)
    return out[:limit] if limit else out


def _chunks(keys: list, size: int = 400):
    for start in range(0, len(keys), size):
        yield keys[start : start + size]
