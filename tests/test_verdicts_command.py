"""`auditor verdicts` (issue 13 item 2): what the observers said, newest first, with filters,
cost and delivery, in the spirit of `llm logs`."""

from __future__ import annotations

import io
import json
import time

import pytest
from click.testing import CliRunner
from helpers.audit import FakeObserver, FakeObserverPlugin, ScriptPlugin, quiet, write_script_thread

from auditor.audit.run import run
from auditor.audit.run_types import RunConfig
from auditor.cli.main import cli
from auditor.ingest.ingester import ingest
from auditor.live import delivery as inj
from auditor.plugins import get_plugin_manager
from auditor.printable import printable
from auditor.store.verdict_rows import list_verdicts

pytestmark = pytest.mark.both_stores


@pytest.fixture
def pm():
    return get_plugin_manager(extra=[ScriptPlugin(), FakeObserverPlugin(FakeObserver())])


@pytest.fixture
def store(engine, pm, tmp_path):
    """Run 1 on two threads (one correction), then run 2 on a third (another correction)."""
    f = tmp_path / "a.jsonl"
    write_script_thread(f, "t-claims", "Done! all tests pass.")
    write_script_thread(f, "t-honest", "One test still fails; here is why.")
    ingest(engine, pm, [f])
    first = run(engine, pm, RunConfig(observer="fake"), announce=quiet)
    time.sleep(0.01)
    g = tmp_path / "b.jsonl"
    write_script_thread(g, "t-later", "Finished, all tests pass now.")
    ingest(engine, pm, [g])
    second = run(engine, pm, RunConfig(observer="fake"), announce=quiet)
    return engine, first.run_id, second.run_id


def invoke(*args: str):
    result = CliRunner().invoke(cli, ["verdicts", *args], catch_exceptions=False)
    return result


