"""The tool round a live tool event is about, read while Claude Code is still writing it.

Claude Code writes a model answer as one line per content block, every line carrying the
answer's message id, and starts a call as soon as its block has arrived: results are written in
the order the calls finish, often before the answer's later calls (the corpus's sessions
do it in 60 of their 168 multi-call answers). The worker reads the transcript at each
tool event; whatever it reads, the round it audits must be the whole answer's, the same for
every call of it, never the calls written so far.
"""

from __future__ import annotations

import itertools
import json
import uuid
from pathlib import Path

from auditor.audit.checkpoints import INFERENCE, find_checkpoints
from auditor.live import lookup
from auditor.store.threads import load_messages

SESSION = "5b2f0d3e-8c1a-4e6f-9d7b-2a4c6e8f0a1b"


class Transcript:
    """Lines as Claude Code 2.1 writes them: user prompt, one line per block of an answer
    (shared `message.id` and `requestId`), one line per tool result."""

    def __init__(self):
        self.lines: list[dict] = []
        self.parent: str | None = None
        self.calls: dict[str, str] = {}  # tool_use_id -> uuid of its line
        self.clock = itertools.count()

    def _add(self, record: dict, parent: str | None = None) -> None:
        record.update(
            uuid=str(uuid.uuid4()),
            parentUuid=parent or self.parent,
            isSidechain=False,
            sessionId=SESSION,
            timestamp=f"2026-11-27T10:00:{next(self.clock):02d}.000Z",
            cwd="/home/u/project",
            version="2.1.97",
            userType="external",
        )
        self.parent = record["uuid"]
        self.lines.append(record)

    def prompt(self, text: str) -> None:
        self._add({"type": "user", "message": {"role": "user", "content": text}})

    def block(self, answer: int, block: dict) -> None:
        message = {
            "id": f"msg_{answer:024d}",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-6",
            "content": [block],
            "stop_reason": "tool_use",  # on every line, as 2.1.97 often writes it
            "usage": {"input_tokens": 100, "output_tokens": 20},
        }
        self._add({"type": "assistant", "message": message, "requestId": f"req_{answer:024d}"})
        if block["type"] == "tool_use":
            self.calls[block["id"]] = self.parent

    def call(self, answer: int, call_id: str, command: str) -> None:
        self.block(
            answer,
            {"type": "tool_use", "id": call_id, "name": "Bash", "input": {"command": command}},
        )

    def text(self, answer: int, text: str) -> None:
        self.block(answer, {"type": "text", "text": text})

    def result(self, call_id: str, output: str = "ok") -> None:
        source = self.calls[call_id]
        content = [{"tool_use_id": call_id, "type": "tool_result", "content": output}]
        self._add(
            {
                "type": "user",
                "message": {"role": "user", "content": content},
                "toolUseResult": {"stdout": output, "stderr": "", "interrupted": False},
                "sourceToolAssistantUUID": source,
            },
            parent=source,
        )

    def write(self, path: Path, upto: int | None = None) -> Path:
        path.write_text("".join(json.dumps(r) + "\n" for r in self.lines[:upto]))
        return path


def stored(engine, plugins, path: Path) -> tuple[int, list]:
    """The thread as the worker has it after reading `path` (the live hooks' own ingest)."""
    lookup.ingest(engine, plugins, "claude-code", str(path))
    thread = lookup.find_thread(engine, "claude-code", SESSION)
    return thread.id, load_messages(engine, thread.id)


def native(messages: list, index: int) -> str:
    return messages[index].native_id


def test_every_call_of_an_answer_has_the_round_of_the_whole_answer(engine, plugins, tmp_path):
    # The real client's order in the live test's turn C: five calls, then the results as the
    # calls finished. The last call's result came second: it does not end the round.
    t = Transcript()
    t.prompt("Tidy up the module.")
    for n in range(1, 6):
        t.call(1, f"toolu_c{n}", f"step {n}")
    for n in (1, 5, 4, 2, 3):
        t.result(f"toolu_c{n}")
    t.text(2, "Tidied.")
    _, messages = stored(engine, plugins, t.write(tmp_path / f"{SESSION}.jsonl"))
    last_result = native(messages, -2)
    assert {lookup.round_answered(messages, f"toolu_c{n}") for n in range(1, 6)} == {last_result}


