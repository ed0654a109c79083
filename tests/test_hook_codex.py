"""`auditor hook codex` as Codex CLI runs it: a subprocess on a real rollout copied from the corpus,
the observer a local server speaking the Gemini wire format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.live import CODEX_ROLLOUT, CODEX_TURN_END, copy_lines, rows, run_cli
from helpers.wire import Reply, Stub, gemini_response

from auditor.live.delivery import CORRECTION_MARKER
from auditor.store import schema as s
from auditor.store.db import open_db

pytestmark = [pytest.mark.corpus, pytest.mark.both_stores]
SESSION = "019b0254-78dd-7ea3-9224-5ae646e225ea"
FIRST = "You reported findings but never ran the plugin's tests after editing apply.ts; run them."


def correction(text: str) -> Reply:
    return Reply(200, gemini_response({"needsCorrection": True, "message": text}))


@pytest.fixture
def stub():
    server = Stub(correction(FIRST))
    yield server
    server.close()


@pytest.fixture
def rollout(corpus, tmp_path):
    """The rollout as Codex leaves it when the turn ends (its final agent message written)."""
    return copy_lines(
        corpus / CODEX_ROLLOUT, tmp_path / "sessions" / "rollout.jsonl", lines=CODEX_TURN_END
    )


def hook(stub, rollout, *args, turn="turn-1", **extra):
    last = json.loads(rollout.read_bytes().splitlines()[CODEX_TURN_END - 2])["payload"]["content"][
        0
    ]["text"]
    data = {
        "session_id": SESSION,
        "turn_id": turn,
        "transcript_path": str(rollout),
        "cwd": "/Users/aneeshar/repos",
        "model": "gpt-5-codex",
        "permission_mode": "default",
        "hook_event_name": "Stop",
        "stop_hook_active": False,
        "last_assistant_message": last,
    }
    data.update(extra)
    env = {"GEMINI_API_KEY": "AIza-TEST-dummy", "GOOGLE_GEMINI_BASE_URL": stub.url}
    return run_cli(
        "hook",
        "codex",
        "--sync",
        "--observer",
        "gemini",
        "--max-retries",
        "0",
        "--deadline",  # none a loaded machine reaches, unless the test gives its own
        "150",
        *args,
        stdin=json.dumps(data),
        env=env,
        timeout=180,
    )


def block(text: str) -> str:
    return json.dumps({"decision": "block", "reason": f"{CORRECTION_MARKER} {text}"}) + "\n"


def work(rollout, n: int, final: str, user: str | None = None) -> None:
    """Append what Codex writes when it goes on: optionally the hook's prompt as a user message,
    a tool call and its output, and a final agent message."""
    ts = "2025-12-09T09:30:00.000Z"
    lines = []
    if user is not None:
        lines.append(
            {
                "timestamp": ts,
                "type": "response_item",
                "payload": {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": user}],
                },
            }
        )
    lines += [
        {
            "timestamp": ts,
            "type": "response_item",
            "payload": {
                "type": "function_call",
                "name": "shell_command",
                "arguments": json.dumps({"command": "npm test"}),
                "call_id": f"call_more_{n}",
            },
        },
        {
            "timestamp": ts,
            "type": "response_item",
            "payload": {
                "type": "function_call_output",
                "call_id": f"call_more_{n}",
                "output": "Exit code: 0\nOutput:\n12 passing",
            },
        },
        {
            "timestamp": ts,
            "type": "response_item",
            "payload": {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": final}],
            },
        },
    ]
    with open(rollout, "a") as fh:
        fh.writelines(json.dumps(line) + "\n" for line in lines)


def test_a_correction_blocks_with_the_same_json_as_claude_code(stub, rollout, tmp_path):
    result = hook(stub, rollout)
    assert (result.returncode, result.stdout) == (0, block(FIRST))
    assert stub.last["path"].endswith(":generateContent")
    engine = open_db()
    [run] = rows(engine, s.Run)
    assert (run.observer, run.status, run.config["hook"]["turn_id"]) == ("gemini", "done", "turn-1")
    [injection] = rows(engine, s.Injection)
    assert (injection.injector, injection.status) == ("codex", "delivered")


def test_stop_hook_active_never_blocks(stub, rollout):
    result = hook(stub, rollout, stop_hook_active=True)
    assert (result.returncode, result.stdout) == (0, "")
    assert stub.log == []


def test_the_hook_prompt_codex_records_counts_as_a_correction(stub, rollout, tmp_path):
    """Codex records the block's reason as `<hook_prompt>` user text: the next stop is not audited."""
    assert hook(stub, rollout).stdout == block(FIRST)
    work(
        rollout,
        1,
        "Tests pass now.",
        user=f'<hook_prompt hook_run_id="r1">{CORRECTION_MARKER} {FIRST}</hook_prompt>',
    )
    result = hook(stub, rollout)
    assert (result.returncode, result.stdout) == (0, "")
    assert len(stub.log) == 1
    engine = open_db()
    assert rows(engine, s.Checkpoint)[-1].gate_reason == "after-correction"
    assert "course-correction" in {m.source_type for m in rows(engine, s.Message)}


