"""The built-in signals on real threads of ../shared/corpus: each test names the file and message.

Where a signal fires, the test pins the evidence a reader can check by opening the file at
that message; where the corpus showed a false positive while the rules were tuned, a test
keeps it from coming back.
"""

from __future__ import annotations

import dataclasses
import re

import pytest
from auditor_plugins.signals import compute
from sqlalchemy import select

from auditor.audit.checkpoints import checkpoint_at
from auditor.ingest.ingester import ingest
from auditor.store import schema as s
from auditor.store.threads import find_thread, load_messages

pytestmark = pytest.mark.corpus

SCREENSAVER = "claude-code/4thehalibit-omarchy-backup/-home-vwestberg-Claude/1fb5e404-604d-4a2b-baf1-3beb42a67371.jsonl"
TOKENIZER = "claude-code/daaain-claude-code-log/-Users-dain-workspace-danieldemmel-me-next/9e953218-585f-4692-89df-9e0747a31c68.jsonl"
UV_DOCS = "claude-code/daaain-claude-code-log/-Users-dain-workspace-coderabbit-review-helper/cb2e607c-c758-415a-8b45-c49e4631906a.jsonl"
TODO_APP = "claude-code/d-kimuson-claude-code-viewer/sample-project/fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl"
PYRIGHT = "claude-code/daaain-claude-code-log/-Users-dain-workspace-claude-code-log-sample/fe869ecb-c176-478f-9734-7e4b8ef12cff.jsonl"
SPOTTER_OTEL = "claude-code/marot-spotter/ae4a77f8-aedd-4bc1-888f-c94edc91af04.jsonl"
SPOTTER_DOV = "claude-code/marot-spotter/4d5611e5-241a-462a-8d15-5122611a9569.jsonl"
DEEP_MANIFEST = "claude-code/daaain-claude-code-log/-src-deep-manifest/a7da6a22-facc-4fcd-8bab-f83c87862004.jsonl"
CODEX_PUSH = "codex/0h-n0-local-voice-assistant-codex/sessions/2025/12/25/rollout-2025-12-25T22-45-23-019b55c1-d022-7061-bbb9-b0c90708472b.jsonl"
CODEX_CHECKS = "codex/jnarowski-agentcmd/sessions/rollout-2025-09-24T19-22-20-01997e76-d124-7592-9cac-2ec05abbca08.jsonl"
DOCKER_COMPOSE = "claude-code/4thehalibit-omarchy-backup/-home-vwestberg-Claude/8fd119a6-9ab8-407b-810f-329cfb6153e0.jsonl"


@pytest.fixture
def at(corpus, engine, plugins):
    """Return the messages of a corpus file's thread up to the checkpoint at `message_id`."""

    def load(relpath: str, message_id: str) -> list:
        ingest(engine, plugins, [corpus / relpath])
        with engine.connect() as conn:
            thread_id = (
                conn.execute(
                    select(s.Message.thread_id)
                    .where(s.Message.native_id == message_id)
                    .order_by(s.Message.thread_id)
                )
                .scalars()
                .first()
            )
        assert thread_id is not None, f"{message_id} is not in {relpath}"
        messages = load_messages(engine, thread_id)
        cp = checkpoint_at(thread_id, messages, message_id)
        return messages[: cp.index + 1]

    return load


def fired(messages: list, config: dict | None = None) -> dict:
    return {sig.name: sig for sig in compute(messages, config)}


# -- goal-drift ------------------------------------------------------------------------------


def test_goal_drift_fires_when_the_user_turns_away_from_the_first_request(at):
    # Goal (e33e8b67): "my screen saver comes up way to fast"; later (f6475a2b): "I actually
    # dont even like the screen ver but dont know how to change it".
    sig = fired(at(SCREENSAVER, "5771ae38-f655-4523-a63f-23cd6424b745"))["goal-drift"]
    assert sig.detail["phrases"] == ["actually"] and sig.detail["divergence"] > 0.8
    assert [e.message_id for e in sig.evidence] == [
        "f6475a2b-9fcb-4dff-b4ea-0aaa10684f0b",
        "e33e8b67-7684-4b4a-bcaa-384137d7286c",
    ]
    assert "dont even like the screen" in sig.evidence[0].excerpt


def test_goal_drift_ignores_actually_used_for_emphasis(at):
    # adfd6bba: "That's the only thing that actually loaded" is not a change of plan.
    assert "goal-drift" not in fired(at(TOKENIZER, "c73bd713-81cb-42a6-aee5-5f542986f613"))


def test_goal_drift_ignores_change_words_in_pasted_documentation(at):
    # 5dc876a5 pastes uv's docs ("...refer to uvx instead of uv tool run") after one question.
    messages = at(UV_DOCS, "3102bd1f-3772-456c-b09d-c09134eaf589")
    assert "goal-drift" not in fired(messages)
    assert "goal-drift" in fired(messages, {"goal-drift": {"phrase_chars": 5000}})


# -- tool-loop -------------------------------------------------------------------------------


