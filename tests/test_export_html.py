"""`auditor export html`: a self-contained report, checked in headless Chromium (DOM and pixels).

Chromium is Debian's `chromium` package (`apt-get install -y chromium`), run headless with
background networking off. Without it the browser tests skip, except under CI (CI set), where
they fail: CI must install it.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import struct
import subprocess
import zlib
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers.reports import ObserversPlugin, TwoFaced, UsagePlugin, price_file, write_thread

from auditor.audit.run import run
from auditor.audit.run_types import RunConfig
from auditor.cli.main import cli
from auditor.ingest.ingester import ingest
from auditor.live import delivery as inj
from auditor.plugins import get_plugin_manager
from auditor.reports import cost_report
from auditor.reports.html_export import CORRECTION_HEADER, export_html
from auditor.store.verdict_rows import cost_text, delivery_text, list_verdicts

pytestmark = pytest.mark.both_stores

AUDIT_COLOR = (0xB4, 0x23, 0x7A)  # the border of corrections (CSS --audit)
GATE = {"audit_on_signals": [], "min_tool_calls": 1}


@pytest.fixture
def store(engine, tmp_path, monkeypatch):
    """Two threads: one where the agent claims success, is corrected by auditor and carries on."""
    price_file(
        tmp_path,
        monkeypatch,
        {
            "agent-model": {"input": 3, "output": 15, "cache_read": 0.3},
            "fake-1": {"input": 1, "output": 2},
        },
    )
    pm = get_plugin_manager(
        extra=[UsagePlugin(), ObserversPlugin(TwoFaced("alpha", mark="all tests pass"))]
    )
    f = tmp_path / "t.jsonl"
    write_thread(f, "t-fix", "Done, all tests pass <b>really</b>.", n_tools=2, day="2026-03-02")
    with open(f, "a") as fh:
        fh.writelines(
            json.dumps({**line, "cwd": "/work/demo"}) + "\n"
            for line in (
                {
                    "usage": 1,
                    "thread": "t-fix",
                    "id": "t-fix-cc",
                    "role": "user",
                    "source": "course-correction",
                    "text": "The last test run failed; please look again.",
                    "ts": "2026-03-02T12:05:00Z",
                },
                {
                    "usage": 1,
                    "thread": "t-fix",
                    "id": "t-fix-after",
                    "role": "assistant",
                    "text": "You are right, fixing it.",
                    "model": "agent-model",
                    "ts": "2026-03-02T12:06:00Z",
                    "tokens": [10, 20, 0, 0],
                },
            )
        )
    write_thread(f, "t-plain", "One test still fails.", n_tools=2, day="2026-03-03")
    ingest(engine, pm, [f])
    run(engine, pm, RunConfig(observer="alpha", gate=GATE), announce=lambda line: None)
    return engine


@pytest.fixture
def exported(store, tmp_path):
    out = tmp_path / "report"
    result = CliRunner().invoke(cli, ["export", "html", "-o", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert result.output == f"wrote {out / 'index.html'} and 2 thread pages\n"
    return out


def test_files_are_self_contained(exported):
    pages = sorted(p.name for p in exported.iterdir())
    assert pages == ["index.html", "thread-1.html", "thread-2.html"]
    for page in exported.iterdir():
        source = page.read_text()
        assert not re.search(r"""(src|href)=["'](https?:)?//""", source), page  # nothing fetched
        assert "<script" not in source and "<link" not in source
    assert (
        "&lt;b&gt;really&lt;/b&gt;" in (exported / "thread-1.html").read_text()
    )  # text is escaped


def test_named_threads_and_runs_only(store, tmp_path):
    assert [p.name for p in export_html(store, tmp_path / "a", ["t-plain"]).pages] == [
        "thread-2.html"
    ]
    assert len(export_html(store, tmp_path / "b", run_id=1).pages) == 2
    result = CliRunner().invoke(cli, ["export", "html", "--run", "9", "-o", str(tmp_path / "c")])
    assert (
        result.exit_code == 2 and result.output == "Error: '9' is not a known run. Available: 1\n"
    )