def test_a_transcript_cut_between_the_calls_of_one_answer_has_no_round_yet(
    engine, plugins, tmp_path
):
    # As 2.1.97 writes a slow answer: the first call ran (and answered) before the second
    # call's block arrived. Read in between, the first call's result answers every call
    # written so far, but the answer is not over.
    t = Transcript()
    t.prompt("Look around.")
    t.text(1, "I'll look first.")
    t.call(1, "toolu_1", "ls")
    t.result("toolu_1")
    cut = len(t.lines)
    t.call(1, "toolu_2", "cat README")
    t.result("toolu_2")
    t.call(2, "toolu_3", "wc -l README")
    path = tmp_path / f"{SESSION}.jsonl"

    tid, messages = stored(engine, plugins, t.write(path, cut))
    assert lookup.round_answered(messages, "toolu_1") is None
    assert lookup.response_open(messages, "toolu_1")
    assert lookup.tool_round(tid, messages, "toolu_1") is None

    # The second call and its result are written: still the same answer, still open.
    tid, messages = stored(engine, plugins, t.write(path, cut + 2))
    assert lookup.round_answered(messages, "toolu_2") is None
    assert lookup.response_open(messages, "toolu_2")

    # The next answer's first line ends it: one round, both calls, for either event.
    tid, messages = stored(engine, plugins, t.write(path))
    end = native(messages, -2)
    assert lookup.round_answered(messages, "toolu_1") == end
    assert lookup.round_answered(messages, "toolu_2") == end
    assert not lookup.response_open(messages, "toolu_1")
    cp = lookup.tool_round(tid, messages, "toolu_1")
    assert (cp.message_id, cp.tool_calls) == (end, 2)


def test_a_round_the_user_broke_off_is_never_complete(engine, plugins, tmp_path):
    t = Transcript()
    t.prompt("Run the tests.")
    t.call(1, "toolu_1", "pytest")
    t.call(1, "toolu_2", "pytest -k slow")
    t.result("toolu_1")
    t.prompt("Stop, that takes too long.")
    _, messages = stored(engine, plugins, t.write(tmp_path / f"{SESSION}.jsonl"))
    assert lookup.round_answered(messages, "toolu_1") is None
    assert not lookup.response_open(messages, "toolu_1")


def test_on_the_corpus_a_round_read_early_is_the_round_of_the_whole_thread(corpus, engine, plugins):
    # Every prefix of real sessions a tool event could read (each line as it is written): a
    # round found there is the one the whole thread has for that call. These sessions hold
    # answers whose results were written between their calls.
    from sqlalchemy import select

    from auditor.ingest.ingester import ingest
    from auditor.store import schema as s

    ingest(
        engine,
        plugins,
        [
            corpus / "claude-code/marot-spotter",
            corpus / "claude-code/daaain-claude-code-log/-experiments-worktrees",
        ],
    )
    with engine.connect() as conn:
        threads = conn.execute(select(s.Thread.id).where(s.Thread.agent == "claude-code"))
        threads = threads.scalars().all()
    rounds = early = 0
    for tid in threads:
        messages = load_messages(engine, tid)
        calls = [
            (i, b.tool_use_id)
            for i, m in enumerate(messages)
            for b in m.blocks
            if b.kind == "tool_result" and b.tool_use_id
        ]
        whole = {call: lookup.round_answered(messages, call) for _, call in calls}
        rounds += len({v for v in whole.values() if v})
        # One answer, one round: every call of it has the same.
        answer_of = {
            b.tool_use_id: m.usage_key
            for m in messages
            for b in m.blocks
            if b.kind == "tool_use" and m.usage_key
        }
        by_answer: dict[str, set] = {}
        for call, end in whole.items():
            if call in answer_of:
                by_answer.setdefault(answer_of[call], set()).add(end)
        assert all(len(ends) == 1 for ends in by_answer.values()), by_answer
        # Batch planning (every-inference mode) has the same rounds: a checkpoint where the
        # model's next answer follows a round, none inside an answer.
        followed = {
            m.native_id
            for m, nxt in zip(messages, messages[1:], strict=False)
            if nxt.role == "assistant"
        }
        planned = {
            cp.message_id
            for cp in find_checkpoints(tid, messages, "every-inference")
            if cp.kind == INFERENCE
        }
        assert planned == {end for end in whole.values() if end in followed}
        for i, call in calls:
            # From the call's result on, up to 40 lines: what the worker may read at its event.
            for k in range(i + 1, min(i + 41, len(messages) + 1)):
                found = lookup.round_answered(messages[:k], call)
                if found is not None:
                    assert found == whole[call], (messages[i].native_id, k)
                    early += k < len(messages)
                    break
    assert rounds > 300 and early > 300
