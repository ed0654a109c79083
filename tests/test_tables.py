"""auditor.cli.tables: tables fit the terminal without folding a number, a date or an id."""

from __future__ import annotations

import io

from rich.console import Console

from auditor.cli.tables import Col, layout, print_table, shorten

COLS = [
    Col("day"),
    Col("cache read", right=True),
    Col("project", cut="start", min=6),
    Col("agents $", right=True),
    Col("model", wide=True),
    Col("note", cut="end"),
]
ROWS = [
    ["2026-01-01", "12.2M", "/home/user/a/very/long/path/proj", "$3.5746", "x", "a [bold]b[/] c"],
    ["2026-01-02", "3", "/p", "$0.1", "y", ""],
]


def render(width: int, **kw) -> tuple[list[str], list[str]]:
    buf = io.StringIO()
    console = Console(file=buf, width=width, color_system=None)
    left_out = print_table(console, COLS, ROWS, total=["total", "12.2M", "", "$3.6", "", ""], **kw)
    return [line.rstrip() for line in buf.getvalue().splitlines()], left_out


def test_shorten_keeps_the_end_of_a_path_or_the_start_of_a_name():
    assert shorten("/home/user/project", 10, "start") == "…/project"
    assert shorten("/a/worktrees/agent-ab1e6e14", 12, "start") == "…nt-ab1e6e14"
    assert shorten("claude-sonnet-4-6", 8, "end") == "claude-…"
    assert shorten("short", 8, "start") == "short"


def test_a_narrow_terminal_cuts_paths_then_leaves_out_columns_never_folds_values():
    lines, left_out = render(30)
    assert all(len(line) <= 30 for line in lines[:-1])
    assert left_out == ["agents $", "note"]
    assert lines[-1] == "(left out for width: agents $, note; --wide shows all)"
    assert lines[3] == "2026-01-01  12.2M  …/proj"  # the date and the number whole
    assert lines[1].split() == ["day", "read", "project"]  # a header may break between words


def test_a_wide_enough_terminal_shows_every_default_column_in_full():
    lines, left_out = render(120)
    assert left_out == []
    assert "/home/user/a/very/long/path/proj  $3.5746  a [bold]b[/] c" in lines[3]
    assert "model" not in lines[1]  # a --wide column


def test_wide_shows_every_column_in_full_past_the_terminal_width():
    lines, left_out = render(30, wide=True)
    assert left_out == []
    assert (
        lines[3]
        == "2026-01-01  12.2M  /home/user/a/very/long/path/proj  $3.5746  x      a [bold]b[/] c"
    )
    assert lines[1].split() == ["day", "read", "project", "$", "model", "note"]


def test_layout_gives_cut_columns_what_is_left():
    shown, widths = layout(COLS, ROWS, 60)
    assert [COLS[i].header for i in shown] == ["day", "cache read", "project", "agents $", "note"]
    assert sum(widths) + 2 * (len(widths) - 1) <= 60
    assert widths[:2] == [10, 5] and widths[3] == 7  # uncut columns keep their natural width


def test_piped_tables_end_their_lines_without_spaces():
    """`auditor threads | ...` carried the padding of the last column to every line's end."""
    from pathlib import Path

    from helpers.cli import invoke

    samples = Path(__file__).resolve().parent.parent / "data" / "samples"
    invoke("ingest", "-q", str(samples), ok=True)
    for command in (["threads"], ["threads", "--wide"], ["report", "costs", "--by", "project"]):
        out = invoke(*command, ok=True).stdout
        assert len(out.splitlines()) > 3
        assert [line for line in out.splitlines() if line != line.rstrip()] == [], command
