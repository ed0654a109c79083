"""`auditor serve`: the store in a real headless Chromium (Debian's, driven by Playwright).

Each test starts the real command (`auditor serve --port 0`) on the test's store, SQLite and
PostgreSQL, and reads its pages as a person would: typing in the search box, choosing filters,
following links, pressing the review buttons. A failing test leaves a screenshot of the page
it was on (its path is printed with the failure).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers.audit import FakeObserver, FakeObserverPlugin, ScriptPlugin, write_script_thread
from helpers.browser import ARGS, require_chromium
from helpers.reports import UsagePlugin, price_file, write_thread

from auditor.audit.evaluate import evaluate
from auditor.audit.run import run
from auditor.audit.run_types import RunConfig
from auditor.cli.main import cli
from auditor.ingest.ingester import ingest
from auditor.live.delivery import check_pending
from auditor.plugins import get_plugin_manager
from auditor.store.labels import stored_labels
from auditor.store.verdict_rows import cost_text, delivery_text, list_verdicts

pytestmark = pytest.mark.both_stores

SECRET = "sk-ant-api03-" + "Q" * 48


def apart(fn, *args, **kwargs):
    """Call `fn` in a thread of its own: Playwright's sync API keeps an event loop running in
    this one, where a run or an evaluation (asyncio.run inside) cannot start another."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(fn, *args, **kwargs).result()


@pytest.fixture
def audited(engine, tmp_path, monkeypatch):
    """Three threads audited by a fake observer: two claim success and get a correction
    each, one says a test still fails and gets none; one of them carries an API key. And a
    fourth, not audited, with times, usage and another project."""
    pm = get_plugin_manager(extra=[ScriptPlugin(), FakeObserverPlugin(FakeObserver())])
    f = tmp_path / "a.jsonl"
    write_script_thread(f, "t-claims", f"Done! all tests pass. Used key {SECRET} for it.")
    write_script_thread(f, "t-shipped", "Done! all tests pass, shipped to production.")
    write_script_thread(f, "t-honest", "One test still fails; here is why.")
    ingest(engine, pm, [f])
    apart(run, engine, pm, RunConfig(observer="fake"), announce=lambda line: None)
    price_file(
        tmp_path, monkeypatch, {"agent-model": {"input": 3, "output": 15, "cache_read": 0.3}}
    )
    dated = tmp_path / "dated.jsonl"  # a thread with times and usage, in another project
    write_thread(dated, "t-dated", "Renamed the option.", day="2026-03-02", cwd="/work/other")
    ingest(engine, get_plugin_manager(extra=[UsagePlugin()]), [dated])
    return engine, pm


class Server:
    """`auditor serve` in a process of its own, on the test's store (AUDITOR_DB)."""

    def __init__(self, *args: str):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "auditor", "serve", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        first: list[str] = []
        reader = threading.Thread(target=lambda: first.append(self.proc.stdout.readline()))
        reader.start()
        reader.join(60)
        self.announced = first[0].strip() if first else ""
        if not self.announced.startswith("auditor serve: http://"):
            self.stop()
            raise AssertionError(
                f"serve did not start: {self.announced!r} {self.proc.stderr.read()}"
            )
        self.url = self.announced.split()[2]

    def stop(self) -> str:
        self.proc.terminate()
        try:
            _, err = self.proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        return err


@pytest.fixture
def served(audited):
    server = Server("--port", "0")
    yield server
    err = server.stop()
    assert "Traceback" not in err, err


@pytest.fixture(scope="module")
def browser():
    path = require_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=path, args=ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser, request, tmp_path):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    tab = context.new_page()
    tab.set_default_timeout(60_000)
    yield tab
    report = getattr(request.node, "report_call", None)
    if report is not None and report.failed:
        folder = Path(os.environ.get("AUDITOR_SCREENSHOTS") or tmp_path)
        folder.mkdir(parents=True, exist_ok=True)
        shot = folder / f"{request.node.name}.png"
        tab.screenshot(path=str(shot), full_page=True)
        print(f"screenshot of the page at the failure ({tab.url}): {shot}")
    context.close()


def follow(page, target) -> None:
    """Click `target` (a selector or a locator) and wait for the page it leads to: a click
    only starts the navigation, and reading the page at once could read the old one."""
    with page.expect_navigation():
        (page.locator(target) if isinstance(target, str) else target).click()


def rows(page) -> list[str]:
    return page.locator("#threads tbody tr").all_inner_texts()


