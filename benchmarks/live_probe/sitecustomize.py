"""What the live worker's memory is made of, read inside the worker (`live.py --probe`).

`benchmarks/live.py --probe` puts this folder first on the import path of the hooks it runs,
which start the session's worker with their environment: Python imports this module at the
start of every one of those processes, and it acts in the worker alone. The benchmark sends
the worker SIGUSR1 at the end of each tenth of the replay; the worker then appends one JSON
line to the file `AUDITOR_BENCH_PROBE` names, splitting what it holds:

- glibc's heap (`mallinfo2`): bytes in use and bytes free but kept (fragments, or pages not
  given back), and blocks mapped on their own;
- Python's small-object heap (pymalloc, from `sys._debugmallocstats`): its arenas (what it
  holds from the system) and the bytes in allocated blocks (not told while tracing: tracemalloc
  stands between Python and pymalloc);
- SQLite's own allocations (`sqlite3_memory_used`: its page caches, statements);
- with `AUDITOR_BENCH_PROBE_TRACE=N` (tracemalloc, N frames, from the worker's start):
  Python's traced allocations, and a snapshot at the first and the last reading
  (`<file>.first.tm`, `<file>.last.tm`) for the benchmark to compare by line.

Nothing here is the product's: the worker is measured as it runs, with a signal handler
added and, with tracing, tracemalloc's cost (it makes the worker slower and its heap larger).
"""

from __future__ import annotations

import os
import sys


def _worker() -> bool:
    return (
        bool(os.environ.get("AUDITOR_BENCH_PROBE")) and "hook" in sys.argv and "worker" in sys.argv
    )


def _install() -> None:
    import ctypes
    import json
    import signal
    import tempfile

    out = os.environ["AUDITOR_BENCH_PROBE"]
    frames = int(os.environ.get("AUDITOR_BENCH_PROBE_TRACE") or 0)
    if frames:
        import tracemalloc

        tracemalloc.start(frames)

    class MallInfo2(ctypes.Structure):
        _fields_ = [
            (name, ctypes.c_size_t)
            for name in (
                "arena",
                "ordblks",
                "smblks",
                "hblks",
                "hblkhd",
                "usmblks",
                "fsmblks",
                "uordblks",
                "fordblks",
                "keepcost",
            )
        ]

    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = MallInfo2
    except (OSError, AttributeError):
        libc = None
    try:
        sqlite = ctypes.CDLL("libsqlite3.so.0")
        sqlite.sqlite3_memory_used.restype = ctypes.c_int64
    except (OSError, AttributeError):
        sqlite = None  # Python's sqlite3 built with its own copy: not read

    def pymalloc() -> dict[str, int]:
        """Python's small-object heap, from the statistics it prints to the C stderr."""
        wanted = {
            "# arenas allocated current": "pymalloc_arenas",
            "# bytes in allocated blocks": "pymalloc_used",
        }
        got: dict[str, int] = {}
        saved = os.dup(2)
        with tempfile.TemporaryFile() as tmp:
            os.dup2(tmp.fileno(), 2)
            try:
                sys._debugmallocstats()
            finally:
                os.dup2(saved, 2)
                os.close(saved)
            tmp.seek(0)
            for line in tmp.read().decode(errors="replace").splitlines():
                for prefix, key in wanted.items():
                    if line.startswith(prefix):
                        got[key] = int(line.rsplit("=", 1)[1].strip().replace(",", ""))
        return got

    readings = [0]

    def read(_signum, _frame) -> None:
        with open("/proc/self/status") as fh:
            rss = next(int(x.split()[1]) * 1024 for x in fh if x.startswith("VmRSS:"))
        split: dict[str, int] = {"rss": rss}
        if libc is not None:
            m = libc.mallinfo2()
            split.update(malloc_used=m.uordblks, malloc_free=m.fordblks, malloc_mapped=m.hblkhd)
        split.update(pymalloc())
        if sqlite is not None:
            split["sqlite"] = sqlite.sqlite3_memory_used()
        if frames:
            import tracemalloc

            split["traced"] = tracemalloc.get_traced_memory()[0]
            name = "first" if readings[0] == 0 else "last"
            tracemalloc.take_snapshot().dump(f"{out}.{name}.tm")
        readings[0] += 1
        with open(out, "a") as fh:
            fh.write(json.dumps(split) + "\n")

    signal.signal(signal.SIGUSR1, read)


if _worker():
    _install()