def test_auditor_caps_repeated_blocks_itself(stub, rollout, tmp_path):
    """Codex has no cap on repeated blocks. When the continuation is invisible in the rollout
    (older Codex sent it as a developer message) and stop_hook_active is not set, every stop
    looks new; auditor still stops after --max-corrections blocks in one user turn."""
    texts = [FIRST, "Now also update the README's usage section.", "And add a changelog entry."]
    stub.queue = [correction(t) for t in texts]
    assert hook(stub, rollout).stdout == block(texts[0])
    work(rollout, 1, "Ran the tests: 12 passing.")
    assert hook(stub, rollout).stdout == block(texts[1])
    work(rollout, 2, "README updated.")
    third = hook(stub, rollout)
    assert (third.returncode, third.stdout) == (0, "")
    assert len(stub.log) == 3
    engine = open_db()
    statuses = [(i.status, (i.error or "").split(":")[0]) for i in rows(engine, s.Injection)]
    assert statuses == [("delivered", ""), ("delivered", ""), ("skipped", "too-many-corrections")]


def test_the_same_text_is_never_sent_twice(stub, rollout, tmp_path):
    assert hook(stub, rollout, "--max-corrections", "5").stdout == block(FIRST)
    work(rollout, 1, "Done, I think.")
    again = hook(stub, rollout, "--max-corrections", "5")
    assert (again.returncode, again.stdout) == (0, "")
    [_, second] = rows(open_db(), s.Injection)
    assert (second.status, second.error.split(":")[0]) == ("skipped", "duplicate")


def test_without_a_transcript_path_a_thread_not_in_the_store_is_left_alone(stub, rollout):
    result = hook(stub, rollout, transcript_path=None)
    assert (result.returncode, result.stdout) == (0, "")
    assert stub.log == []


def test_the_hook_input_may_come_as_an_argument(stub, rollout):
    last = json.loads(rollout.read_bytes().splitlines()[CODEX_TURN_END - 2])["payload"]["content"][
        0
    ]["text"]
    data = json.dumps(
        {
            "session_id": SESSION,
            "turn_id": "t",
            "transcript_path": str(rollout),
            "hook_event_name": "Stop",
            "stop_hook_active": False,
            "last_assistant_message": last,
        }
    )
    env = {"GEMINI_API_KEY": "AIza-TEST-dummy", "GOOGLE_GEMINI_BASE_URL": stub.url}
    result = run_cli(
        "hook",
        "codex",
        "--sync",
        "--observer",
        "gemini",
        "--deadline",
        "150",
        data,
        env=env,
        timeout=180,
    )
    assert (result.returncode, result.stdout) == (0, block(FIRST))


def test_the_non_blocking_hook_gives_the_end_of_turn_correction_at_the_next_stop(
    stub, rollout, tmp_path
):
    """Codex has no background wake-up: the Stop returns at once, the turn is audited in the
    background, and its correction goes out at the next Stop if nobody wrote since."""
    import time

    from auditor.live.fast_path import session_dir, state_root

    stub.default = Reply(200, gemini_response({"needsCorrection": True, "message": FIRST}))
    with stub.holding():  # returns while the observer has not answered: it did not wait
        first = live_hook(stub, rollout)
    assert (first.returncode, first.stdout) == (0, "")
    outbox = Path(session_dir(state_root(), "codex", SESSION)) / "outbox"
    deadline = time.monotonic() + 60
    while not any(outbox.glob("*.json")):
        assert time.monotonic() < deadline, "the end-of-turn audit never finished"
        time.sleep(0.1)
    again = live_hook(stub, rollout)
    assert (again.returncode, again.stdout) == (0, block(FIRST))
    assert live_hook(stub, rollout).stdout == ""  # once only
    [verdict] = rows(open_db(), s.Verdict)
    assert (verdict.status, verdict.message) == ("ok", FIRST)


def live_hook(stub, rollout):
    last = json.loads(rollout.read_bytes().splitlines()[CODEX_TURN_END - 2])["payload"]["content"][
        0
    ]["text"]
    data = {
        "session_id": SESSION,
        "turn_id": "turn-1",
        "transcript_path": str(rollout),
        "cwd": "/Users/aneeshar/repos",
        "model": "gpt-5-codex",
        "hook_event_name": "Stop",
        "stop_hook_active": False,
        "last_assistant_message": last,
    }
    env = {"GEMINI_API_KEY": "AIza-TEST-dummy", "GOOGLE_GEMINI_BASE_URL": stub.url}
    return run_cli(
        "hook",
        "codex",
        "--observer",
        "gemini",
        "--max-retries",
        "0",
        stdin=json.dumps(data),
        env=env,
    )