def test_a_transcript_full_of_markup_is_shown_as_text(engine, tmp_path):
    """`<script>` in what the agent said, a tool's name, input and output, and the project path
    comes out as text: the templates escape everything they are given."""
    script = "<script>alert('x')</script>"
    f = tmp_path / "t.jsonl"
    lines = write_thread(f, "t-xss", f"Done {script}", n_tools=1, cwd=f"/work/{script}")
    with open(f, "a") as fh:
        for row in (
            {
                **lines[0],
                "id": "t-xss-tool",
                "role": "assistant",
                "tools": [[script, False, {"command": f"echo '{script}'"}]],
                "ts": "2026-03-02T12:00:00Z",
            },
            {
                **lines[0],
                "id": "t-xss-out",
                "role": "user",
                "source": "tool-result",
                "result": f"{script}\n<img src=x onerror=alert(1)>",
                "for": "t-xss-tool-0",
                "ts": "2026-03-02T12:00:30Z",
            },
        ):
            fh.write(json.dumps(row) + "\n")
    ingest(engine, get_plugin_manager(extra=[UsagePlugin()]), [f])
    result = export_html(engine, tmp_path / "out")
    index, page = result.index.read_text(), result.pages[0].read_text()
    for source in (index, page):
        assert "<script" not in source.lower() and "<img" not in source
        dom = Dom(source)
        assert not dom.find("script") and not dom.find("img")
    assert page.count("&lt;script&gt;alert(") == 5  # text, path, tool name, input, output
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    assert f"/work/{script}" in Dom(index).find("td")[2][2]  # the project path, as text


def asked_checked(store, verdict: dict) -> dict:
    inj.check_pending(store, [verdict])
    return verdict


def test_the_correction_box_says_its_cost_and_delivery_as_show_does(store, exported, tmp_path):
    """The verdict box carries what `auditor show` prints beside a verdict: the run, the cost,
    and whether the correction reached the agent; the signals come in place before it."""
    [asked] = list_verdicts(store, corrections=True)
    assert asked["cost_usd"] > 0

    def box(folder: Path) -> dict[str, str]:
        dom = Dom((folder / f"thread-{asked['thread_id']}.html").read_text())
        [verdict] = [e for e in dom.find("div", "verdict") if "correction" in e[1]["class"]]
        return {
            "id": verdict[1]["id"],
            **{e[1]["class"]: e[2] for e in dom.find("span") if e[3][3] is verdict},
            "facts": next(e[2] for e in dom.find("div", "facts") if e[3] is verdict),
            "signals": " | ".join(e[2] for e in dom.find("div", "signal")),
        }

    before = box(exported)
    assert before["id"] == f"v-{asked['id']}"
    assert before["cost"] == cost_text(asked) == f"${asked['cost_usd']:.4f}"
    # the thread went on after the checkpoint: the page says the loop guard will hold it back,
    # as `auditor show` does, rather than promising that `auditor inject` sends it
    assert before["delivery"] == delivery_text(asked_checked(store, asked))
    assert before["delivery"].startswith("not delivered; `auditor inject` will hold it back")
    assert before["facts"].startswith(f"run {asked['run_id']} · {before['cost']}")
    assert "signal " in before["signals"]

    inj.inject_pending(store, get_plugin_manager().injector("stdout"), {"stream": io.StringIO()})
    export_html(store, tmp_path / "later")
    [delivered] = list_verdicts(store, corrections=True)
    # the thread went on after the checkpoint, so the loop guard held it back; the page says so
    assert delivery_text(delivered).startswith("held back by a loop guard: user-wrote-again")
    assert box(tmp_path / "later")["delivery"] == delivery_text(delivered)


# -- in the browser ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    if os.environ.get("CI"):
        pytest.fail(
            "CI must install Debian's chromium package (apt-get install -y chromium) for the HTML report tests"
        )
    pytest.skip(
        "chromium is not installed (apt-get install -y chromium): the browser tests of the HTML report skip"
    )


def browse(chromium: str, tmp_path: Path, page: Path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    return subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            f"--user-data-dir={profile}",
            *args,
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )


