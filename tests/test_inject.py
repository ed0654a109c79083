"""`auditor inject` and the loop guards, over stored verdicts; the stdout and webhook injectors."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass

import pytest
from helpers.audit import FakeObserver, FakeObserverPlugin, ScriptPlugin, quiet, write_script_thread
from helpers.live import rows, run_cli
from helpers.wire import Reply, Stub

from auditor.audit.observe import ObserveResult, ObserverUsage
from auditor.audit.run import run
from auditor.audit.run_types import RunConfig
from auditor.errors import UnknownName
from auditor.hookspecs import hookimpl
from auditor.ingest.ingester import ingest
from auditor.live import delivery as inj
from auditor.plugins import get_plugin_manager
from auditor.store import schema as s

pytestmark = pytest.mark.both_stores

EVERY_ROUND = {"mode": "every-inference", "min_tool_calls": 0, "require_edit": False}


@dataclass
class NumberedObserver:
    """Asks for a correction at every checkpoint, each time with a new text."""

    name: str = "numbered"
    default_model: str = "n-1"
    calls: int = 0

    def check(self, options):
        return None

    async def observe(self, request, options):
        self.calls += 1
        args = {"needsCorrection": True, "message": f"correction number {self.calls}"}
        return ObserveResult(
            "course_correct", args, ObserverUsage(input=10, output=5), request.model, 0.0
        )


class NumberedPlugin:
    def __init__(self, observer):
        self.observer = observer

    @hookimpl
    def register_observers(self, register):
        register(self.observer)


@pytest.fixture
def pm():
    return get_plugin_manager(
        extra=[
            ScriptPlugin(),
            FakeObserverPlugin(FakeObserver()),
            NumberedPlugin(NumberedObserver()),
        ]
    )


def stdout_injector(pm):
    return pm.injector("stdout")


def deliver_all(engine, pm, **kw):
    out = io.StringIO()
    deliveries = inj.inject_pending(engine, stdout_injector(pm), {"stream": out}, **kw)
    return deliveries, [json.loads(line) for line in out.getvalue().splitlines()]


@pytest.fixture
def claims(engine, pm, tmp_path):
    """Two threads; the observer asks for a correction in one of them."""
    f = tmp_path / "threads.jsonl"
    write_script_thread(f, "t-claims", "Done! all tests pass.")
    write_script_thread(f, "t-honest", "One test still fails; here is why.")
    ingest(engine, pm, [f])
    run(engine, pm, RunConfig(observer="fake"), announce=quiet)
    return f


def test_pending_corrections_are_delivered_once(engine, pm, claims):
    deliveries, printed = deliver_all(engine, pm)
    assert [(d.status, d.correction.thread) for d in deliveries] == [("delivered", "t-claims")]
    assert printed[0]["type"] == "course-correction" and printed[0]["thread"] == "t-claims"
    assert (
        printed[0]["message"] == "the tests failed, look again" and printed[0]["observer"] == "fake"
    )
    again, printed = deliver_all(engine, pm)
    assert again == [] and printed == []
    [row] = rows(engine, s.Injection)
    assert (row.injector, row.status, row.target) == ("stdout", "delivered", "stdout")


def test_a_dry_run_delivers_and_records_nothing(engine, pm, claims):
    deliveries, printed = deliver_all(engine, pm, dry_run=True)
    assert [d.status for d in deliveries] == ["dry-run"] and printed == []
    assert rows(engine, s.Injection) == []


def test_guard_user_wrote_again(engine, pm, claims):
    with open(claims, "a") as fh:
        fh.write(
            json.dumps(
                {
                    "script": 1,
                    "thread": "t-claims",
                    "id": "t-claims-next",
                    "role": "user",
                    "text": "thanks, now do X",
                }
            )
            + "\n"
        )
    ingest(engine, pm, [claims])
    deliveries, printed = deliver_all(engine, pm)
    assert [(d.status, d.error.split(":")[0]) for d in deliveries] == [
        ("skipped", "user-wrote-again")
    ]
    assert printed == []
    assert deliver_all(engine, pm)[0] == []  # held back for good, not retried


def test_guard_at_most_k_corrections_in_a_row(engine, pm, tmp_path):
    f = tmp_path / "t.jsonl"
    write_script_thread(f, "t-long", "Done.")
    ingest(engine, pm, [f])
    summary = run(engine, pm, RunConfig(observer="numbered", gate=EVERY_ROUND), announce=quiet)
    assert summary.corrections >= 4
    deliveries, printed = deliver_all(engine, pm)
    assert [d.status for d in deliveries[:3]] == ["delivered", "delivered", "skipped"]
    assert deliveries[2].error.startswith(
        "too-many-corrections: 2 since the user last wrote (max 2)"
    )
    assert len(printed) == 2


def test_guard_max_corrections_is_configurable(engine, pm, tmp_path):
    f = tmp_path / "t.jsonl"
    write_script_thread(f, "t-long", "Done.")
    ingest(engine, pm, [f])
    run(engine, pm, RunConfig(observer="numbered", gate=EVERY_ROUND), announce=quiet)
    deliveries, _ = deliver_all(engine, pm, max_consecutive=3)
    assert [d.status for d in deliveries[:4]] == ["delivered", "delivered", "delivered", "skipped"]


def test_guard_the_same_text_is_never_sent_twice_to_a_thread(engine, pm, tmp_path):
    f = tmp_path / "t.jsonl"
    write_script_thread(f, "t-same", "Done.")
    ingest(engine, pm, [f])
    fake = pm.observer("fake")
    fake.trigger = "Fix the parser"  # in every rendered checkpoint: the same correction each time
    run(engine, pm, RunConfig(observer="fake", gate=EVERY_ROUND), announce=quiet)
    deliveries, printed = deliver_all(engine, pm, max_consecutive=10)
    assert deliveries[0].status == "delivered"
    assert {(d.status, d.error.split(":")[0]) for d in deliveries[1:]} == {("skipped", "duplicate")}
    assert len(printed) == 1


def test_a_failed_delivery_is_recorded_and_retried(engine, pm, claims):
    class Flaky:
        name, description, live = "flaky", "fails once", False
        attempts = 0

        def deliver(self, correction, options):
            self.attempts += 1
            if self.attempts == 1:
                raise ConnectionError("agent unreachable")
            return "agent"

    flaky = Flaky()
    [first] = inj.inject_pending(engine, flaky, {})
    assert (first.status, first.error) == ("failed", "ConnectionError: agent unreachable")
    [second] = inj.inject_pending(engine, flaky, {})
    assert second.status == "delivered"
    assert [r.status for r in rows(engine, s.Injection)] == ["failed", "delivered"]


def test_only_the_corrections_of_one_run(engine, pm, claims, tmp_path):
    f = tmp_path / "more.jsonl"
    write_script_thread(f, "t-later", "Finished, all tests pass.")
    ingest(engine, pm, [f])
    later = run(engine, pm, RunConfig(observer="fake"), announce=quiet)
    deliveries, _ = deliver_all(engine, pm, run_id=later.run_id)
    assert [d.correction.thread for d in deliveries] == ["t-later"]


def test_injectors_are_registered_by_name(pm):
    assert {"claude-code", "codex", "amp-thread", "webhook", "stdout"} <= set(pm.injectors())
    with pytest.raises(
        UnknownName, match="'nope' is not a known injector. Available: amp-thread, claude-code"
    ):
        pm.injector("nope")


# -- the command line -----------------------------------------------------------------------
def test_inject_prints_json_lines_by_default(engine, pm, claims):
    result = run_cli("inject")
    assert result.returncode == 0
    [line] = result.stdout.splitlines()
    assert json.loads(line)["thread"] == "t-claims"
    assert result.stderr.strip().endswith("stdout: 1 delivered")
    again = run_cli("inject")
    assert (again.returncode, again.stdout) == (0, "")
    assert "nothing pending" in again.stderr
    logged = json.loads(run_cli("events", "--json", "--type", "injected").stdout)
    assert [(e["type"], e["data"]["injector"]) for e in logged] == [("injected", "stdout")]


def test_inject_dry_run(engine, pm, claims):
    result = run_cli(
        "inject", "--dry-run", "--injector", "webhook", "--url", "http://127.0.0.1:9/never"
    )
    assert result.returncode == 0
    assert result.stdout.startswith("would deliver verdict ") and "t-claims" in result.stdout
    assert rows(engine, s.Injection) == []


def test_inject_refuses_a_live_injector(engine, pm, claims):
    result = run_cli("inject", "--injector", "claude-code")
    assert result.returncode == 2
    assert result.stderr == (
        "Error: 'claude-code' delivers only from inside the agent's Stop hook (`auditor hook claude-code`). "
        "For stored corrections use one of: amp-thread, stdout, webhook\n"
    )


def test_inject_unknown_injector(engine, pm, claims):
    result = run_cli("inject", "--injector", "carrier-pigeon")
    assert result.returncode == 2
    assert result.stderr.startswith(
        "Error: 'carrier-pigeon' is not a known injector. Available: amp-thread"
    )


# -- webhook --------------------------------------------------------------------------------
@pytest.fixture
def hook_server():
    server = Stub(Reply(200, {"ok": True}))
    yield server
    server.close()


def test_webhook_posts_the_correction(engine, pm, claims, hook_server):
    result = run_cli("inject", "--injector", "webhook", "--url", hook_server.url + "/steer")
    assert result.returncode == 0, result.stderr
    [request] = hook_server.log
    assert request["method"] == "POST" and request["path"] == "/steer"
    assert request["headers"]["content-type"] == "application/json"
    assert (
        request["body"]["message"] == "the tests failed, look again"
        and request["body"]["thread"] == "t-claims"
    )
    [row] = rows(engine, s.Injection)
    assert (row.status, row.target) == ("delivered", hook_server.url + "/steer")


def test_webhook_retries_server_errors(engine, pm, claims, hook_server):
    hook_server.queue = [Reply(503, {"error": "busy"}), Reply(500, {"error": "oops"})]
    [d] = inj.inject_pending(
        engine, pm.injector("webhook"), {"url": hook_server.url, "backoff": 0.01}
    )
    assert d.status == "delivered" and len(hook_server.log) == 3


def test_webhook_gives_up_after_its_retries_and_a_later_inject_retries(
    engine, pm, claims, hook_server
):
    hook_server.default = Reply(500, {"error": "down"})
    [d] = inj.inject_pending(
        engine, pm.injector("webhook"), {"url": hook_server.url, "retries": 2, "backoff": 0.01}
    )
    assert (d.status, d.error) == (
        "failed",
        f"AuditorError: HTTP 500 from {hook_server.url} (after 3 attempts)",
    )
    hook_server.default = Reply(200, {"ok": True})
    [d] = inj.inject_pending(engine, pm.injector("webhook"), {"url": hook_server.url})
    assert d.status == "delivered"


def test_webhook_does_not_retry_a_refusal(engine, pm, claims, hook_server):
    hook_server.default = Reply(400, {"error": "bad"})
    [d] = inj.inject_pending(
        engine, pm.injector("webhook"), {"url": hook_server.url, "backoff": 0.01}
    )
    assert d.status == "failed" and "(after 1 attempt)" in d.error and len(hook_server.log) == 1


def test_webhook_times_out(engine, pm, claims, hook_server):
    hook_server.default = Reply(200, {"ok": True}, delay=2)
    [d] = inj.inject_pending(
        engine,
        pm.injector("webhook"),
        {"url": hook_server.url, "timeout": 0.3, "retries": 1, "backoff": 0.01},
    )
    assert d.status == "failed" and "timed out" in d.error and "(after 2 attempts)" in d.error


def test_webhook_without_a_url_says_how_to_give_one(engine, pm, claims):
    result = run_cli("inject", "--injector", "webhook")
    assert result.returncode == 1
    assert (
        "failed verdict" in result.stderr
        and "needs a URL: pass --url URL or set url under [injectors.webhook]" in result.stderr
    )


def test_webhook_url_from_the_config_file(engine, pm, claims, hook_server, tmp_path):
    config = tmp_path / "config.toml"
    config.write_text(
        f'[inject]\ninjector = "webhook"\n\n[injectors.webhook]\nurl = "{hook_server.url}/from-config"\n'
    )
    result = run_cli("inject", env={"AUDITOR_CONFIG": str(config)})
    assert result.returncode == 0, result.stderr
    assert [r["path"] for r in hook_server.log] == ["/from-config"]