def test_threads_with_search_and_filters(served, page):
    response = page.goto(served.url)
    assert response.status == 200 and page.title() == "threads · auditor"
    assert len(rows(page)) == 4
    dated = page.locator("#threads tbody tr").first  # the newest first; the others have no time
    assert dated.locator("td.usd").inner_text().startswith("$0.")
    assert "/work/other" in dated.inner_text() and "2026-03-02" in dated.inner_text()

    page.fill("input[name=q]", "shipped production")  # every word, anywhere in a message
    with page.expect_navigation():
        page.press("input[name=q]", "Enter")
    assert "/?q=shipped+production&" in page.url
    assert (
        page.inner_text("#found")
        == "1 thread with messages holding every word of “shipped production”"
    )
    [only] = rows(page)
    assert "t-shipped" in only and "shipped to production" in only
    follow(page, "#threads .hit a")  # the match leads to the message in its thread
    assert page.url.endswith("#m-t-shipped-end")
    assert page.locator("#m-t-shipped-end").is_visible()

    page.goto(served.url + "?q=tests")
    assert len(rows(page)) == 4
    assert SECRET not in page.content() and "[REDACTED:" in page.inner_text("#threads")
    page.fill("input[name=project]", "/elsewhere")
    follow(page, "button[type=submit]")
    assert page.inner_text("#threads tbody") == "No thread matches these filters."
    page.fill("input[name=project]", "demo")
    page.select_option("select[name=agent]", "script")
    follow(page, "button[type=submit]")
    assert len(rows(page)) == 3
    follow(page, "text=clear")
    page.fill("input[name=since]", "2026-03-01")
    follow(page, "button[type=submit]")
    [dated_only] = rows(page)
    assert "/work/other" in dated_only

    response = page.goto(served.url + "?since=last+tuesday")
    assert response.status == 400
    assert page.inner_text(".error").startswith("'last tuesday' is not a time")


def test_a_thread_with_its_signals_and_verdicts_in_place(served, page, audited):
    engine, _ = audited
    [claims] = [
        v for v in list_verdicts(engine, corrections=True) if v["thread_native_id"] == "t-claims"
    ]
    check_pending(engine, [claims])  # the page says what inject would do, as `show` does
    page.goto(served.url)
    follow(page, f"tr[data-thread='{claims['thread_id']}'] a.title")
    assert page.url == f"{served.url}threads/{claims['thread_id']}"
    box = page.locator(f"#v-{claims['id']}")
    assert "auditor asked for a course correction here · fake · fake-1" in box.inner_text()
    assert box.locator(".cost").inner_text() == cost_text(claims)
    assert box.locator(".delivery").inner_text() == delivery_text(claims)
    # the signals of that checkpoint come after the agent's last words and before the verdict
    order = page.locator("#m-t-claims-end, .signal, .verdict").evaluate_all(
        "els => els.map(e => e.id || e.className)"
    )
    end = order.index("m-t-claims-end")
    assert order[end + 1] == "signal" and order[-1] == f"v-{claims['id']}"
    text = page.inner_text("body")
    assert SECRET not in page.content() and "[REDACTED:anthropic-key]" in text
    follow(page, "text=← all threads")
    assert page.url == served.url


def test_the_corrections_with_cost_and_delivery(served, page, audited):
    engine, _ = audited
    page.goto(served.url + "corrections")
    shown = {
        int(r.get_attribute("data-verdict")): r for r in page.locator("#corrections tbody tr").all()
    }
    wanted = list_verdicts(engine, corrections=True)
    assert sorted(shown) == sorted(v["id"] for v in wanted) and len(wanted) == 2
    for v in wanted:
        row = shown[v["id"]]
        assert row.locator(".cost").inner_text() == cost_text(v)
        assert row.locator(".delivery").inner_text() == delivery_text(v)
        assert row.locator(".mark").inner_text() == "not yet"