class Dom(HTMLParser):
    """The elements of a dumped DOM: [tag, attributes, text inside, parent], in document order."""

    def __init__(self, source: str):
        super().__init__()
        self.elements: list[list] = []
        self.open: list[list] = []
        self.feed(source)

    def handle_starttag(self, tag, attrs):
        el = [tag, dict(attrs), "", self.open[-1] if self.open else None]
        self.elements.append(el)
        if tag not in ("meta", "br", "img", "input", "line", "rect", "link"):
            self.open.append(el)

    def handle_endtag(self, tag):
        while self.open:
            if self.open.pop()[0] == tag:
                break

    def handle_data(self, data):
        for el in self.open:
            el[2] += data

    def children(self, parent: list, tag: str) -> list[list]:
        return [e for e in self.elements if e[0] == tag and e[3] is parent]

    def find(self, tag: str | None = None, cls: str | None = None) -> list[list]:
        return [
            e
            for e in self.elements
            if (tag is None or e[0] == tag)
            and (cls is None or cls in e[1].get("class", "").split())
        ]


def test_index_in_the_browser(chromium, exported, store, tmp_path):
    dom = Dom(browse(chromium, tmp_path, exported / "index.html", "--dump-dom").stdout)
    rows = dom.find("tr")[1:]
    assert len(rows) == 2
    costs = {r["thread"]: r for r in cost_report(store, ["thread"]).rows}
    for row in rows:
        tid = int(row[1]["data-thread"])
        cells = dom.children(row, "td")
        link = next(a for a in dom.find("a") if a[1]["href"] == f"thread-{tid}.html")
        assert (exported / link[1]["href"]).is_file() and link[2] in cells[0][2]
        by_class = {c[1].get("class", "").replace("num", "").strip(): c[2] for c in cells}
        assert by_class["agent-usd"] == f"${costs[tid]['agent_usd']:,.4f}"
        audit = costs[tid]["audit_usd"]
        assert by_class["audit-usd"] == (f"${audit:,.4f}" if audit else "—")
        assert by_class["corrections"] == ("1" if cells[0][2].startswith("t-fix") else "0")
    bars = [e for e in dom.find("rect") if "bar" in e[1].get("class", "")]
    assert {b[1]["class"] for b in bars} == {"bar agents", "bar audit"}  # the cost chart drew both


def test_thread_page_sets_corrections_apart(chromium, exported, tmp_path):
    page = exported / "thread-1.html"
    dom = Dom(browse(chromium, tmp_path, page, "--dump-dom").stdout)
    inserted = dom.find("div", "correction")
    heads = [e[2] for e in inserted]
    assert any(h.startswith(CORRECTION_HEADER) and "The last test run failed" in h for h in heads)
    asked = dom.find("div", "verdict")
    assert (
        len(asked) == 1
        and "auditor asked for a course correction here · alpha · fake-1" in asked[0][2]
    )
    assert "alpha: look again" in asked[0][2]
    assert [e[2].split(" · ")[0] for e in dom.find("div", "head")][:2] == ["user", "assistant"]

    shot = tmp_path / "thread.png"
    browse(
        chromium,
        tmp_path,
        page,
        f"--screenshot={shot}",
        "--hide-scrollbars",
        "--window-size=1280,1500",
    )
    width, height, pixels = read_png(shot)
    assert (width, height) == (1280, 1500)
    below_chart = pixels[480 * width :]  # the messages, not the chart's audit bar
    magenta = sum(1 for px in below_chart if all(abs(a - b) < 8 for a, b in zip(px, AUDIT_COLOR)))
    # two bordered boxes (the inserted message and the verdict): 2 px frame + 6 px left edge each
    assert magenta > 2 * (2 * 1100 + 6 * 40), (
        "the corrections' coloured borders should be on screen"
    )
    keep = os.environ.get("AUDITOR_SCREENSHOTS")
    if keep:  # to look at them
        shutil.copy(shot, Path(keep) / "thread.png")
        browse(
            chromium,
            tmp_path,
            exported / "index.html",
            f"--screenshot={Path(keep) / 'index.png'}",
            "--window-size=1280,900",
        )


def read_png(path: Path) -> tuple[int, int, list[tuple[int, int, int]]]:
    """Decode an 8-bit, non-interlaced RGB or RGBA PNG (what Chromium writes) into pixels."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        chunk = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", chunk)
            assert depth == 8 and color in (2, 6) and interlace == 0
            bpp = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * bpp
    prev = bytearray(stride)
    pixels = []
    for y in range(height):
        f, line = (
            raw[y * (stride + 1)],
            bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)]),
        )
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        pixels.extend(tuple(line[x : x + 3]) for x in range(0, stride, bpp))
        prev = line
    return width, height, pixels
