"""The formatter's fit takes its first steps at once on a long thread (issue 26): when no state
on the way through them can fit the budget, the earlier turns' units are set as those steps
leave them, rather than sized at every level and left out one by one. What it renders is,
byte for byte, what the steps taken one unit at a time render.

Real sessions are rendered checkpoint after checkpoint, as the live worker renders them (the
thread's units kept from one checkpoint to the next), each checkpoint both ways, under the
default budget and under small ones that make the fit go on to the current turn's steps."""

from __future__ import annotations

import pytest
from auditor_plugins import formatter
from helpers.live import CODEX_ROLLOUT
from sqlalchemy import select

from auditor.audit.checkpoints import find_checkpoints
from auditor.live import lookup
from auditor.store import schema as s
from auditor.store.threads import load_messages

pytestmark = pytest.mark.corpus

SESSIONS = [
    ("claude-code", "claude-code/marot-spotter/4d5611e5-241a-462a-8d15-5122611a9569.jsonl"),
    ("claude-code", "claude-code/marot-spotter/ae4a77f8-aedd-4bc1-888f-c94edc91af04.jsonl"),
    ("codex", CODEX_ROLLOUT),
]
BUDGETS = {
    "default": {},
    "small": {"min_tokens": 2500, "max_tokens": 4000},
    # The current turn alone is over it: the fit goes on to leave out the turn's own calls.
    "tiny": {"min_tokens": 600, "max_tokens": 900, "tokens_per_call": 0},
}


def _fit_state(thread_units) -> list[tuple[int, bool]]:
    return [(u.level, u.dropped) for u in thread_units.units]


@pytest.mark.parametrize(("agent", "session"), SESSIONS, ids=lambda v: v.split("/")[-1][:12])
def test_a_long_threads_fit_at_once_renders_as_one_unit_at_a_time(
    corpus, tmp_path, engine, plugins, monkeypatch, agent, session
):
    path = tmp_path / "session.jsonl"
    path.write_bytes((corpus / session).read_bytes())
    lookup.ingest(engine, plugins, plugins.live_agent(agent)[0], str(path))
    with engine.connect() as conn:
        thread = conn.execute(select(s.Thread.__table__)).first()
    messages = load_messages(engine, thread.id)
    checkpoints = find_checkpoints(thread.id, messages, "every-inference")
    assert len(checkpoints) > 5

    taken = []
    real = formatter._earlier_turns_go

    def counted(*args):
        went = real(*args)
        taken.append(went)
        return went

    monkeypatch.setattr(formatter, "_earlier_turns_go", counted)
    for budget, config in BUDGETS.items():
        formatter.forget()
        for cp in checkpoints:
            upto = messages[: cp.index + 1]
            monkeypatch.setattr(formatter, "EARLIER_TURNS_AT_ONCE", False)
            one_by_one = formatter.render(cp, thread, upto, config)
            state = next(iter(formatter._THREADS.values()))
            levels = _fit_state(state)
            monkeypatch.setattr(formatter, "EARLIER_TURNS_AT_ONCE", True)
            at_once = formatter.render(cp, thread, upto, config)
            where = f"{session}, {budget} budget, the checkpoint at message {cp.index}"
            assert at_once == one_by_one, where
            # Left-out units' levels are never shown: only the kept ones must agree.
            now = _fit_state(state)
            assert [x for x in now if not x[1]] == [x for x in levels if not x[1]], where
            assert [d for _, d in now] == [d for _, d in levels], where
    # The steps were taken at once on many checkpoints: the comparison tested something.
    assert sum(taken) >= 20
