"""Short thread ids: the forms a table shows, and how a short form finds its thread again.

A thread's native id is long (a UUID, `SESSION/agent-NAME` for a sub-agent, a file name for a
chat log). Tables show a short form of it, and every short form shown is one `auditor show`
takes: a UUID keeps a prefix (8 characters, more when another thread starts the same way, as
Codex's UUIDv7 rollouts started in the same minute do), a sub-agent is `SESSION/NAME`, and a
long id is cut in the middle, `start…end`, matched by both ends. Each form is lengthened until
it tells its thread apart from every other thread in the store; the full id always does.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Iterator, Sequence

ELLIPSIS = "…"
_HEXISH = re.compile(r"[0-9a-f-]+")
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def middle(text: str, width: int) -> str:
    """`text` cut to `width` characters in the middle (`start…end`), or whole if it fits."""
    if len(text) <= width:
        return text
    keep = width - 1
    return text[: keep - keep // 2] + ELLIPSIS + text[-(keep // 2) :]


def _sub_name(sub: str) -> str:
    return sub.removeprefix("agent-").removeprefix("sidechain-")


def _head_forms(head: str) -> Iterator[str]:
    if _UUID.fullmatch(head):
        for k in range(8, len(head)):
            if head[k - 1] != "-":
                yield head[:k]
    else:
        for width in range(24, len(head)):
            yield middle(head, width)
    yield head


def _sub_forms(sub: str) -> Iterator[str]:
    name = _sub_name(sub)
    if _HEXISH.fullmatch(name):
        for k in range(12, len(name)):
            yield name[:k]
    else:
        for width in range(16, len(name)):
            yield middle(name, width)
    yield name


def forms(native_id: str) -> Iterator[str]:
    """The short forms of `native_id`, shortest first; the last is the id itself."""
    head, slash, sub = native_id.partition("/")
    if not slash:
        yield from _head_forms(head)
        return
    for h in _head_forms(head):
        for s in _sub_forms(sub):
            yield f"{h}/{s}"
    yield native_id


def first_form(native_id: str) -> str:
    """The shortest form, without looking at other threads (for a line about one thread)."""
    return next(forms(native_id))


def _part_matches(short: str, part: str) -> bool:
    start, cut, end = short.partition(ELLIPSIS)
    if not cut:
        return part.startswith(short)
    return len(part) >= len(start) + len(end) and part.startswith(start) and part.endswith(end)


def matches(short: str, native_id: str) -> bool:
    """True when `short` (a prefix, or a form from `forms`) may stand for `native_id`."""
    if _part_matches(short, native_id):
        return True
    head, slash, sub = short.partition("/")
    n_head, n_slash, n_sub = native_id.partition("/")
    return bool(
        slash and n_slash and _part_matches(head, n_head) and _part_matches(sub, _sub_name(n_sub))
    )


def literal_prefix(short: str) -> str:
    """What every id `short` matches starts with (for a LIKE 'prefix%' in the store)."""
    return re.split(f"[/{ELLIPSIS}]", short, maxsplit=1)[0]


def pick(short: str, native_ids: Iterable[str]) -> list[str]:
    """The ids `short` stands for: one when it resolves, several when it is ambiguous.

    The id itself wins outright; a session's prefix also matches its sub-agents'
    (`SESSION/agent-...`), and then means the session.
    """
    found = [n for n in native_ids if matches(short, n)]
    if short in found:
        return [short]
    if len(found) > 1:
        shortest = min(found, key=len)
        if all(n is shortest or n.startswith(shortest + "/") for n in found):
            return [shortest]
    return found


def shortest_forms(targets: Iterable[str], every_id: Sequence[str]) -> dict[str, str]:
    """Map each of `targets` to its shortest form that picks it alone among `every_id`."""
    ordered = sorted(set(every_id))

    def near(prefix: str) -> list[str]:
        lo = bisect.bisect_left(ordered, prefix)
        hi = bisect.bisect_left(ordered, prefix + "\U0010ffff")
        return ordered[lo:hi]

    out: dict[str, str] = {}
    for target in targets:
        for short in forms(target):
            if pick(short, near(literal_prefix(short))) == [target]:
                out[target] = short
                break
        else:
            out[target] = target
    return out