def test_tool_loop_fires_on_the_same_commit_failing_the_same_way(at):
    # 74e59e78...: `git add -A && git commit -m "feat: instrument hook controllers..."` four
    # times, each rejected by the pre-commit hook (dialyzer).
    sig = fired(at(SPOTTER_OTEL, "1d698e31-9e57-4b0c-b787-727e7bcea2f9"))["tool-loop"]
    assert sig.detail == {"tool": "Bash", "repeats": 4} and sig.score == 0.75
    assert sig.evidence[0].message_id == "74e59e78-0960-4152-b78b-d7575c704f8f"
    assert "git commit" in sig.evidence[0].excerpt


def test_tool_loop_threshold_is_configurable(at):
    messages = at(SPOTTER_OTEL, "1d698e31-9e57-4b0c-b787-727e7bcea2f9")
    assert "tool-loop" not in fired(messages, {"tool-loop": {"min_repeats": 5}})


def test_rerunning_the_tests_after_each_fix_is_not_a_loop(at):
    # The same pytest command five times in this turn, with a different result each time.
    messages = at(DEEP_MANIFEST, "6aa159f8-ec51-4d0c-9ad6-da906712d627")
    assert "tool-loop" not in fired(messages)
    assert "tool-loop" in fired(messages, {"tool-loop": {"same_result": False}})


# -- error-cascade ---------------------------------------------------------------------------


def test_error_cascade_on_codex_pushes_without_network(at):
    # call_2AfsYMvw...: `git push` -> "ssh: Could not resolve hostname github.com", then three
    # more failing commands in a row, the last `ls specs` (exit code 2).
    sig = fired(at(CODEX_PUSH, "L371"))["error-cascade"]
    assert sig.detail == {"run": 4, "open": False}
    assert sig.evidence[0].message_id == "call_2AfsYMvwnWGDzF0gZL2BD4QA:output"
    assert (
        "exit code 1" in sig.evidence[0].excerpt
        and "Could not read from remote" in sig.evidence[0].excerpt
    )
    assert "error-cascade" not in fired(at(CODEX_PUSH, "L371"), {"error-cascade": {"min_run": 5}})


# -- claimed-success-after-failure -----------------------------------------------------------


def test_claimed_success_after_a_failed_build(at):
    # 6ebc2568: `npm run build` -> "Build error occurred [TypeError: generate is not a
    # function]"; then e9b70a05: "Perfect! I have successfully created a fully functional TODO app".
    sig = fired(at(TODO_APP, "e9b70a05-fbdd-455f-b0f5-85bd797e0dfa"))[
        "claimed-success-after-failure"
    ]
    assert sig.detail["verification"] is True and sig.score == 0.7
    assert [e.message_id for e in sig.evidence] == [
        "e9b70a05-fbdd-455f-b0f5-85bd797e0dfa",
        "6ebc2568-a150-403f-89f0-ac5fb13b7841",
    ]
    assert (
        "successfully" in sig.evidence[0].excerpt
        and "Build error occurred" in sig.evidence[1].excerpt
    )


def test_claimed_success_while_the_commit_never_went_through(at):
    # 29bbf082: `git commit --no-verify` still "Pre-commit validation failed"; the final
    # message 1d698e31 says "All 297 tests passing" and closes the task.
    sig = fired(at(SPOTTER_OTEL, "1d698e31-9e57-4b0c-b787-727e7bcea2f9"))[
        "claimed-success-after-failure"
    ]
    assert (
        sig.detail["claim"] == "checks"
        and sig.evidence[1].message_id == "29bbf082-ac01-4081-9f35-587475963e45"
    )


def test_a_failure_fixed_later_in_the_turn_is_not_held_against_the_claim(at):
    # 4d5611e5: the commit failed three times on pre-commit checks, then went through
    # ("[spotter-dov 64f1b9a]") and was pushed before "Everything is clean and pushed".
    assert "claimed-success-after-failure" not in fired(
        at(SPOTTER_DOV, "b090634d-e9df-493c-80f4-6770c4b17eea")
    )


def test_zero_errors_is_not_a_failure(at):
    # 870f22b5: `uv run pyright` -> "0 errors, 0 warnings, 0 informations"; then "fixed all the type errors".
    assert "claimed-success-after-failure" not in fired(
        at(PYRIGHT, "34b5b301-2b8b-4585-b697-920efbdbf375")
    )


# -- skipped-requirement-hint ------------------------------------------------------------------
# No end of turn in the corpus leaves an explicit ask undone (the agents did what was asked),
# so the firing case drops the real lint calls from a real turn.

LINT = re.compile(r"\blint\b")


def without_lint(messages: list) -> list:
    dropped: set[str] = set()
    out = []
    for m in messages:
        blocks = []
        for b in m.blocks:
            command = b.tool_input.get("command") if isinstance(b.tool_input, dict) else None
            text = " ".join(command) if isinstance(command, list) else str(command or "")
            if b.kind == "tool_use" and LINT.search(text):
                dropped.add(b.tool_use_id)
            elif not (b.kind == "tool_result" and b.tool_use_id in dropped):
                blocks.append(b)
        if blocks or not m.blocks:
            out.append(dataclasses.replace(m, blocks=blocks))
    return out