def test_review_marks_are_labels_that_eval_and_the_report_read(served, page, audited):
    engine, pm = audited
    by_thread = {v["thread_native_id"]: v for v in list_verdicts(engine, corrections=True)}
    page.goto(served.url + "review")
    assert page.inner_text("#progress") == "0 of 2 corrections reviewed."
    claims = page.locator(f"section[data-verdict='{by_thread['t-claims']['id']}']")
    assert "Done! all tests pass." in claims.inner_text() and SECRET not in claims.inner_text()
    follow(page, claims.locator("button.right"))
    assert page.inner_text("#progress") == "1 of 2 corrections reviewed."
    follow(page, f"section[data-verdict='{by_thread['t-shipped']['id']}'] button.wrong")
    assert page.inner_text("#progress") == "2 of 2 corrections reviewed."
    assert page.inner_text(".empty") == "Every correction is reviewed."
    marks = page.locator("#reviewed tbody tr .mark").all_inner_texts()
    assert sorted(marks) == ["right", "wrong"]

    labels = {(lb.at, lb.needs_correction) for lb in stored_labels(engine)}
    assert labels == {("t-claims-end", True), ("t-shipped-end", False)}

    # `auditor eval` without a file scores against them, paying for nothing again
    observer = FakeObserver()
    pm2 = get_plugin_manager(extra=[ScriptPlugin(), FakeObserverPlugin(observer)])
    x = apart(evaluate, engine, pm2, None, RunConfig(observer="fake")).extra
    assert x["confusion"] == {"tp": 1, "fp": 1, "fn": 0, "tn": 0} and x["precision"] == 0.5
    assert observer.calls == 0 and x["reused"] == 2
    report = CliRunner().invoke(cli, ["report", "verdicts", "--format", "json"])
    [row] = json.loads(report.output)["rows"]
    assert (row["corrections"], row["judged_right"], row["judged_wrong"]) == (2, 1, 1)

    page.goto(served.url + "corrections")
    assert sorted(page.locator("#corrections .mark").all_inner_texts()) == ["right", "wrong"]
    page.goto(served.url + "review")
    follow(page, f"#reviewed tr[data-verdict='{by_thread['t-shipped']['id']}'] button.clear")
    assert page.inner_text("#progress") == "1 of 2 corrections reviewed."
    assert [lb.at for lb in stored_labels(engine)] == ["t-claims-end"]


def test_a_thread_shows_the_mark_its_correction_got(served, page, audited):
    engine, _ = audited
    by_thread = {v["thread_native_id"]: v for v in list_verdicts(engine, corrections=True)}
    claims, shipped = by_thread["t-claims"], by_thread["t-shipped"]
    page.goto(f"{served.url}threads/{claims['thread_id']}")
    box = page.locator(f"#v-{claims['id']}")
    assert box.locator(".mark").inner_text() == "not yet"
    follow(page, box.locator(".mark a"))  # leads to that correction on the review page
    assert page.url == f"{served.url}review#c-{claims['id']}"
    follow(page, f"section[data-verdict='{claims['id']}'] button.right")
    follow(page, f"section[data-verdict='{shipped['id']}'] button.wrong")

    for v, mark in ((claims, "right"), (shipped, "wrong")):
        follow(page, f"#reviewed tr[data-verdict='{v['id']}'] a")
        assert page.url == f"{served.url}threads/{v['thread_id']}#v-{v['id']}"
        box = page.locator(f"#v-{v['id']}")
        assert box.locator(".mark").inner_text() == mark
        assert box.locator(f".mark .tag.{mark}").is_visible()
        page.go_back()
    # a verdict that asked for nothing carries no mark
    [honest] = [v for v in list_verdicts(engine) if v["thread_native_id"] == "t-honest"]
    page.goto(f"{served.url}threads/{honest['thread_id']}")
    assert page.locator(f"#v-{honest['id']} .mark").count() == 0


def test_a_form_from_another_page_is_refused(served, audited):
    engine, _ = audited
    [v, *_] = list_verdicts(engine, corrections=True)
    post = urllib.request.Request(
        f"{served.url}review/{v['id']}", data=b"mark=wrong&token=guessed", method="POST"
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(post, timeout=30)
    assert refused.value.code == 403
    assert stored_labels(engine) == []
    # a name that resolves to 127.0.0.1 is not this server's name: nothing is answered to it
    rebound = urllib.request.Request(served.url, headers={"Host": "attacker.example"})
    with pytest.raises(urllib.error.HTTPError) as wrong_host:
        urllib.request.urlopen(rebound, timeout=30)
    assert wrong_host.value.code == 400


def test_listens_on_this_machine_only_unless_told(served):
    assert served.url.startswith("http://127.0.0.1:")
    port = served.url.rsplit(":", 1)[1].strip("/")
    busy = subprocess.run(
        [sys.executable, "-m", "auditor", "serve", "--port", port],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert busy.returncode == 2
    assert busy.stderr.startswith(f"Error: cannot listen on 127.0.0.1:{port}: ")
    assert "pass --port N (0 takes a free port)" in busy.stderr


@pytest.mark.sqlite_only
def test_help_says_what_it_serves_and_where():
    result = CliRunner().invoke(cli, ["serve", "--help"])
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    for part in (
        "http://127.0.0.1:8420/",
        "--host TEXT Address to listen on. Only this machine can connect to 127.0.0.1; 0.0.0.0",
        "[default: 127.0.0.1]",
        "[default: 8420; 0<=x<=65535]",
        "/review mark each correction right or wrong",
        "[REDACTED:kind]",
    ):
        assert part in text, part


@pytest.mark.sqlite_only
def test_without_the_serve_extra_it_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "uvicorn", None)  # as if not installed
    result = CliRunner().invoke(cli, ["serve"])
    assert result.exit_code == 2
    assert result.output == "Error: auditor serve needs uvicorn: pip install 'auditor[serve]'\n"
