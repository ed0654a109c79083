"""A thread rendered checkpoint after checkpoint as the live worker renders it prints, byte for
byte, what a render from nothing prints (issue 26: the formatter keeps a thread's units from one
hook event to the next and makes again only what the new messages change).

Real sessions grow here as they did for the agent: their transcript is written out a few lines
at a time, the session's worker reads each new part into the store and loads the rows stored
since, and each checkpoint that appeared is rendered from the thread the formatter kept, then
from copies of the same messages, which it has never seen."""

from __future__ import annotations

import copy

import pytest
from auditor_plugins import formatter
from helpers.live import CODEX_ROLLOUT
from sqlalchemy import select

from auditor.audit.checkpoints import find_checkpoints
from auditor.audit.run_types import RunConfig
from auditor.live.worker import Worker
from auditor.store import schema as s

pytestmark = pytest.mark.corpus

# The long session the live benchmark replays (`benchmarks/live.py`), and a Codex rollout.
SESSIONS = [
    ("claude-code", "claude-code/marot-spotter/4d5611e5-241a-462a-8d15-5122611a9569.jsonl"),
    ("codex", CODEX_ROLLOUT),
]
STEPS = 60  # looks at the transcript as it grows


@pytest.mark.parametrize(("agent", "session"), SESSIONS, ids=[a for a, _ in SESSIONS])
def test_each_checkpoint_of_a_growing_session_renders_as_from_nothing(
    corpus, tmp_path, engine, plugins, monkeypatch, agent, session
):
    lines = (corpus / session).read_bytes().splitlines(keepends=True)
    path = tmp_path / "session.jsonl"
    path.write_bytes(b"")
    worker = Worker(str(tmp_path / "spool"), agent, engine, plugins, RunConfig())
    calls = {"grown": 0, "alone": 0}
    real = formatter._render_call
    which = ["grown"]

    def counted(*args, **kwargs):
        calls[which[0]] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(formatter, "_render_call", counted)
    formatter.forget()
    rendered, done = 0, -1
    step = -(-len(lines) // STEPS)
    for stop in range(step, len(lines) + step, step):
        with open(path, "ab") as out:
            out.writelines(lines[stop - step : stop])
        worker._ingest(str(path))
        with engine.connect() as conn:
            thread = conn.execute(select(s.Thread.__table__)).first()
        if thread is None:
            continue
        messages = worker._messages(thread.id)
        for cp in find_checkpoints(thread.id, messages, "every-inference"):
            if cp.index <= done:
                continue
            upto = messages[: cp.index + 1]
            which[0] = "grown"
            grown = formatter.render(cp, thread, upto, {})
            which[0] = "alone"
            alone = formatter.render(cp, thread, [copy.copy(m) for m in upto], {})
            assert grown == alone, f"{session}: the checkpoint at message {cp.index}"
            rendered, done = rendered + 1, cp.index
    assert rendered > 30
    # The thread kept between checkpoints was used: its calls were rendered far fewer times.
    assert calls["grown"] * 3 < calls["alone"]