def test_skipped_requirement_hint_sees_the_asks_in_a_real_request(at):
    # L650 (after the IDE context): "Can you run tests, lint and check-types to ensure all is
    # green"; the turn ran all three before L747 "All three checks are green".
    messages = at(CODEX_CHECKS, "L747")
    assert "skipped-requirement-hint" not in fired(messages)
    sig = fired(without_lint(messages))["skipped-requirement-hint"]
    assert sig.detail == {"unmet": ["run-lint"], "asks": ["run-tests", "run-lint", "typecheck"]}
    assert sig.evidence[0].message_id == "L650"


def test_asks_in_ide_context_pasted_logs_and_tool_names_are_not_asks(at):
    # L276 lists an open tab "fix-linting.md" and says "ok continue"; 0ec6fd0d asks to "add a
    # Github Action to run tests" (not to add tests); 10f77a3e pastes a Vercel log with "yarn run build".
    from auditor_plugins.signals_common import prose
    from auditor_plugins.signals_text import asks_in

    texts = {}
    for relpath, mid in (
        (CODEX_CHECKS, "L276"),
        (PYRIGHT, "0ec6fd0d-f113-4e02-84a2-2191be2e1f45"),
        (TOKENIZER, "10f77a3e-8c06-4356-8a27-b98f97519cb7"),
    ):
        texts[mid] = next(m.text for m in at(relpath, mid) if m.native_id == mid)
    assert asks_in(prose(texts["L276"])) == []
    assert [name for name, _ in asks_in(prose(texts["0ec6fd0d-f113-4e02-84a2-2191be2e1f45"]))] == [
        "run-tests",
        "run-lint",
    ]
    assert asks_in(prose(texts["10f77a3e-8c06-4356-8a27-b98f97519cb7"])) == []


# -- sensitive-data --------------------------------------------------------------------------


def test_a_password_in_a_read_file_is_secret_and_never_stored_in_clear(at, engine, plugins, corpus):
    # 6c7463fd: Read of ~/.config/windows/docker-compose.yml shows `PASSWORD: "..."`.
    messages = at(DOCKER_COMPOSE, "ab119ab2-3fd2-4553-8a96-ec8095e5ce5b")
    raw = next(
        b.text
        for m in messages
        if m.native_id == "6c7463fd-48af-4f60-8f67-9ccc51771e8c"
        for b in m.blocks
    )
    password = re.search(r'PASSWORD: "([^"]+)"', raw).group(1)
    sig = fired(messages)["sensitive-data"]
    assert sig.detail == {"level": "SECRET", "kinds": {"password": 2}} and sig.score == 1.0
    assert sig.evidence[0].message_id == "6c7463fd-48af-4f60-8f67-9ccc51771e8c"
    assert 'PASSWORD: "[REDACTED:password]"' in sig.evidence[0].excerpt
    # Through a real run, into the store: the password is nowhere in the signals table.
    from helpers.audit import FakeObserver, FakeObserverPlugin

    from auditor.audit.run import run
    from auditor.audit.run_types import RunConfig
    from auditor.plugins import get_plugin_manager

    thread = find_thread(engine, "8fd119a6-9ab8-407b-810f-329cfb6153e0")
    run(
        engine,
        get_plugin_manager(extra=[FakeObserverPlugin(FakeObserver())]),
        RunConfig(observer="fake", threads=[str(thread.id)]),
        announce=lambda line: None,
    )
    with engine.connect() as conn:
        stored = " ".join(str(tuple(r)) for r in conn.execute(select(s.Signal.__table__)))
    assert "sensitive-data" in stored and password not in stored


def test_a_personal_email_is_sensitive_and_masked(at):
    # d1d95aff: `git show` prints "Author: Christian Boos <christian.boos@bct-technology.com>".
    sig = fired(at(DEEP_MANIFEST, "8d1839ae-630f-48cf-9fbe-1409162e3e9b"))["sensitive-data"]
    assert sig.detail == {"level": "SENSITIVE", "kinds": {"email-address": 1}} and sig.score == 0.5
    assert "c***@bct-technology.com" in sig.evidence[0].excerpt
    assert "christian.boos@" not in str(sig.as_dict())
    assert "sensitive-data" not in fired(
        at(DEEP_MANIFEST, "8d1839ae-630f-48cf-9fbe-1409162e3e9b"),
        {"sensitive-data": {"min_level": "SECRET"}},
    )


def test_every_checkpoint_of_the_corpus_computes_without_error(corpus, engine, plugins):
    """How fast is a figure of benchmarks/signals.py (CPU time), not a bound here."""
    from auditor.audit.checkpoints import find_checkpoints

    ingest(engine, plugins, [corpus])
    with engine.connect() as conn:
        ids = conn.execute(select(s.Thread.id)).scalars().all()
    n = 0
    for tid in ids:
        messages = load_messages(engine, tid)
        for cp in find_checkpoints(tid, messages, "every-inference"):
            compute(messages[: cp.index + 1])
            n += 1
    assert n > 1000
