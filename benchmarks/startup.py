"""What the commands that call no model cost to run, as CPU seconds against a bare interpreter.

CPU time (user + system of the child), not wall time: on a shared machine the wall clock
measures the neighbours. Every command is run `--repeat` times in turn with a bare
`python -c pass` of the same interpreter, and the least CPU of each is kept (neighbours only
ever add to it). The store holds the bundled samples (data/samples), ingested and reported on
once before measuring, so `report costs --by day` is warm: its sums are up to date, as they
are on any report after the first. Bytecode is written and a first run made before measuring,
as an installed package has its .pyc files (PYTHONDONTWRITEBYTECODE would make every run
compile the package again).

The goal of issue 26: a warm `report costs --by day` under 0.15 s of CPU.

    python benchmarks/startup.py [--repeat 7] [--against OTHER_CHECKOUT/.venv/bin/python]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = (
    ["--version"],
    ["observers"],
    ["plugins"],
    ["threads"],
    ["report", "costs", "--by", "day"],
)
REPORT_GOAL = 0.15


def cpu_seconds(argv: list[str], env: dict[str, str]) -> float:
    """Run `argv`; return its CPU seconds (its own, through wait4). In the temporary directory:
    `python -m auditor` started in a checkout imports that checkout's code, whatever the
    interpreter, and `--against` would then measure this checkout twice."""
    with open(os.devnull, "wb") as null:
        proc = subprocess.Popen(argv, stdout=null, stderr=null, env=env, cwd=tempfile.gettempdir())
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        sys.exit(f"{' '.join(argv[2:])} failed ({proc.returncode})")
    return usage.ru_utime + usage.ru_stime


def prepare(python: str, home: Path) -> dict[str, str]:
    """An environment of its own for `python`'s auditor: a store holding the samples."""
    home.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(AUDITOR_DB=str(home / "auditor.db"), HOME=str(home), AUDITOR_SOURCE="bench")
    subprocess.run(
        [python, "-m", "auditor", "ingest", "-q", str(ROOT / "data" / "samples")],
        env=env,
        check=True,
        capture_output=True,
        cwd=tempfile.gettempdir(),
    )
    for args in COMMANDS:  # bytecode written, sums made: what is measured is a warm run
        cpu_seconds([python, "-m", "auditor", *args], env)
    return env


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--repeat", type=int, default=7, help="runs of each, the least kept")
    ap.add_argument(
        "--against",
        metavar="PYTHON",
        help="also measure the auditor of this interpreter's environment (another checkout's "
        "venv), in turn with this one: before and after, paired",
    )
    args = ap.parse_args()
    pythons = {"this": sys.executable}
    if args.against:
        pythons["against"] = args.against
    with tempfile.TemporaryDirectory() as tmp:
        envs = {name: prepare(python, Path(tmp) / name) for name, python in pythons.items()}
        bare: dict[str, list[float]] = {name: [] for name in pythons}
        runs: dict[tuple[str, str], list[float]] = {}
        for _ in range(args.repeat):
            for name, python in pythons.items():
                bare[name].append(cpu_seconds([python, "-c", "pass"], envs[name]))
                for cmd in COMMANDS:
                    argv = [python, "-m", "auditor", *cmd]
                    runs.setdefault((name, " ".join(cmd)), []).append(cpu_seconds(argv, envs[name]))
    print(f"{'auditor':<8} {'command':<24} {'cpu s':>7} {'x bare':>7}")
    for name in pythons:
        floor = min(bare[name])
        print(f"{name:<8} {'(python -c pass)':<24} {floor:7.3f} {1:7.1f}")
        for cmd in COMMANDS:
            cpu = min(runs[(name, " ".join(cmd))])
            print(f"{name:<8} {' '.join(cmd):<24} {cpu:7.3f} {cpu / floor:7.1f}")
    for name in pythons:
        report = min(runs[(name, " ".join(COMMANDS[-1]))])
        said = "met" if report < REPORT_GOAL else "NOT met"
        print(
            f"{name}: warm `report costs --by day` {report:.3f} s CPU, "
            f"{report / min(bare[name]):.1f}x a bare start (goal < {REPORT_GOAL} s: {said})"
        )


if __name__ == "__main__":
    main()
