"""`auditor show THREAD` sets course corrections apart: dimmed header naming auditor, coloured frame."""

from __future__ import annotations

import io
import json
import re

import pytest
from helpers.reports import UsagePlugin, write_thread
from rich.console import Console

from auditor.cli import render
from auditor.ingest.ingester import ingest
from auditor.plugins import get_plugin_manager
from auditor.store.threads import find_thread, load_messages

pytestmark = pytest.mark.both_stores

ANSI = re.compile(r"\x1b\[([0-9;]*)m")


@pytest.fixture
def thread(engine, tmp_path):
    f = tmp_path / "t.jsonl"
    write_thread(f, "t-fix", "Done, all tests pass.", n_tools=1)
    with open(f, "a") as fh:
        fh.write(
            json.dumps(
                {
                    "usage": 1,
                    "thread": "t-fix",
                    "id": "t-fix-cc",
                    "role": "user",
                    "source": "course-correction",
                    "text": "The last test run failed; look again.",
                    "ts": "2026-03-02T12:05:00Z",
                }
            )
            + "\n"
        )
    ingest(engine, get_plugin_manager(extra=[UsagePlugin()]), [f])
    th = find_thread(engine, "t-fix")
    return th, load_messages(engine, th.id)


def styled_lines(thread, monkeypatch) -> list[list[tuple[str, str]]]:
    """Render the thread on a colour terminal; return each line as (SGR codes, text) runs."""
    buf = io.StringIO()
    monkeypatch.setattr(
        render,
        "console",
        Console(file=buf, force_terminal=True, color_system="standard", width=100),
    )
    render.show_thread(*thread)
    out = []
    for line in buf.getvalue().splitlines():
        runs, style, pos = [], "", 0
        for m in ANSI.finditer(line):
            if m.start() > pos:
                runs.append((style, line[pos : m.start()]))
            style, pos = m.group(1), m.end()
        if pos < len(line):
            runs.append((style, line[pos:]))
        out.append(runs)
    return out


def test_a_correction_is_framed_in_magenta_under_a_dim_header(thread, monkeypatch):
    lines = styled_lines(thread, monkeypatch)
    text = ["".join(t for _, t in runs) for runs in lines]
    top = next(i for i, t in enumerate(text) if "inserted by auditor · course correction" in t)
    assert "The last test run failed; look again." in text[top + 1]
    header = next(s for s, t in lines[top] if "inserted by auditor" in t)
    assert "2" in header.split(";")  # dim
    frame = [
        s
        for s, t in lines[top] + lines[top + 1] + lines[top + 2]
        if t.strip() and set(t.strip()) <= set("╭╮╰╯─│")
    ]
    assert frame and all("35" in s.split(";") for s in frame)  # magenta
    # the person's own message is framed differently (cyan), and says nothing of auditor
    user_top = next(i for i, t in enumerate(text) if "Fix the parser" in t) - 1
    assert "inserted by" not in text[user_top]
    assert all("36" in s.split(";") for s, t in lines[user_top] if set(t.strip()) <= set("╭╮─"))


def test_show_command_prints_the_header(thread):
    from click.testing import CliRunner

    from auditor.cli.main import cli

    result = CliRunner().invoke(cli, ["show", "t-fix"], catch_exceptions=False)
    assert result.exit_code == 0
    assert (
        "inserted by auditor · course correction  [t-fix-cc] 2026-03-02 12:05:00" in result.stdout
    )
