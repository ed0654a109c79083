"""What auditor's hooks cost the real Codex CLI, as the client's own rollout timestamps show it.

The real Codex (tests/helpers/agents.py: 0.169.0) runs offline against the scripted Responses
server of the tests, with the hooks installed by `auditor hook install codex --user` and a
stand-in Gemini observer that takes --observer-delay seconds to answer (no correction). Each
session is two prompts (`codex exec`, then `codex exec resume`): the worker starts with the
first, so the second shows a session's later turns. A turn is a tool round of five commands and
an edit (the gate sends it to the observer) or of one command (the gate lets it go), then a
final answer. From the rollout Codex writes:

- PostToolUse: the time from a tool's end (its `item_completed`) to its output being recorded,
  which Codex does once the PostToolUse hooks have returned;
- UserPromptSubmit: from the turn's start to the prompt being recorded;
- Stop: from the final answer to `task_complete` (the Stop hooks ran in between).

Measured with the default install (Stop waits for the end-of-turn audit, `--wait`) and with
`--no-wait` (the Stop handler returns at once), to show what the wait costs a turn against an
observer of a given speed.

    python benchmarks/codex_hooks.py [--sessions 3] [--observer-delay 1.5]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from helpers.agents import CODEX, require  # noqa: E402 (found through sys.path above)
from helpers.live import auditor_argv  # noqa: E402
from helpers.openai_responses_server import ResponsesServer, Turn, patch, say, shell  # noqa: E402
from helpers.wire import Reply, Stub, gemini_response  # noqa: E402

EDIT = "*** Begin Patch\n*** Update File: calc.py\n@@\n-    return a - b\n+    return a + b\n*** End Patch\n"


def at(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def latencies(rollout: Path) -> dict[str, list[float]]:
    """Seconds each hook event held Codex up, read from the rollout's timestamps."""
    rows = [json.loads(line) for line in rollout.read_text().splitlines()]
    done: dict[str, float] = {}
    out: dict[str, list[float]] = {"PostToolUse": [], "UserPromptSubmit": []}
    started = answered = None
    for row in rows:
        p, t = row.get("payload") or {}, at(row["timestamp"])
        kind = p.get("type")
        if row["type"] == "event_msg" and kind == "item_completed":
            done[str(p["item"].get("id"))] = t
        elif row["type"] == "event_msg" and kind == "task_started":
            started = t
        elif row["type"] == "event_msg" and kind == "task_complete" and answered:
            key = "Stop, first turn" if "Stop, first turn" not in out else "Stop, later turn"
            out.setdefault(key, []).append(t - answered)
        elif row["type"] == "response_item":
            if kind in ("function_call_output", "custom_tool_call_output") and p["call_id"] in done:
                out["PostToolUse"].append(t - done[p["call_id"]])
            elif kind == "message" and p.get("role") == "user" and started:
                out["UserPromptSubmit"].append(t - started)
                started = None
            elif kind == "message" and p.get("role") == "assistant":
                answered = t
    return out


