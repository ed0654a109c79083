"""The follow-up report: what the agent did after each course correction."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, text

from .shared import (
    Report,
    db_time,
    ratio,
    window_sql,
)

TEST_COMMAND = re.compile(
    r"\b(pytest|py\.test|tox|nox|unittest|(npm|pnpm|yarn|bun)( run)? test|jest|vitest|mocha|go test|cargo test|"
    r"cargo nextest|mvn( -\S+)* (test|verify)|gradle\w* test|make (test|check)|ctest|rspec|phpunit|dotnet test|"
    r"swift test|mix test|deno test)\b"
)
# How a person's reply that itself corrects the agent tends to start.
USER_CORRECTS = re.compile(
    r"^\s*(no\b|nope|stop\b|wait\b|don'?t\b|do not\b|that'?s (not|wrong)|this is (not|wrong)|wrong\b|you (didn'?t|did not|"
    r"broke|forgot|missed)|why (did|are|is)\b|revert|undo|not what i|that is not|it (still|doesn'?t)|still (fail|broken))",
    re.IGNORECASE,
)
FOLLOWUP_COLS = [
    "thread",
    "thread_native_id",
    "agent",
    "correction_id",
    "at",
    "continued",
    "edited_files",
    "ran_tests",
    "next_checkpoint",
    "user_wrote_next",
    "user_corrected",
    "acted_on",
]


def _commands(block) -> str:
    data = block.tool_input
    if isinstance(data, dict):
        data = data.get("command") or data.get("cmd") or data.get("script") or ""
    if isinstance(data, list):
        data = " ".join(map(str, data))
    return data if isinstance(data, str) else ""


def followup_report(
    engine: Engine, since: datetime | None = None, until: datetime | None = None
) -> Report:
    """Return, for each course correction found in a thread, what the agent did next.

    The window after a correction runs to the next message a person typed, the next correction
    or the end of the thread. `edited_files`: a tool call there changed files; `ran_tests`: a
    command ran a test runner; `next_checkpoint`: the latest valid verdict at the first audited
    checkpoint after the correction (`passed`, `corrected again`, or None when none was
    audited); `user_corrected`: the person's next message reads as a correction of their own
    (it starts "no", "stop", "that's wrong", "you didn't"...). `acted_on`: the agent went on and
    edited files or ran tests. Totals give the share of corrections acted on.
    """
    from ..model import SOURCE_COURSE_CORRECTION
    from ..store.threads import load_messages

    params: dict[str, Any] = {"cc": SOURCE_COURSE_CORRECTION}
    window = window_sql("m.timestamp", since, until, params)
    with engine.connect() as conn:
        threads = conn.execute(
            text(
                "SELECT DISTINCT t.id, t.native_id, t.agent FROM messages m JOIN threads t ON t.id = m.thread_id "
                f"WHERE m.source_type = :cc AND {window} ORDER BY t.id"
            ),
            params,
        ).all()
        verdicts: dict[tuple[int, str], Any] = {}
        if threads:
            for r in conn.execute(
                text(
                    "SELECT c.thread_id, c.message_native_id, v.needs_correction FROM checkpoints c "
                    "JOIN verdicts v ON v.checkpoint_id = c.id WHERE v.id IN (SELECT max(v.id) "
                    "FROM checkpoints c JOIN verdicts v ON v.checkpoint_id = c.id AND v.status = 'ok' "
                    f"WHERE c.thread_id IN ({','.join(str(t.id) for t in threads)}) "
                    "GROUP BY c.thread_id, c.message_native_id)"
                )
            ):
                verdicts[(r[0], r[1])] = bool(r[2])
    rows = []
    for t in threads:
        messages = load_messages(engine, t.id)
        for i, m in enumerate(messages):
            if m.source_type != SOURCE_COURSE_CORRECTION:
                continue
            when = db_time(m.timestamp) if m.timestamp else None
            if (since and (when is None or when < db_time(since))) or (
                until and (when is None or when >= db_time(until))
            ):
                continue
            row = {
                "thread": t.id,
                "thread_native_id": t.native_id,
                "agent": t.agent,
                "correction_id": m.native_id,
                "at": when[:19] if when else None,
                "continued": False,
                "edited_files": False,
                "ran_tests": False,
                "next_checkpoint": None,
                "user_wrote_next": False,
                "user_corrected": False,
            }
            for after in messages[i + 1 :]:
                if after.source_type == SOURCE_COURSE_CORRECTION:
                    break
                if after.role == "user" and after.source_type == "user":
                    row["user_wrote_next"] = True
                    row["user_corrected"] = bool(USER_CORRECTS.match(after.text or ""))
                    break
                if after.role == "assistant":
                    row["continued"] = True
                    for b in after.blocks:
                        if b.kind == "tool_use":
                            row["edited_files"] |= bool(b.is_file_edit)
                            row["ran_tests"] |= bool(TEST_COMMAND.search(_commands(b)))
            for after in messages[i + 1 :]:
                said = verdicts.get((t.id, after.native_id))
                if said is not None:
                    row["next_checkpoint"] = "corrected again" if said else "passed"
                    break
            row["acted_on"] = row["continued"] and (row["edited_files"] or row["ran_tests"])
            rows.append(row)
    n = len(rows)
    continued = sum(r["continued"] for r in rows)
    total: dict[str, Any] = {c: None for c in FOLLOWUP_COLS}
    for c in (
        "continued",
        "edited_files",
        "ran_tests",
        "user_wrote_next",
        "user_corrected",
        "acted_on",
    ):
        total[c] = sum(r[c] for r in rows)
    total["next_checkpoint"] = {
        k: sum(r["next_checkpoint"] == k for r in rows) for k in ("passed", "corrected again")
    }
    extra = {
        "corrections": n,
        "continued": continued,
        "acted_on": total["acted_on"],
        "acted_on_share": ratio(total["acted_on"], continued),
    }
    notes = (
        []
        if n
        else [
            "no course correction found in the stored threads (see `auditor inject` and the hooks)"
        ]
    )
    return Report("followup", [], FOLLOWUP_COLS, rows, total, notes, extra)
