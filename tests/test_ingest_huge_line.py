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
