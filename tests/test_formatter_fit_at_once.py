"""The formatter's fit sizes a long thread's earlier units only as far as its decisions need
them, and takes its first steps at once when no state on the way through them can fit (issue
26): the earlier turns' calls that are left out are never rendered under the checkpoint's
focus. What it renders is, byte for byte, what the fit as first written renders: every unit
sized, one step and one unit at a time (`plain_fit` below, kept as it was).

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


def plain_fit(units: list, budget: int) -> None:
    """The fit as it was written first: every unit sized, one step at a time."""
    total = 0
    for u in units:
        total += formatter._size(u, u.level)  # kept in the unit's sizes once found
    marker = formatter.estimate_tokens(formatter._omitted(100, 100)) + 1
    runs = 0
    low = len(formatter.LEVELS)

    def over() -> bool:
        return total + runs * marker > budget

    # The two loops below run over every earlier unit of a long thread at each checkpoint:
    # sizes are read from each unit's list of them (`Unit.sizes`), filled as they are asked for.
    def shrink(group: list, first: int, stop: int) -> bool:
        nonlocal total
        for level in range(first, stop):
            for u in group:
                if not u.dropped and u.level < level:
                    total += formatter._size(u, level) - formatter._size(u, u.level)
                    u.level = level
            if not over():
                return True
        return False

    last = len(units) - 1

    def drop(group: list) -> bool:
        nonlocal total, runs
        for u in group:  # oldest first
            if u.dropped:
                continue
            pos = u.pos
            left = pos > 0 and units[pos - 1].dropped
            right = pos < last and units[pos + 1].dropped
            runs += 1 - left - right
            size = u.sizes[u.level]
            total -= u.tokens() if size is None else size
            u.dropped = True
            if not over():
                return True
        return False

    if not over():
        return
    # What is never cut may alone exceed the budget (a long pasted log, a command's expanded
    # template): the rest still gets a share of the budget rather than nothing.
    budget = max(
        budget, sum(u.tokens() for u in units if u.protected) + int(budget * formatter.ROOM)
    )
    if not over():
        return
    movable = [u for u in units if not u.protected]
    old = [u for u in movable if not u.current]
    current = [u for u in movable if u.current]
    recent = current[-3:]  # what the agent saw last before it stopped
    # The user's replies inside tool results count as prose.
    old_prose = [u for u in old if u.kind == formatter.PROSE or u.replies]
    old_tools = [u for u in old if not (u.kind == formatter.PROSE or u.replies)]
    prose = [u for u in current if u.kind == formatter.PROSE or u.replies]
    tools = [u for u in current if not (u.kind == formatter.PROSE or u.replies)]
    latest = {u.key: u for u in tools if u.kind == formatter.TOOL}
    superseded = [
        u for u in tools if u.kind == formatter.TOOL and latest[u.key] is not u and not u.failed
    ]
    looks = [u for u in tools if not u.acts]
    steps = [
        lambda: shrink(old_tools, 1, low),
        lambda: shrink(tools, 1, formatter.RESULTS_ONLY),
        lambda: drop([u for u in old_tools if not u.late]),
        lambda: shrink(old_prose, 1, low),
        lambda: drop([u for u in old if not u.late and not u.answered]),
        lambda: drop([u for u in old if not u.answered]),
        lambda: shrink(tools, formatter.RESULTS_ONLY, low),
        lambda: drop([u for u in superseded if u not in recent]),
        lambda: drop([u for u in looks if not u.failed and u not in recent]),
        lambda: drop([u for u in tools if not u.failed and u not in recent]),
        lambda: drop([u for u in tools if u not in recent]),
        lambda: drop(old),
        lambda: shrink(prose, 1, low),
        lambda: drop([u for u in prose if u not in recent]),
        lambda: drop(recent),
    ]
    for step in steps:
        if step():
            return


def _fit_state(thread_units) -> list[tuple[int, bool]]:
    return [(u.level, u.dropped) for u in thread_units.units]


@pytest.mark.parametrize(("agent", "session"), SESSIONS, ids=lambda v: v.split("/")[-1][:12])
def test_a_long_threads_fit_renders_as_the_plain_fit(
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

    real_fit, real_go = formatter.fit, formatter._earlier_turns_go
    taken, sized, kept = [], [], []

    def plain(units, budget, ready, settled=None):
        if settled is not None:  # as the plain fit finds them: every unit at level 0
            settled.undo()
        for u in units:
            ready(u)
        plain_fit(units, budget)

    def counted_go(*args):
        went = real_go(*args)
        taken.append(went)
        return went

    def counted_fit(units, budget, ready, settled=None):
        seen = []
        made = real_fit(units, budget, lambda u: (seen.append(u), ready(u)), settled)
        sized.append(len({id(u) for u in seen}) / len(units))
        kept.append(settled is not None)
        return made

    monkeypatch.setattr(formatter, "_earlier_turns_go", counted_go)
    for budget, config in BUDGETS.items():
        formatter.forget()
        for cp in checkpoints:
            upto = messages[: cp.index + 1]
            monkeypatch.setattr(formatter, "fit", plain)
            one_by_one = formatter.render(cp, thread, upto, config)
            state = next(iter(formatter._THREADS.values()))
            levels = _fit_state(state)
            monkeypatch.setattr(formatter, "fit", counted_fit)
            lazily = formatter.render(cp, thread, upto, config)
            where = f"{session}, {budget} budget, the checkpoint at message {cp.index}"
            assert lazily == one_by_one, where
            # Left-out units' levels are never shown: only the kept ones must agree.
            now = _fit_state(state)
            assert [x for x in now if not x[1]] == [x for x in levels if not x[1]], where
            assert [d for _, d in now] == [d for _, d in levels], where
    # The first steps were taken at once on many checkpoints, and many fits sized less than
    # half of the units: the comparison tested both.
    assert sum(taken) >= 20
    assert sum(share < 0.5 for share in sized) >= 10

    # Checkpoint after checkpoint with the fit alone, as the live worker renders them: the
    # earlier turns left out at once at one checkpoint are left so at the next of the turn
    # (`formatter.Settled`), and each prompt is still the plain fit's.
    for budget, config in BUDGETS.items():
        renders = {}
        for name, how in (("plain", plain), ("kept", counted_fit)):
            monkeypatch.setattr(formatter, "fit", how)
            formatter.forget()
            renders[name] = [
                formatter.render(cp, thread, messages[: cp.index + 1], config) for cp in checkpoints
            ]
        for cp, a, b in zip(checkpoints, renders["plain"], renders["kept"], strict=True):
            assert a == b, f"{session}, {budget} budget, in order, at message {cp.index}"
    assert sum(kept) >= 10