def session(
    work: Path, codex: Path, observer: Stub, wait: bool | None, audited: bool
) -> dict[str, list[float]]:
    """One session of two turns; `wait` None: no hooks installed at all."""
    home = work / "home"
    (home / ".codex").mkdir(parents=True)
    project = work / "project"
    project.mkdir()
    (project / "calc.py").write_text("def add(a, b):\n    return a - b\n")

    def turn(n: int) -> list[Turn]:
        if audited:  # five commands and an edit: the gate lets the turn through to the observer
            calls = [*(shell(f"t{n}c{i}", f"echo {i}") for i in range(5)), patch(f"t{n}e", EDIT)]
        else:  # one command: the gate lets it go without an observer call
            calls = [shell(f"t{n}c0", "cat calc.py")]
        return [Turn(calls), Turn([say(f"Done ({n}).")])]

    model = ResponsesServer([*turn(1), *turn(2)])  # a session's first turn, and a later one
    (home / ".codex" / "config.toml").write_text(model.config_toml())
    env = {
        **os.environ,
        "HOME": str(home),
        "CODEX_HOME": str(home / ".codex"),
        "AUDITOR_DB": str(work / "auditor.db"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "SCRIPTED_MODEL_KEY": "sk-scripted-bench",
        "GEMINI_API_KEY": "AIza-BENCH-dummy",
        "GOOGLE_GEMINI_BASE_URL": observer.url,
        "AUDITOR_WORKER_IDLE": "30",
    }
    install = [*auditor_argv(), "hook", "install", "codex", "--user", "-o", "gemini"]
    install += [] if wait else ["--no-wait"]
    if wait is not None:
        subprocess.run(install, env=env, capture_output=True, check=True)
    try:
        head = [str(codex), "exec", "--json", "--skip-git-repo-check"]
        first = subprocess.run(
            [*head, "Fix add() in calc.py."],
            env=env,
            cwd=project,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=120,
            check=True,
        )
        sid = json.loads(first.stdout.splitlines()[0])["thread_id"]
        subprocess.run(
            [*head, "resume", sid, "Now make it faster."],
            env=env,
            cwd=project,
            capture_output=True,
            stdin=subprocess.DEVNULL,
            timeout=120,
            check=True,
        )
    finally:
        model.close()
        for lock in (home / ".local" / "state").rglob("worker.lock"):  # the session is over
            try:
                os.kill(int(lock.read_text().split()[0]), signal.SIGTERM)
            except (OSError, ValueError, IndexError):
                pass
    [rollout] = (home / ".codex" / "sessions").rglob("rollout-*.jsonl")
    if os.environ.get("BENCH_WORKER_LOG"):  # what the worker did, to see where a wait went
        for log in (home / ".local" / "state").rglob("worker.log"):
            print(log.read_text())
    return latencies(rollout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=3)
    parser.add_argument("--observer-delay", type=float, default=1.5)
    args = parser.parse_args()
    codex = require(CODEX)
    observer = Stub(
        Reply(
            200,
            gemini_response({"needsCorrection": False, "message": ""}),
            delay=args.observer_delay,
        )
    )
    print(f"Codex {CODEX.version}, observer answering in {args.observer_delay:g}s")
    try:
        results = {}
        for wait, audited in ((True, True), (True, False), (False, True), (None, True)):
            got: dict[str, list[float]] = {}
            for _ in range(args.sessions):
                with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
                    for k, v in session(Path(tmp), codex, observer, wait, audited).items():
                        got.setdefault(k, []).extend(v)
            results[wait, audited] = got
            label = {True: "Stop waits for the audit (default)", False: "--no-wait"}.get(
                wait, "no hooks installed"
            )
            kind = "a turn the gate sends to the observer" if audited else "a turn the gate lets go"
            print(f"\n{label}, {kind}, {args.sessions} sessions:")
            for event, values in got.items():
                ms = sorted(v * 1000 for v in values)
                print(
                    f"  {event:<17} n={len(ms):<3} median {statistics.median(ms):6.0f} ms"
                    f"   max {ms[-1]:6.0f} ms"
                )
        print()
        bare = statistics.median(results[None, True]["PostToolUse"])
        hooked = statistics.median(results[False, True]["PostToolUse"])
        print(f"PostToolUse: {hooked / bare:.2f}x the time Codex takes without hooks")
        for turn in ("first turn", "later turn"):
            waits, quiet, fast = (
                statistics.median(results[k][f"Stop, {turn}"])
                for k in ((True, True), (True, False), (False, True))
            )
            print(
                f"The end-of-turn wait, {turn} of a session: {waits - fast:+.2f}s on an audited "
                f"turn ({waits / fast:.1f}x the Stop that does not wait), {quiet - fast:+.2f}s "
                "on a turn the gate lets go"
            )
    finally:
        observer.close()


if __name__ == "__main__":
    main()
