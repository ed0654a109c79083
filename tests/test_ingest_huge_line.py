"""A transcript holding a line far longer than any agent writes (one valid record, then 300 MB
of NUL bytes with no newline: a sparse file, a dump gone wrong) is read in bounded memory: the
huge line is passed over in chunks and reported, the valid record kept. The real `auditor
ingest`, its peak memory compared with an ingest of the valid record alone.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers.live import CC_SESSION

HUGE = 300 << 20
RECORD = {
    "type": "user",
    "uuid": "u-1",
    "sessionId": "s-huge",
    "timestamp": "2026-11-01T10:00:00Z",
    "cwd": "/work",
    "message": {"role": "user", "content": "Fix the failing test"},
}


def peak_ingest_mb(path, db) -> tuple[float, str]:
    """Ingest `path` in a child process; return its peak resident memory (MB) and stderr."""
    code = (
        "import resource, subprocess, sys\n"
        "done = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)\n"
        "print(done.stderr, file=sys.stderr)\n"
    )
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            sys.executable,
            "-m",
            "auditor",
            "--db",
            str(db),
            "ingest",
            str(path),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    return float(done.stdout.split()[-1]), done.stderr


@pytest.mark.slow
def test_a_huge_line_is_passed_over_in_bounded_memory(tmp_path):
    small = tmp_path / "small" / "s-huge.jsonl"
    small.parent.mkdir()
    small.write_text(json.dumps(RECORD) + "\n")
    huge = tmp_path / "huge" / "s-huge.jsonl"
    huge.parent.mkdir()
    with open(huge, "wb") as fh:
        fh.write((json.dumps(RECORD) + "\n").encode())
        fh.truncate(HUGE)  # NUL bytes to the end, without a newline (a sparse file)
    base, _ = peak_ingest_mb(small, tmp_path / "a.db")
    peak, said = peak_ingest_mb(huge, tmp_path / "b.db")
    first = len(json.dumps(RECORD)) + 1
    assert f"s-huge.jsonl:2: line over 64 MB ({HUGE - first:,} bytes): skipped" in said, said
    assert peak < base + 2 * 64 + 32, (base, peak)  # a line limit read (and copied) at most


def test_a_bounded_read_goes_on_where_the_last_stopped(corpus, tmp_path, monkeypatch):
    """A live worker reads so much of a file per event (`read_limit`): reads of 8 KB each,
    passing over a line too long to keep across several of them, end in the store one read of
    the whole file gives."""
    import auditor.transcript_reading
    from auditor.ingest.ingester import Ingester
    from auditor.plugins import get_plugin_manager
    from auditor.store.db import open_db

    monkeypatch.setattr(auditor.transcript_reading, "LINE_LIMIT", 4096)  # a 20 KB line is too long
    lines = (corpus / CC_SESSION).read_bytes().splitlines(keepends=True)
    path = tmp_path / "cc" / "1af7fc5e-8455-4414-9ccd-011d40f70b2a.jsonl"
    path.parent.mkdir()
    path.write_bytes(b"".join(lines[:12]) + b"\0" * 20_000 + b"\n" + b"".join(lines[12:]))

    def stored(engine) -> list:
        with engine.connect() as conn:
            return conn.exec_driver_sql(
                "SELECT native_id, role, line, blocks FROM messages ORDER BY seq"
            ).all()

    plugins = get_plugin_manager()
    whole = open_db(tmp_path / "whole.db")
    Ingester(whole, plugins).run([path])
    bounded = open_db(tmp_path / "bounded.db")
    reads, unread = 0, [1]
    while unread != [0]:
        done = Ingester(bounded, plugins, read_limit=8192).run([path])
        unread = [f.unread for f in done.files]
        reads += 1
        assert reads < 50
    assert reads > path.stat().st_size // 8192 // 2  # it was read in parts
    assert stored(bounded) == stored(whole) != []
    with bounded.connect() as conn:
        problems = conn.exec_driver_sql("SELECT line, error FROM ingest_errors").all()
    [(line, said)] = problems  # the long line, said once
    assert line == 13 and said.endswith("bytes passed over, the rest at the next read")
