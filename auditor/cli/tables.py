"""Tables that fit the terminal: columns are left out before any value is wrapped.

A number, a date or an id is never folded over two lines: a table that would not fit first cuts
the columns that may be cut (a path keeps its end, a name its start), then leaves out its least
important columns and says which. `wide=True` shows every column in full, wider than the
terminal if need be (like `ps ww`). Every table command prints through `print_table`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.box import Box
from rich.cells import cell_len
from rich.console import Console
from rich.segment import Segment, Segments
from rich.table import Table
from rich.text import Text

from ..printable import printable
from ..store.short_ids import first_form

# Only horizontal rules: under the header and above a total. Columns are two spaces apart.
_RULES = Box("    \n    \n ── \n    \n ── \n ── \n    \n    \n")
GAP = 2  # cells between two columns


@dataclass(frozen=True)
class Col:
    """A column: its header and how it may give way when the terminal is narrow.

    `cut`: None for values that are never shortened (numbers, dates, ids); "start" to keep the
    end of the value (paths: `…/worktrees/agent-1`); "end" to keep its start (names).
    `min`: the narrowest a cut column gets before it is left out instead (a `keep` column's
    values are never cut so far that two of them read the same).
    `wide`: shown only with `wide=True`. `keep`: never left out for lack of room.
    `drop`: order of leaving out (the highest goes first; default: right to left).
    """

    header: str
    right: bool = False
    cut: str | None = None
    min: int = 8
    wide: bool = False
    keep: bool = False
    drop: int | None = None


def shorten(text: str, width: int, keep: str = "end") -> str:
    """Cut `text` to `width` cells with an ellipsis, keeping its start ("end") or end ("start")."""
    if cell_len(text) <= width:
        return text
    if width <= 1:
        return "…"[:width]
    if keep == "start":
        out = text
        while cell_len(out) > width - 1:
            out = out[1:]
        if "/" in out[1:]:  # a path: start at a whole component
            out = out[out.index("/", 1) :]
        return "…" + out
    out = text
    while cell_len(out) > width - 1:
        out = out[:-1]
    return out + "…"


def distinct_width(values: Sequence[str], col: Col) -> int:
    """The narrowest width, from `col.min` up, at which `values` cut as `col` says stay apart."""
    apart = set(values)
    widest = max((cell_len(v) for v in apart), default=0)
    for width in range(col.min, widest):
        if len({shorten(v, width, col.cut or "end") for v in apart}) == len(apart):
            return width
    return max(col.min, widest)


def _header_width(header: str) -> int:
    """Headers may break between words: the longest word is the least a column needs."""
    return max(cell_len(word) for word in header.split()) if header.strip() else 0


def layout(
    cols: Sequence[Col], rows: Sequence[Sequence[str]], width: int | None, wide: bool = False
) -> tuple[list[int], list[int]]:
    """Return (indexes of the columns to show, their widths) for a terminal `width` cells wide.

    Uncut columns get their whole natural width; cut columns share what is left, down to their
    `min`; when even that does not fit, columns are left out by `drop` order.
    """
    natural = []
    mins = []
    for i, col in enumerate(cols):
        cells = [cell_len(str(r[i])) for r in rows]
        natural.append(max([_header_width(col.header), *cells]))
        # A row's name is never cut so far that two rows read the same.
        keep_apart = col.keep and col.cut is not None
        mins.append(distinct_width([str(r[i]) for r in rows], col) if keep_apart else col.min)
    shown = [i for i, col in enumerate(cols) if wide or not col.wide]
    if wide or width is None:
        return shown, [natural[i] for i in shown]

    def need(idx: list[int]) -> int:
        fixed = sum(natural[i] if cols[i].cut is None else min(natural[i], mins[i]) for i in idx)
        return fixed + GAP * max(0, len(idx) - 1)

    order = sorted(
        (i for i in shown if not cols[i].keep),
        key=lambda i: i if (drop := cols[i].drop) is None else drop,
        reverse=True,
    )
    while need(shown) > width and order:
        shown.remove(order.pop(0))
    widths = {i: natural[i] for i in shown if cols[i].cut is None}
    cut = [i for i in shown if cols[i].cut is not None]
    room = width - sum(widths.values()) - GAP * max(0, len(shown) - 1)
    # Share the room: the narrowest wants are met first, the rest split what remains.
    ordered = sorted(cut, key=lambda i: natural[i])
    for n, i in enumerate(ordered):
        least = min(natural[i], mins[i])
        share = max(room // (len(cut) - n), least)
        # ...never so much that a column after it is pushed below its least
        later = sum(min(natural[j], mins[j]) for j in ordered[n + 1 :])
        widths[i] = max(least, min(natural[i], share, room - later))
        room -= widths[i]
    return shown, [widths[i] for i in shown]


def print_table(
    console: Console,
    cols: Sequence[Col],
    rows: Sequence[Sequence[str]],
    *,
    wide: bool = False,
    total: Sequence[str] | None = None,
    title: str | None = None,
    caption: str | None = None,
) -> list[str]:
    """Print `rows` (strings, one per column of `cols`) as a table fitting `console`'s width.

    `total` is a last row set apart by a rule. Returns the headers of the columns left out for
    lack of room (not those that are `wide` only); a dim line under the table names them too.
    """
    # Values may come from transcripts (a project path, a title): no terminal escapes.
    rows = [[printable(str(v)) for v in row] for row in rows]
    total = [printable(str(v)) for v in total] if total else None
    every = [*rows, *([total] if total else [])]
    shown, widths = layout(cols, every, None if wide else console.width, wide)
    table = Table(
        box=_RULES,
        show_edge=False,
        pad_edge=False,
        collapse_padding=True,
        header_style="bold",
        title=title,
        caption=caption,
        caption_justify="left",
    )
    for i, w in zip(shown, widths, strict=True):
        col = cols[i]
        table.add_column(
            Text(col.header, no_wrap=False, overflow="fold"),
            justify="right" if col.right else "left",
            width=w,
            no_wrap=True,
            overflow="ellipsis",
        )

    def cells(row: Sequence[str]) -> list[Text]:
        # Text, not markup: a path or a message may hold brackets.
        return [
            Text(shorten(str(row[i]), w, cut) if (cut := cols[i].cut) else str(row[i]))
            for i, w in zip(shown, widths, strict=True)
        ]

    for row in rows:
        table.add_row(*cells(row))
    if total:
        table.add_section()
        table.add_row(*cells(total), style="bold")
    full = sum(widths) + GAP * max(0, len(widths) - 1)
    # With wide, a table past the terminal is laid out at its own width and its lines run on.
    options = console.options.update(width=max(full, console.width))
    lines = console.render_lines(table, options, pad=False, new_lines=True)
    # A cell is padded to its column's width: the last one's padding would end every line
    # with spaces, which a pipe (grep, diff, a file) keeps.
    console.print(Segments(seg for line in lines for seg in _trimmed(line)), crop=False)
    left_out = [c.header for i, c in enumerate(cols) if i not in shown and not c.wide]
    if left_out:
        console.print(
            f"(left out for width: {', '.join(left_out)}; --wide shows all)",
            style="dim",
            soft_wrap=True,
        )
    return left_out


def _trimmed(line: list[Segment]) -> list[Segment]:
    """`line` (ending in a newline segment) without the spaces before its end."""
    body, end = line[:-1], line[-1:]
    while body and not body[-1].control and not body[-1].text.rstrip(" "):
        body.pop()
    if body and not body[-1].control:
        last = body[-1]
        body[-1] = Segment(last.text.rstrip(" "), last.style)
    return body + end


def short_thread_id(native_id: str) -> str:
    """A thread id short enough for a table, seen alone (`auditor.store.short_ids` has the rules;
    `threads.short_ids` lengthens those another stored thread shares)."""
    return first_form(native_id)
