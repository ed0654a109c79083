"""How long the commands that load no model take to start, as CPU seconds from one run.

CPU time (user + system of the child), not wall time: on a shared machine the wall clock
measures the neighbours. Each command runs once against an empty store in a temporary
directory, beside `auditor --version` (Python, click and the package: the floor).

    python benchmarks/startup.py
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COMMANDS = (["--version"], ["observers"], ["plugins"], ["threads"])


def cpu_seconds(args: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Run `auditor ARGS`; return (its CPU seconds, its wall seconds)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "auditor", *args], env=env, capture_output=True, check=False
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "AUDITOR_DB": str(Path(tmp) / "auditor.db"), "HOME": tmp}
        cpu_seconds(["db", "upgrade"], env)  # the store made once, not counted
        floor, _ = cpu_seconds(COMMANDS[0], env)
        print(f"{'command':<20} {'cpu s':>7} {'wall s':>7} {'x floor':>8}")
        for args in COMMANDS:
            cpu, wall = cpu_seconds(args, env)
            print(f"{' '.join(args):<20} {cpu:7.2f} {wall:7.2f} {cpu / floor:8.1f}")


if __name__ == "__main__":
    main()