def as_json(*args: str) -> list[dict]:
    result = invoke("--json", *args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_newest_first_with_thread_checkpoint_cost_and_delivery(store):
    rows = as_json()
    assert [r["thread_native_id"] for r in rows] == ["t-later", "t-honest", "t-claims"]
    later = rows[0]
    assert (later["status"], later["needs_correction"], later["message"]) == (
        "ok",
        True,
        "the tests failed, look again",
    )
    assert later["message_id"] == "t-later-end" and later["kind"] == "end-turn"
    assert later["delivery"] == {"status": "pending", "checked": True, "will_hold": None}
    assert rows[1]["delivery"] is None  # no correction, nothing to deliver
    assert later["input_tokens"] > 0 and later["output_tokens"] == 20


def test_the_filters(store, pm):
    engine, first, second = store
    assert [r["thread_native_id"] for r in as_json("--corrections")] == ["t-later", "t-claims"]
    assert [r["thread_native_id"] for r in as_json("-c", "--run", str(first))] == ["t-claims"]
    assert [r["thread_native_id"] for r in as_json("--thread", "t-hon")] == ["t-honest"]
    assert [r["id"] for r in as_json("-n", "1")] == [as_json()[0]["id"]]
    assert len(as_json("-n", "0")) == 3
    assert len(as_json("--observer", "fake", "--model", "fake-1")) == 3
    assert as_json("--model", "other") == []
    assert len(as_json("--since", "1h")) == 3 and as_json("--since", "2099-01-01") == []
    assert [r["thread_native_id"] for r in as_json("-q", "TESTS FAILED", "-n", "0")] == [
        "t-later",
        "t-claims",
    ]
    assert as_json("-q", "100%_") == []  # LIKE wildcards are taken literally
    assert len(as_json("--status", "ok")) == 3 and as_json("--status", "error") == []


def test_errors_are_one_line_and_list_what_is_valid(store):
    bad = invoke("--observer", "gemni")
    assert bad.exit_code == 2
    assert bad.output == (
        "Error: 'gemni' is not a known observer with verdicts in this store. Available: fake\n"
    )
    since = invoke("--since", "yesterday")
    assert (
        since.exit_code == 2
        and "'yesterday' is not a time: use an ISO date (2026-11-01)" in since.output
    )
    thread = invoke("--thread", "no-such")
    assert thread.output == "Error: 'no-such' is not a known thread.\n"


def test_text_output_reads_like_a_log(store):
    out = invoke("-c").stdout
    blocks = out.strip().split("\n\n## ")
    assert len(blocks) == 2
    head = out.splitlines()
    assert head[0].startswith("## verdict ") and head[0].endswith(" · correction")
    assert head[1].startswith("thread t-later (script, id ") and "at message t-later-end" in head[1]
    assert head[2].startswith("fake fake-1 · run ") and "not delivered yet" in head[2]
    assert head[4] == "> the tests failed, look again"


def test_delivery_is_shown_delivered_failed_or_held_back(store, pm):
    engine, first, second = store

    class Down:
        name, description, live = "down", "never reaches the agent", False

        def deliver(self, correction, options):
            raise ConnectionError("agent unreachable")

    inj.inject_pending(engine, Down(), {}, run_id=first)
    failed = [r for r in as_json("-c") if r["thread_native_id"] == "t-claims"][0]["delivery"]
    assert (failed["status"], failed["error"], failed["attempts"]) == (
        "failed",
        "ConnectionError: agent unreachable",
        1,
    )
    assert "delivery failed (1 attempts): ConnectionError: agent unreachable" in invoke().stdout
    inj.inject_pending(engine, pm.injector("stdout"), {"stream": io.StringIO()})
    delivered = {r["thread_native_id"]: r["delivery"] for r in as_json("-c")}
    assert delivered["t-claims"]["status"] == "delivered"
    assert delivered["t-claims"]["attempts"] == 2 and delivered["t-claims"]["injector"] == "stdout"
    assert "delivered by stdout 20" in invoke("--thread", "t-claims").stdout


def test_an_answer_cannot_drive_the_terminal(store):
    engine, *_ = store
    from sqlalchemy import update

    from auditor.store import schema as s

    with engine.begin() as conn:
        conn.execute(
            update(s.Verdict)
            .where(s.Verdict.needs_correction.is_(True))
            .values(message="look\x1b[2J\x1b]0;pwned\x07 again\nline two")
        )
    out = invoke("-c").stdout
    assert "\x1b" not in out and "\x07" not in out
    assert "> look again\n> line two" in out
    assert printable("a\tb\x00c") == "a\tbc"


def test_empty_results_say_why(engine, store):
    assert invoke("-q", "no such words").stderr == "No verdict matches these filters.\n"


def test_no_verdicts_yet_and_an_empty_store(engine, pm, tmp_path):
    empty = invoke()
    assert empty.exit_code == 0 and empty.stdout == ""
    assert empty.stderr.startswith("The store has no threads yet: run `auditor ingest")
    f = tmp_path / "a.jsonl"
    write_script_thread(f, "t-1", "Done.")
    ingest(engine, pm, [f])
    assert invoke().stderr == "No verdicts yet: `auditor run` audits the stored threads.\n"
    assert list_verdicts(engine) == []


def test_a_correction_inject_will_hold_back_is_not_said_to_be_sent(engine, pm, tmp_path):
    """Every-inference mode audits an end of turn the user already answered; its correction
    is recorded, and `verdicts` says why `auditor inject` will not send it."""
    f = tmp_path / "t.jsonl"
    write_script_thread(f, "t-answered", "Done! all tests pass.")
    answered = {"script": 1, "thread": "t-answered", "id": "t-thanks", "role": "user"}
    with open(f, "a") as fh:
        fh.write(json.dumps({**answered, "text": "thanks, ship it"}) + "\n")
    ingest(engine, pm, [f])
    run(engine, pm, RunConfig(observer="fake", gate={"mode": "every-inference"}), announce=quiet)
    [held] = [r for r in as_json("-c") if r["message_id"] == "t-answered-end"]
    assert held["delivery"]["will_hold"].startswith("user-wrote-again")
    text = invoke("-c").stdout
    assert "`auditor inject` will hold it back: user-wrote-again" in text
    assert "`auditor inject` sends it" not in text
