"""Evaluation on labels: audit labelled checkpoints (paid observer calls) and score the answers."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, text

from ..errors import AuditorError
from ..reports.shared import Report, ratio

if TYPE_CHECKING:
    from .observer_audit import Auditor


@dataclass
class Label:
    """One line of a labels file: the checkpoint ending at message `at` of a thread, and the truth."""

    line: int
    thread: Any  # the threads row
    at: str
    needs_correction: bool


STORED = "the store's labels"  # what a stored label's place reads as in messages


def labels_in_store(engine: Engine) -> list[Label]:
    """The labels marked on `auditor serve`'s review page; `line` is the label's id."""
    from ..store.labels import stored_labels
    from ..store.threads import find_thread

    labels = [
        Label(lb.id, find_thread(engine, str(lb.thread_id)), lb.at, lb.needs_correction)
        for lb in stored_labels(engine)
    ]
    if not labels:
        raise AuditorError(
            "the store holds no labels: mark corrections right or wrong on the review page of "
            "`auditor serve`, or give a labels file (auditor eval LABELS.jsonl)"
        )
    return labels


def read_labels(engine: Engine, path: str) -> list[Label]:
    """Read LABELS.jsonl: lines of {"thread" or "file", "at", "needs_correction"}.

    `thread` is a database id, native id or unique prefix; `file` a transcript already ingested,
    whose thread is the one holding message `at`.
    """
    import os

    import orjson

    from ..store.threads import find_thread

    try:
        raw_lines = Path(path).read_bytes().splitlines()
    except OSError as exc:
        raise AuditorError(f"Cannot read labels {path}: {exc.strerror}") from None
    labels = []
    with engine.connect() as conn:
        for n, raw in enumerate(raw_lines, 1):
            if not raw.strip():
                continue
            where = f"{path}:{n}"
            try:
                obj = orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                raise AuditorError(f"{where}: not JSON ({exc})") from None
            if (
                not isinstance(obj, dict)
                or not isinstance(obj.get("at"), str)
                or not isinstance(obj.get("needs_correction"), bool)
                or not (obj.get("thread") or obj.get("file"))
            ):
                raise AuditorError(
                    f'{where}: expected {{"thread" or "file": ..., "at": MESSAGE_ID, '
                    f'"needs_correction": true|false}}, got {raw.decode(errors="replace")[:120]}'
                )
            if obj.get("thread"):
                try:
                    thread = find_thread(engine, str(obj["thread"]))
                except AuditorError as exc:  # which label named it
                    raise AuditorError(f"{where}: {exc}") from None
            else:
                file = os.path.abspath(os.path.expanduser(obj["file"]))
                found = conn.execute(
                    text(
                        "SELECT m.thread_id FROM messages m JOIN source_files f ON f.id = m.source_file_id "
                        "WHERE f.path = :p AND m.native_id = :at LIMIT 1"
                    ),
                    {"p": file, "at": obj["at"]},
                ).first()
                if found is None:
                    raise AuditorError(
                        f"{where}: no message {obj['at']!r} read from {file}; "
                        f"ingest it first: auditor ingest {file}"
                    )
                thread = find_thread(engine, str(found[0]))
            labels.append(Label(n, thread, obj["at"], obj["needs_correction"]))
    if not labels:
        raise AuditorError(f"{path} holds no labels")
    return labels


def evaluate(engine: Engine, plugins, labels_path: str | None, config) -> Report:
    """Audit (or reuse the verdicts at) the labelled checkpoints and score the answers.

    The gate applies as in `auditor run`: a checkpoint it holds back counts as "no correction",
    so the figures judge gate and prompt together. Calls that fail or break the tool contract
    are listed and left out of the scores. Rows are the labels with their outcome; `extra` has
    the confusion matrix, precision, recall, F1 and accuracy. Without `labels_path`, the
    labels are those marked in the store (`auditor serve`'s review page).
    """
    import asyncio

    from ..store.threads import load_messages
    from .checkpoints import checkpoint_at
    from .observer_audit import Auditor, audit_checkpoint

    if labels_path is None:
        labels, labels_path = labels_in_store(engine), STORED
    else:
        labels = read_labels(engine, labels_path)
    if config.agents is None:  # an observer of another vendor than every labelled thread's
        config = replace(config, agents=sorted({label.thread.agent for label in labels}))
    auditor = Auditor(engine, plugins, config)
    auditor.caller.ensure_usable()
    mode = auditor.planner.checkpoints.gate_config["mode"]
    messages: dict[int, list] = {}
    planned: list[tuple[Label, Any, Any]] = []  # (label, checkpoint, job or None)
    with auditor.recorder.recording():
        for label in labels:
            tid = label.thread.id
            if tid not in messages:
                messages[tid] = load_messages(engine, tid)
            try:
                cp = checkpoint_at(tid, messages[tid], label.at, mode)
            except KeyError:
                raise AuditorError(
                    f"{labels_path}:{label.line}: thread {label.thread.native_id} has no message "
                    f"{label.at!r}"
                ) from None
            with engine.begin() as conn:
                job = auditor.planner.plan_checkpoint(conn, cp, label.thread, messages[tid])
            planned.append((label, cp, job))

        async def call_all() -> None:
            gate = asyncio.Semaphore(auditor.concurrency)

            async def one(job) -> None:
                async with gate:
                    job.answered = await audit_checkpoint(auditor, job) or job.answered

            await asyncio.gather(
                *(one(j) for _, _, j in planned if j is not None and j.answered is None)
            )

        asyncio.run(call_all())
    return _score(engine, planned, auditor, labels_path)


def _score(engine: Engine, planned, auditor: Auditor, labels_path: str) -> Report:
    ids = [j.answered for _, _, j in planned if j is not None and j.answered is not None]
    with engine.connect() as conn:
        verdicts = {
            r.id: r
            for r in conn.execute(
                text(
                    f"SELECT id, status, needs_correction, message, problem FROM verdicts WHERE id IN ({','.join(map(str, ids)) or 'NULL'})"
                )
            )
        }
        reasons = {
            (r.thread_id, r.message_native_id, r.kind): r.gate_reason
            for r in conn.execute(
                text(
                    "SELECT thread_id, message_native_id, kind, gate_reason FROM checkpoints WHERE thread_id IN "
                    f"({','.join(str(lb.thread.id) for lb, _, _ in planned)})"
                )
            )
        }
    counts = {"tp": 0, "fp": 0, "fn": 0, "tn": 0}
    rows, failed, gated = [], 0, 0
    for label, cp, job in planned:
        v = verdicts.get(job.answered) if job is not None else None
        row = {
            "line": label.line,
            "thread": label.thread.id,
            "thread_native_id": label.thread.native_id,
            "at": label.at,
            "label": label.needs_correction,
            "predicted": None,
            "outcome": None,
            "gate": reasons.get((cp.thread_id, cp.message_id, cp.kind)),
            "verdict": job.answered if job else None,
            "message": None,
        }
        if job is None:
            row["predicted"] = False
            gated += 1
        elif v is None or v.status != "ok":
            row["outcome"] = "failed" if v is None or v.status == "error" else "invalid"
            row["message"] = (
                v.problem if v is not None else "the call was not made (held by another run)"
            )
            failed += 1
            rows.append(row)
            continue
        else:
            row["predicted"], row["message"] = bool(v.needs_correction), v.message
        key = ("t" if row["predicted"] == label.needs_correction else "f") + (
            "p" if row["predicted"] else "n"
        )
        counts[key] += 1
        row["outcome"] = {"tp": "caught", "tn": "left alone", "fp": "false alarm", "fn": "missed"}[
            key
        ]
        rows.append(row)
    tp, fp, fn, tn = counts["tp"], counts["fp"], counts["fn"], counts["tn"]
    precision, recall = ratio(tp, tp + fp), ratio(tp, tp + fn)
    f1 = None if not precision or not recall else 2 * precision * recall / (precision + recall)
    extra = {
        "observer": auditor.observing.name,
        "model": auditor.observing.model,
        "run": auditor.summary.run_id,
        "labels": len(planned),
        "scored": tp + fp + fn + tn,
        "gated_out": gated,
        "failed": failed,
        "confusion": counts,
        "precision": precision,
        "recall": recall,
        "f1": f1,
        "accuracy": ratio(tp + tn, tp + fp + fn + tn),
        "calls_made": auditor.summary.audited + auditor.summary.invalid + auditor.summary.errors,
        "reused": auditor.summary.reused,
    }
    notes = (
        [f"{failed} labelled checkpoints got no valid answer and are not scored"] if failed else []
    )
    cols = [
        "line",
        "thread",
        "thread_native_id",
        "at",
        "label",
        "predicted",
        "outcome",
        "gate",
        "verdict",
        "message",
    ]
    return Report("eval", [], cols, rows, None, notes, extra)
