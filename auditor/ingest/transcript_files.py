"""Finding transcript files and knowing them again: the directory walk, where a file's JSON
starts, and the fingerprints that tell a file that grew from one rewritten in place."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import orjson

HEAD_BYTES = 64 * 1024  # what format detection reads of a file
FINGERPRINT_BYTES = 4096
# In a directory walk, only files with these suffixes are considered.
TRANSCRIPT_SUFFIXES = (".jsonl", ".json", ".eval", ".traj")


def iter_files(
    paths: Iterable[str | os.PathLike],
    on_error: Callable[[str, str], None],
    patterns: Iterable[str] = (),
) -> Iterator[Path]:
    """Yield the transcript files under `paths` (files given directly are always yielded).

    In a directory, a file is a transcript when its name ends in one of the JSON suffixes, or
    when its path matches one of `patterns`, which formats of other kinds declare (Markdown
    exports are known by name: `.aider.chat.history.md`, `.specstory/history/*.md`), so that a
    walk never reports every README as an unknown transcript.
    """
    patterns = tuple(patterns)
    for p in paths:
        path = Path(p).expanduser()
        if path.is_file():
            yield path.resolve()
            continue
        if not path.exists():
            on_error(str(path), "no such file or directory")
            continue
        if not os.access(path, os.R_OK | os.X_OK):
            on_error(str(path), "permission denied: cannot read this directory")
            continue

        def _walk_error(exc: OSError, path: Path = path) -> None:
            on_error(str(exc.filename or path), f"cannot read directory: {exc.strerror or exc}")

        for root, dirs, files in os.walk(path.resolve(), onerror=_walk_error):
            dirs.sort()
            for name in sorted(files):
                found = Path(root, name)
                if name.endswith(TRANSCRIPT_SUFFIXES) or any(found.match(p) for p in patterns):
                    yield found


def past_bad_lines(head: bytes) -> bytes | None:
    """`head` from its first complete line that parses as JSON, or None when that is its start
    (or no complete line parses)."""
    lines = head.split(b"\n")
    complete = lines if len(head) < HEAD_BYTES else lines[:-1]  # the last may be cut short
    for i, raw in enumerate(complete):
        body = raw.strip()
        if not body:
            continue
        try:
            orjson.loads(body)
        except orjson.JSONDecodeError:
            continue
        return b"\n".join(lines[i:]) if i else None
    return None


def _digest(fh, start: int, length: int) -> str:
    fh.seek(start)
    return hashlib.sha1(fh.read(length)).hexdigest()


def fingerprints(path: Path, offset: int) -> tuple[str, str]:
    """Return the digests of the bytes just after the start and just before `offset`."""
    with open(path, "rb") as fh:
        head = _digest(fh, 0, min(offset, FINGERPRINT_BYTES))
        tail_start = max(0, offset - FINGERPRINT_BYTES)
        tail = _digest(fh, tail_start, offset - tail_start)
    return head, tail
