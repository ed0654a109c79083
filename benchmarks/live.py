"""What the live hooks cost as a session grows (issue 26), as ratios from one run.

A long real Claude Code session from the corpus is replayed event by event: its transcript is
written out line by line as Claude Code wrote it, and at each point where Claude Code runs its
hooks the installed `auditor hook claude-code` command gets the event on stdin (a PostToolUse
per tool result, a UserPromptSubmit per typed prompt, a Stop at each end of turn). The session's
worker audits every tool round (every-inference mode, a gate that lets every round through)
against a stand-in observer speaking Gemini's wire format on 127.0.0.1, which answers at once
that nothing needs correcting. The replay waits for each event's audit before the next one, so
that every event is audited and its cost is its own.

Printed:
- the worker's CPU per event (the run time of its threads, in nanoseconds, read from /proc
  between events) by tenth of the session's
  events, and the last tenth as a ratio to the first (goal <= 1.5x); its resident memory at the
  end of each tenth and its peak, and what it grew from the end of the first tenth to the end of
  the last per MB the transcript grew meanwhile (goal: flat, read as at most `RSS_PER_MB`);
- the same CPU taken apart, beside the goal (which is on all of it): what the worker ran
  between one event's end and the next hook (idle), the events the worker waited on for the
  transcript to hold what they name (the worker says so in its log), the other events' CPU
  less the idle part; and, measured after the replay, an idle worker's CPU per second and the
  CPU of an event whose transcript never catches up (the worker waits its whole lag);
- the total CPU of hooks and worker as a share of the session's own wall time (its first to its
  last timestamp);
- the hook's fast path (CPU and wall per event) against a bare `python -c pass` of the same
  interpreter, measured between the same events;
- the goal for the fast path (<= 1.5x a bare start) on an installed copy: the checkout built
  and installed (not editable, no dependencies: the fast path needs none) into a venv of its
  own, as pip or pipx install it, and a PostToolUse with its session's worker running, in turn
  with `python -c pass` of that venv. The checkout's own venv says little here: an editable
  install's finder is loaded by every start of that interpreter, the bare one included, and
  with PYTHONDONTWRITEBYTECODE set the hook compiles the checkout at every event.

`--copies N` replays a replica: the session N times over under one session id, each copy's ids
made its own, so the thread grows to N times the session (N=16 is ~50 MB and ~3,000 tool calls
of the default session).

`--probe` reads inside the worker, at the end of each tenth, what its resident memory is made
of (glibc's heap in use and free but kept, Python's small-object heap, SQLite's own memory;
`benchmarks/live_probe`) and prints what each part grew per MB of transcript; `--probe N` also
traces Python's allocations (N frames) and prints the lines whose allocations grew most. The
probe is loaded by every hook too: its CPU figures are not the goal's.

`--against OTHER/.venv/bin/python` replays the same events through another checkout's auditor
too, and prints both and their ratios: a before and after measured under the same load. Both
take each event: their hooks run one after the other (which first, in turn), their workers
audit it at the same time, and each side's worker CPU is its own threads' count.

    python benchmarks/live.py [--session FILE] [--copies 1] [--limit EVENTS] [--against PYTHON]
                              [--fast-path-rounds 40] [--fast-path-only] [--probe [FRAMES]]
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import re
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from helpers.wire import Reply, Stub, gemini_response  # noqa: E402 (found through sys.path above)

# The memory goal: the worker's resident memory grows at most this many MB per MB of transcript.
# A worker starts at ~110 MB (interpreter, SQLAlchemy, the observer's SDK); a long day's session
# is tens of MB of transcript (the 16-copy replica, 50 MB). Growing by at most a tenth of that
# start over such a session (11 MB over the replica's last nine tenths, 45 MB) is about 0.2 MB
# per MB. What must grow is what the worker keeps per message to render the next checkpoint
# without reading the thread again (ids, kinds, the sizes of each unit at each level): ~1 KB a
# message, 0.15 MB per MB on this session, under the goal.
RSS_PER_MB = 0.2
SESSION = "claude-code/marot-spotter/4d5611e5-241a-462a-8d15-5122611a9569.jsonl"
TICK = os.sysconf("SC_CLK_TCK")
IDS = re.compile(rb'"(uuid|parentUuid|id|tool_use_id|requestId|messageId|leafUuid)":"([^"]+)"')


def auditor_argv(python: str = sys.executable) -> list[str]:
    script = Path(python).parent / "auditor"
    return (
        [str(script)]
        if script.is_file()
        else [python, "-c", "from auditor.cli.main import main; main()"]
    )


def replica(lines: list[bytes], copies: int) -> list[bytes]:
    """The session `copies` times over; from the second copy on every id gets a suffix of its
    own (the store knows a message by its id) and the copy hangs off the one before."""
    out = list(lines)
    tail_uuid = None
    for rec in reversed(lines):
        m = re.search(rb'"uuid":"([^"]+)"', rec)
        if m:
            tail_uuid = m.group(1)
            break
    last_uuid = tail_uuid
    for k in range(1, copies):
        suffix = f"-c{k}".encode()
        first = True
        for line in lines:
            line = IDS.sub(rb'"\1":"\2' + suffix + rb'"', line)
            if first and last_uuid and b'"parentUuid":null' in line:
                line = line.replace(b'"parentUuid":null', b'"parentUuid":"%s"' % last_uuid, 1)
                first = False
            out.append(line)
        if tail_uuid:
            last_uuid = tail_uuid + suffix
    return out


def _typed_prompt(rec: dict) -> str | None:
    """The text of a user message the user typed (not a tool result, not the client's own)."""
    if rec.get("type") != "user" or rec.get("isMeta") or rec.get("isCompactSummary"):
        return None
    content = (rec.get("message") or {}).get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list) and content:
        if any(b.get("type") == "tool_result" for b in content if isinstance(b, dict)):
            return None
        return " ".join(b.get("text", "") for b in content if isinstance(b, dict))
    return None


def plan_events(lines: list[bytes]) -> list[tuple[int, str, dict]]:
    """(lines written so far, hook event, its fields) in the order Claude Code runs the hooks."""
    events: list[tuple[int, str, dict]] = []
    recs = []
    for line in lines:
        try:
            recs.append(json.loads(line))
        except ValueError:
            recs.append({})
    last_text = None
    for i, rec in enumerate(recs):
        content = (rec.get("message") or {}).get("content")
        prompt = _typed_prompt(rec)
        if prompt is not None:
            if last_text is not None:
                events.append((i, "Stop", {"last_assistant_message": last_text}))
                last_text = None
            events.append((i + 1, "UserPromptSubmit", {"prompt": prompt}))
            continue
        if rec.get("type") == "assistant" and isinstance(content, list):
            texts = [b.get("text", "") for b in content if b.get("type") == "text"]
            if any(t.strip() for t in texts):
                last_text = "\n".join(texts)
            elif any(b.get("type") == "tool_use" for b in content):
                last_text = None
        if rec.get("type") == "user" and isinstance(content, list):
            for b in content:
                if isinstance(b, dict) and b.get("type") == "tool_result":
                    events.append((i + 1, "PostToolUse", {"tool_use_id": b.get("tool_use_id")}))
    if last_text is not None:
        events.append((len(recs), "Stop", {"last_assistant_message": last_text}))
    return events


def wall_span(lines: list[bytes]) -> float:
    stamps = []
    for line in lines:
        m = re.search(rb'"timestamp":"([^"]+)"', line)
        if m:
            try:
                stamps.append(datetime.fromisoformat(m.group(1).decode().replace("Z", "+00:00")))
            except ValueError:
                pass
    return (max(stamps) - min(stamps)).total_seconds() if stamps else float("nan")


def proc_cpu(pid: int) -> float:
    """Seconds of CPU (user + system) process `pid` used so far, its ended threads' included,
    in clock ticks (10 ms): the check on `thread_cpu`, too coarse for one event."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def thread_cpu(pid: int) -> dict[int, int]:
    """Nanoseconds each running thread of process `pid` has run so far (the scheduler's own
    count, /proc/PID/task/TID/schedstat). A thread that ends between two reads takes its last
    part with it: `proc_cpu`, which keeps it, says how much that is."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as fh:
                out[int(tid)] = int(fh.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return out


def proc_mem(pid: int) -> tuple[int, int]:
    """(resident, peak resident) kB of process `pid`."""
    got = {}
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith(("VmRSS:", "VmHWM:")):
                got[line.split(":")[0]] = int(line.split()[1])
    return got.get("VmRSS", 0), got.get("VmHWM", 0)


def worker_pid(sdir: Path) -> int | None:
    try:
        pid = int((sdir / "worker.lock").read_text().split()[0])
        os.kill(pid, 0)
        return pid
    except (OSError, ValueError, IndexError):
        return None


def done_offset(sdir: Path, thread: str) -> int:
    try:
        return int(json.loads((sdir / "done.json").read_text()).get(thread, 0))
    except (OSError, ValueError):
        return 0


def child_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


class Side:
    """One auditor replaying the session: its own home, store, spool, stand-in observer and
    worker. With `--against`, two sides take each event in turn (paired under the same load)."""

    def __init__(
        self, name: str, python: str, work: Path, session_id: str, probe: int | None = None
    ):
        self.name = name
        self.transcript = work / ".claude" / "projects" / "-home-u-proj" / f"{session_id}.jsonl"
        self.transcript.parent.mkdir(parents=True)
        self.transcript.write_bytes(b"")
        self.stub = Stub(Reply(200, gemini_response({"needsCorrection": False, "message": ""})))
        self.state = work / "state"
        # Where Claude Code keeps it (HOME is `work`): the hook reads transcripts only there.
        # Bytecode written, as an installed package has it: with PYTHONDONTWRITEBYTECODE every
        # event would compile the checkout's code again.
        self.env = {
            **{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
            "AUDITOR_DB": str(work / "a.db"),
            "AUDITOR_STATE_DIR": str(self.state),
            "AUDITOR_CONFIG": str(work / "none.toml"),
            "AUDITOR_WORKER_IDLE": "600",
            "GEMINI_API_KEY": "AIza-bench",
            "HOME": str(work),
        }
        # `--probe`: the worker reads what its memory is made of at each SIGUSR1 (see
        # benchmarks/live_probe), appending a line to `self.probe`.
        self.probe: Path | None = None
        self.splits: list[dict] = []  # one per tenth, with `--probe`
        if probe is not None:
            self.probe = work / "probe.jsonl"
            self.env["PYTHONPATH"] = os.pathsep.join(
                [
                    str(ROOT / "benchmarks" / "live_probe"),
                    *filter(None, [os.environ.get("PYTHONPATH")]),
                ]
            )
            self.env["AUDITOR_BENCH_PROBE"] = str(self.probe)
            self.env["AUDITOR_BENCH_PROBE_TRACE"] = str(probe)
        self.hook = auditor_argv(python) + [
            "hook",
            "claude-code",
            "--observer",
            "gemini",
            "--base-url",
            self.stub.url,
            "--max-retries",
            "0",
            "--min-tool-calls",
            "1",
        ]
        self.out = open(self.transcript, "ab")  # noqa: SIM115 (closed in `close`)
        self.written = 0
        self.size = 0  # bytes of transcript written
        self.sdir: Path | None = None
        self.pid: int | None = None
        self.last_cpu = 0.0
        self.threads: dict[int, int] = {}  # the worker's threads' run time at the last event
        self.log_at = 0  # how far the worker's log is read
        # per event: (kind, worker cpu s, rss kB, peak kB, hook cpu s, hook wall s,
        # worker cpu s in clock ticks, transcript bytes, worker cpu s between the last event's
        # end and this hook (idle), seconds the worker waited for the transcript)
        self.rows: list[tuple] = []
        self.pending: tuple = ()  # the event under way (`start`)

    def write(self, lines: list[bytes], upto: int) -> None:
        if upto > self.written:
            chunk = b"".join(lines[self.written : upto])
            self.size += len(chunk)
            self.out.write(chunk)
            self.out.flush()
            self.written = upto

    def event(self, lines: list[bytes], upto: int, name: str, payload: dict, then: int = 0) -> None:
        """Write the transcript up to line `upto`, run the hook, write it up to line `then`
        (what the agent writes next, while the worker looks), wait for the worker's audit."""
        self.start(lines, upto, name, payload, then)
        while not self.finish():
            time.sleep(0.02)

    def start(self, lines: list[bytes], upto: int, name: str, payload: dict, then: int) -> None:
        """The event up to its hook and the agent's next lines (see `event`)."""
        self.write(lines, upto)
        payload = {**payload, "transcript_path": str(self.transcript)}
        # What the worker ran since the last event's end: waiting, idle, for this hook.
        idle = self.ran(thread_cpu(self.pid)) if self.pid else 0.0
        before, t0 = child_cpu(), time.perf_counter()
        subprocess.run(self.hook, input=json.dumps(payload), text=True, env=self.env, check=True)
        hook_wall, hook_cpu = time.perf_counter() - t0, child_cpu() - before
        self.write(lines, then)
        if self.sdir is None:
            self.sdir = next(self.state.rglob("events.jsonl")).parent
        size = (self.sdir / "events.jsonl").stat().st_size
        now = time.monotonic()
        # When its audit is over: its end in events.jsonl marked done, or (a prompt, which the
        # worker reads at its next look) a tenth of a second.
        until = now + 60 if name in ("PostToolUse", "Stop") else now + 0.1
        self.pending = (name, payload["session_id"], size, until, idle, hook_cpu, hook_wall)

    def finish(self) -> bool:
        """Measure the event `start` began once its audit is over; False while it is not."""
        name, session, size, until, idle, hook_cpu, hook_wall = self.pending
        if name in ("PostToolUse", "Stop"):
            if done_offset(self.sdir, session) < size and time.monotonic() < until:  # type: ignore[arg-type]
                return False
        elif time.monotonic() < until:
            return False
        now = worker_pid(self.sdir)  # type: ignore[arg-type]
        if now != self.pid:
            self.pid, self.last_cpu, self.threads, idle = now, 0.0, {}, 0.0
        ticks = proc_cpu(self.pid) if self.pid else 0.0
        threads = thread_cpu(self.pid) if self.pid else {}
        ran = self.ran(threads)
        rss, peak = proc_mem(self.pid) if self.pid else (0, 0)
        self.rows.append(
            (
                name,
                ran,
                rss,
                peak,
                hook_cpu,
                hook_wall,
                ticks - self.last_cpu,
                self.size,
                idle,
                self.waited(),
            )
        )
        self.last_cpu, self.threads = ticks, threads
        return True

    def read_split(self) -> None:
        """Ask the worker what its memory is made of now (`--probe`); kept in `splits`."""
        if self.probe is None or not self.pid:
            return
        had = len(self.splits)
        os.kill(self.pid, signal.SIGUSR1)
        until = time.monotonic() + 30  # a traced snapshot of a large heap takes seconds
        while time.monotonic() < until:
            try:
                said = self.probe.read_text().splitlines()
            except OSError:
                said = []
            if len(said) > had:
                self.splits.append({**json.loads(said[had]), "size": self.size})
                return
            time.sleep(0.05)
        print(f"  ({self.name}: the worker gave no memory reading in 30 s)")

    def ran(self, threads: dict[int, int]) -> float:
        """Seconds of CPU the worker's threads ran since the last event's end."""
        return sum(ns - self.threads.get(tid, 0) for tid, ns in threads.items()) / 1e9

    def waited(self) -> float:
        """Seconds the worker said it waited for the transcript since the last look at its
        log (it says so when the transcript lagged the hook: `caught up after N ms`, or `did
        not catch up in N s`); the replay takes one event at a time."""
        try:
            with open(self.sdir / "worker.log", "rb") as fh:  # type: ignore[operator]
                fh.seek(self.log_at)
                said = fh.read()
        except OSError:
            return 0.0
        self.log_at += len(said)
        caught = [int(x) / 1000 for x in re.findall(rb"caught up after (\d+) ms", said)]
        missed = [float(x) for x in re.findall(rb"did not catch up in ([\d.]+) s", said)]
        return sum(caught) + sum(missed)

    def calibrate(self, lines: list[bytes], payload: dict) -> tuple[float, float]:
        """(the worker's CPU per second of wall time while idle, over 3 s without an event;
        its CPU for an event whose transcript never holds the call it names, which the worker
        waits for the whole of its lag and gives up on): what waiting costs, measured."""
        if not self.pid:
            return float("nan"), float("nan")
        threads = thread_cpu(self.pid)
        time.sleep(3.0)
        later = thread_cpu(self.pid)
        idle = sum(ns - threads.get(tid, 0) for tid, ns in later.items()) / 1e9 / 3.0
        self.threads = later
        never = {**payload, "hook_event_name": "PostToolUse", "tool_use_id": "toolu_never_written"}
        never.update(tool_name="Bash", tool_input={}, tool_response={})
        self.event(lines, self.written, "PostToolUse", never)
        calibration = self.rows.pop()
        return idle, calibration[1]

    def close(self) -> None:
        self.out.close()
        if self.pid:
            os.kill(self.pid, 15)
        self.stub.close()


def replay(
    lines: list[bytes],
    limit: int | None,
    work: Path,
    copies: int = 1,
    against: str | None = None,
    probe: int | None = None,
) -> None:
    session_id = json.loads(next(x for x in lines if b'"sessionId"' in x))["sessionId"]
    events = plan_events(lines)
    # A tool round is audited once the model's answer is known to be over (the worker waits
    # for the next answer's first line): after a tool event the agent writes on up to the next
    # event, as it does while the model answers.
    thens = [
        (events[n + 1][0] - 1 if n + 1 < len(events) else len(lines))
        if name == "PostToolUse"
        else 0
        for n, (_, name, _) in enumerate(events)
    ]
    if limit:
        events = events[:limit]
    pythons = {"this": sys.executable, **({"against": against} if against else {})}
    sides = [Side(name, py, work / name, session_id, probe) for name, py in pythons.items()]
    # The ends of the tenths `report` takes (the first event, which starts the worker, apart).
    tenth = max(1, (len(events) - 1) // 10)
    ends = {tenth * (i + 1) for i in range(9)} | {len(events) - 1}
    bare_cpu, bare_wall = [], []
    began = time.monotonic()
    for n, (upto, name, extra) in enumerate(events):
        payload = {
            "session_id": session_id,
            "cwd": "/home/u/proj",
            "permission_mode": "default",
            "hook_event_name": name,
            **extra,
        }
        if name == "PostToolUse":
            payload.update(tool_name="Bash", tool_input={}, tool_response={})
        if name == "Stop":
            payload["stop_hook_active"] = False
        # Paired: both sides take each event, their hooks one after the other (first one,
        # then the other, in turn), their workers auditing it at the same time; each side's
        # event is measured as soon as its own audit is over. (One side waiting for the other
        # would double the replay's wall time: ~1 event in 10 of a tool round still open
        # waits the worker's whole lag, 5 s, on each side.)
        order = sides if n % 2 == 0 else sides[::-1]
        for side in order:
            side.start(lines, upto, name, payload, thens[n])
        open_ = list(order)
        while open_:
            open_ = [side for side in open_ if not side.finish()]
            if open_:
                time.sleep(0.02)
        if probe is not None and n in ends:
            for side in sides:
                side.read_split()
        if n % 10 == 0:  # the bare interpreter, between the same events
            before, t0 = child_cpu(), time.perf_counter()
            subprocess.run([sys.executable, "-c", "pass"], check=True)
            bare_wall.append(time.perf_counter() - t0)
            bare_cpu.append(child_cpu() - before)
    took = time.monotonic() - began
    # What waiting costs, measured on each side at the end of the replay (not counted above).
    waiting = {
        side.name: side.calibrate(
            lines, {"session_id": session_id, "cwd": "/home/u/proj", "permission_mode": "default"}
        )
        for side in sides
    }
    for side in sides:
        side.close()
    results = {}
    for side in sides:
        if len(sides) > 1:
            print(f"== {side.name} ({pythons[side.name]})")
        calls = len(side.stub.log)
        results[side.name] = report(
            lines[: side.written],
            side.transcript,
            side.rows,
            bare_cpu,
            bare_wall,
            calls,
            took,
            copies,
            waiting[side.name],
        )
        if side.splits:
            split_report(side)
    if len(sides) > 1:
        this, other = results["this"], results["against"]
        print(
            "paired, this / against: worker CPU in all "
            f"{this['worker'] / other['worker']:.2f}x, last tenth per event "
            f"{this['last'] / other['last']:.2f}x, RSS at the end "
            f"{this['rss'] / other['rss']:.2f}x, CPU between events "
            f"{this['idle'] / other['idle'] if other['idle'] else float('nan'):.2f}x"
        )


def report(
    lines, transcript, rows, bare_cpu, bare_wall, calls, took, copies=1, waiting=(None, None)
) -> dict:
    tools = sum(1 for r in rows if r[0] == "PostToolUse")
    # A replica repeats the session's timestamps: it lasts its copies end to end.
    span = wall_span(lines[: len(lines) // copies or None]) * copies
    print(
        f"session: {transcript.stat().st_size / 1e6:.1f} MB, {len(lines)} lines, {len(rows)} hook "
        f"events ({tools} PostToolUse), {calls} observer calls; replayed in {took:.0f} s; "
        f"the session itself spans {span / 60:.0f} min"
    )
    # The first event starts the worker (interpreter, imports, the observer's SDK): a cost
    # of the session, not of an event; the tenths are the events after it.
    print(f"  first event (starts the worker): worker CPU {rows[0][1] * 1000:.0f} ms")
    all_rows, rows = rows, rows[1:]
    n = len(rows)
    tenth = max(1, n // 10)
    # Medians per tenth: the observer's SDK loads in the background at the worker's start,
    # a one-off that a mean would charge to the first tenth.
    print("  tenth   events  worker CPU/event (median, mean)  RSS at end  peak RSS  hook CPU/event")
    parts = [rows[i * tenth : (i + 1) * tenth if i < 9 else n] for i in range(10)]
    medians, means = [], []
    for i, part in enumerate(parts):
        if not part:
            continue
        mid = statistics.median(r[1] for r in part) * 1000
        medians.append(mid)
        means.append(statistics.fmean(r[1] for r in part) * 1000)
        print(
            f"  {i + 1:>5}  {len(part):>7}  {mid:14.1f} ms {means[-1]:7.1f} ms"
            f"  {part[-1][2] / 1024:12.1f} MB  {part[-1][3] / 1024:6.1f} MB"
            f"  {statistics.fmean(r[4] for r in part) * 1000:8.0f} ms"
        )
    ratio = medians[-1] / medians[0] if medians and medians[0] else float("nan")
    print(
        f"  worker CPU per event (medians), last tenth / first tenth: {ratio:.2f}x "
        f"({'meets' if ratio <= 1.5 else 'misses'} the 1.5x goal); means "
        f"{means[-1] / means[0] if means and means[0] else float('nan'):.2f}x"
    )
    # The same CPU taken apart (the goal above is on the whole of it): what the worker ran
    # between the last event's end and this event's hook (idle, waiting for the hook), and
    # the events the worker waited on for the transcript to hold what they name (at most
    # its lag, 5 s: a tool round not complete yet), whose CPU includes looking at it.
    print(
        "  the same, taken apart: CPU between events (from one event's end to the next hook: "
        "the worker waiting, early on the observer SDK loading too; mean); events whose "
        "transcript lagged >= 1 s (how many, their median CPU); the other events' median "
        "CPU less what ran between events"
    )
    own_medians = []
    for i, part in enumerate(parts):
        if not part:
            continue
        lagged = [r for r in part if r[9] >= 1.0]
        prompt = [r[1] - r[8] for r in part if r[9] < 1.0]
        own_medians.append(statistics.median(prompt) * 1000 if prompt else float("nan"))
        print(
            f"  {i + 1:>5}  idle {statistics.fmean(r[8] for r in part) * 1000:5.1f} ms"
            f"  lagged {len(lagged):>4} ({statistics.median(r[1] for r in lagged) * 1000 if lagged else float('nan'):6.1f} ms,"
            f" waited {statistics.fmean(r[9] for r in lagged) if lagged else 0:.1f} s)"
            f"  others less idle {own_medians[-1]:6.1f} ms"
        )
    own = own_medians[-1] / own_medians[0] if own_medians and own_medians[0] else float("nan")
    idle_all, waited_all = sum(r[8] for r in all_rows), sum(r[9] for r in all_rows)
    print(
        f"  events with no lag, CPU less idle, last tenth / first tenth (medians): {own:.2f}x "
        f"(not the goal: the goal is on all of it); CPU between events in all "
        f"{idle_all:.1f} s; waited for the transcript {waited_all:.0f} s in all"
    )
    idle_rate, never = waiting
    if idle_rate is not None:
        print(
            f"  waiting, measured after the replay: idle, {idle_rate * 1000:.2f} ms of CPU per "
            f"second; an event whose transcript never holds its call (waited for the whole "
            f"lag, then given up), {never * 1000:.1f} ms"
        )
    first_rss, last_rss = parts[0][-1][2], parts[-1][-1][2]
    print(
        f"  worker RSS, end of the last tenth / end of the first: {last_rss / first_rss:.2f}x; "
        f"peak {rows[-1][3] / 1024:.1f} MB"
    )
    grew, mb = (last_rss - first_rss) / 1024, (parts[-1][-1][7] - parts[0][-1][7]) / 1e6
    per_mb = grew / mb if mb else float("nan")
    print(
        f"  worker RSS grew {grew:.1f} MB while the transcript grew {mb:.1f} MB: {per_mb:.2f} MB "
        f"per MB ({'meets' if per_mb <= RSS_PER_MB else 'misses'} the {RSS_PER_MB} MB goal)"
    )
    worker = sum(r[1] for r in all_rows)
    hooks = sum(r[4] for r in all_rows)
    ticked = sum(r[6] for r in all_rows)
    print(
        f"  worker CPU per event is read in nanoseconds from its threads' scheduler counts; "
        f"they saw {worker:.2f} s of the {ticked:.2f} s its clock ticks counted in all"
    )
    print(
        f"  CPU in all: worker {worker:.1f} s + hooks {hooks:.1f} s = {worker + hooks:.1f} s, "
        f"{(worker + hooks) / span * 100:.2f}% of the session's {span / 60:.0f} min"
    )
    h_cpu = statistics.median(r[4] for r in all_rows)
    h_wall = statistics.median(r[5] for r in all_rows)
    b_cpu, b_wall = statistics.median(bare_cpu), statistics.median(bare_wall)
    print(
        f"  hook fast path, median per event: CPU {h_cpu * 1000:.0f} ms, wall "
        f"{h_wall * 1000:.0f} ms; python -c pass: CPU {b_cpu * 1000:.0f} ms, wall "
        f"{b_wall * 1000:.0f} ms; ratio CPU {h_cpu / b_cpu:.2f}x, wall {h_wall / b_wall:.2f}x "
        "(this checkout's venv; the goal is judged on an installed copy, below)"
    )
    return {"worker": worker, "last": medians[-1], "rss": last_rss, "idle": idle_all}


def split_report(side: Side) -> None:
    """What the worker's memory is made of at the end of each tenth, and what each part grew
    from the first tenth's end to the last's per MB of transcript (`--probe`)."""
    mb = 1 << 20
    parts = [
        ("rss", "RSS"),
        ("malloc_used", "heap in use"),
        ("malloc_free", "heap free, kept"),
        ("malloc_mapped", "mapped blocks"),
        ("pymalloc_arenas", "pymalloc arenas"),
        ("pymalloc_used", "pymalloc in use"),
        ("sqlite", "SQLite"),
        ("traced", "traced"),
    ]
    parts = [(k, name) for k, name in parts if k in side.splits[0]]
    print(
        "  inside the worker (--probe): glibc's heap (SQLite's memory is in its part in use), "
        "Python's small-object heap (arenas of 1 MiB), Python's traced allocations (--probe N)"
    )
    print("  tenth " + "".join(f"{name:>17}" for _, name in parts))
    for i, split in enumerate(side.splits):
        arenas = {"pymalloc_arenas": split.get("pymalloc_arenas", 0) * mb}
        cells = [({**split, **arenas}[k]) / mb for k, _ in parts]
        print(f"  {i + 1:>5} " + "".join(f"{c:14.1f} MB" for c in cells))
    first, last = side.splits[0], side.splits[-1]
    grew = (last["size"] - first["size"]) / 1e6
    if grew > 0:
        per = []
        for k, name in parts:
            scale = mb if k == "pymalloc_arenas" else 1
            per.append(f"{name} {(last[k] - first[k]) * scale / mb / grew:+.2f}")
        print(f"  grown per MB of transcript, tenth 1 -> {len(side.splits)}: " + ", ".join(per))
    if "traced" in first and side.probe is not None:
        import tracemalloc

        try:
            before = tracemalloc.Snapshot.load(f"{side.probe}.first.tm")
            after = tracemalloc.Snapshot.load(f"{side.probe}.last.tm")
        except OSError:
            return
        print("  traced allocations that grew most, first tenth's end -> last, by line:")
        for stat in after.compare_to(before, "lineno")[:12]:
            frame = stat.traceback[0]
            where = f"{Path(frame.filename).name}:{frame.lineno}"
            print(f"    {stat.size_diff / mb:+7.2f} MB {stat.count_diff:+8d}  {where}")


def installed_copy(python: str, where: Path) -> Path:
    """Install the checkout behind `python`'s auditor into a venv of its own at `where`, as a
    user's pip or pipx would (built, not editable; without dependencies: the fast path imports
    none). Return the venv's interpreter; `python` itself when its auditor is no checkout's."""
    found = subprocess.run(
        [python, "-c", "import auditor, pathlib; print(pathlib.Path(auditor.__file__).parent)"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tempfile.gettempdir(),  # not a checkout, whose own package would be found first
    )
    checkout = Path(found.stdout.strip()).parent
    if not (checkout / "pyproject.toml").is_file():
        return Path(python)  # installed already (not from a checkout): measured as it is
    subprocess.run([python, "-m", "venv", "--without-pip", str(where)], check=True)
    venv_python = where / "bin" / "python"
    subprocess.run(
        [python, "-m", "pip", "--python", str(venv_python), "install", "-q", "--no-deps"]
        + ["--disable-pip-version-check", str(checkout)],
        check=True,
        cwd=tempfile.gettempdir(),
    )
    return venv_python


def own_cpu(argv: list[str], stdin: bytes, env: dict[str, str]) -> float:
    """Run `argv` with `stdin`; return its own CPU seconds (through wait4)."""
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        env=env,
        cwd=tempfile.gettempdir(),
    )
    assert proc.stdin is not None
    proc.stdin.write(stdin)
    proc.stdin.close()
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status):
        sys.exit(f"{' '.join(argv)} failed")
    return usage.ru_utime + usage.ru_stime


class InstalledHook:
    """An installed copy's hook, given PostToolUse events of a session whose worker runs: the
    benchmark holds the session's worker lock (as a running worker does) and says what
    environment it serves, so that no worker is started and each event takes the path it
    takes during a session."""

    def __init__(self, python: str, work: Path):
        self.python = str(installed_copy(python, work / "venv"))
        home = work / "home"
        transcript = home / ".claude" / "projects" / "-home-u-proj" / "s.jsonl"
        transcript.parent.mkdir(parents=True)
        transcript.write_bytes(b"")
        self.env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        self.env.update(
            HOME=str(home), AUDITOR_DB=str(work / "a.db"), AUDITOR_STATE_DIR=str(work / "state")
        )
        ask = (
            "from auditor.live.fast_path import env_mark, session_dir, state_root\n"
            "print(session_dir(state_root(), 'claude-code', 's')); print(env_mark())"
        )
        said = subprocess.run(
            [self.python, "-c", ask], env=self.env, capture_output=True, text=True, check=True
        ).stdout.split()
        self.sdir = sdir = Path(said[0])
        sdir.mkdir(parents=True)
        (sdir / "worker.env").write_text(said[1])
        self.lock = os.open(sdir / "worker.lock", os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(self.lock, fcntl.LOCK_EX)
        os.write(self.lock, f"{os.getpid()}\n".encode())
        self.hook = [str(Path(self.python).parent / "auditor"), "hook", "claude-code"]
        self.hook += ["--observer", "gemini"]
        self.payload = json.dumps(
            {
                "session_id": "s",
                "transcript_path": str(transcript),
                "cwd": "/home/u/proj",
                "permission_mode": "default",
                "hook_event_name": "PostToolUse",
                "tool_name": "Bash",
                "tool_input": {"command": "pytest -q"},
                "tool_response": {"stdout": "12 passed\n", "stderr": "", "interrupted": False},
                "tool_use_id": "toolu_bench",
            }
        ).encode()
        self.bare: list[float] = []
        self.event: list[float] = []

    def round(self) -> None:
        self.bare.append(own_cpu([self.python, "-c", "pass"], b"", self.env))
        self.event.append(own_cpu(self.hook, self.payload, self.env))


def fast_path(pythons: dict[str, str], work: Path, rounds: int) -> None:
    """The goal for the hook's fast path, on installed copies (paired with `--against`)."""
    copies = {
        name: InstalledHook(python, work / f"installed-{name}") for name, python in pythons.items()
    }
    for copy in copies.values():  # the file cache warm, as during a session
        copy.round()
        copy.bare.clear()
        copy.event.clear()
    for i in range(rounds):
        for copy in copies.values() if i % 2 == 0 else list(copies.values())[::-1]:
            copy.round()
    print(
        f"hook fast path on an installed copy (built, in a venv of its own; a PostToolUse, "
        f"the session's worker running), medians of {rounds} rounds, CPU:"
    )
    ratios = {}
    for name, copy in copies.items():
        bare, event = statistics.median(copy.bare), statistics.median(copy.event)
        ratios[name] = event / bare
        print(
            f"  {name}: python -c pass {bare * 1000:.1f} ms, hook event {event * 1000:.1f} ms: "
            f"{event / bare:.2f}x ({'meets' if event / bare <= 1.5 else 'misses'} the 1.5x goal)"
        )
    for copy in copies.values():
        assert not (copy.sdir / "worker.log").exists(), "an event started a worker"
    if len(copies) > 1:
        print(
            f"  paired, this / against: hook event {statistics.median(copies['this'].event) / statistics.median(copies['against'].event):.2f}x"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default = Path(os.environ.get("AUDITOR_SHARED", ROOT.parent / "shared")) / "corpus" / SESSION
    parser.add_argument("--session", type=Path, default=default)
    parser.add_argument("--copies", type=int, default=1)
    parser.add_argument("--limit", type=int, help="Replay only the first N events.")
    parser.add_argument(
        "--against",
        metavar="PYTHON",
        help="also replay through the auditor of this interpreter's environment (another "
        "checkout's venv), event by event in turn with this one: before and after, paired",
    )
    parser.add_argument(
        "--fast-path-rounds",
        type=int,
        default=40,
        help="rounds of the installed copy's hook event and bare start",
    )
    parser.add_argument(
        "--fast-path-only", action="store_true", help="measure only the installed hook"
    )
    parser.add_argument(
        "--probe",
        type=int,
        nargs="?",
        const=0,
        metavar="FRAMES",
        help="read inside the worker what its memory is made of at each tenth (benchmarks/"
        "live_probe); with FRAMES, trace Python's allocations too (slower, larger)",
    )
    args = parser.parse_args()
    pythons = {"this": sys.executable, **({"against": args.against} if args.against else {})}
    with tempfile.TemporaryDirectory(prefix="auditor-live-bench-") as tmp:
        if not args.fast_path_only:
            lines = replica(args.session.read_bytes().splitlines(keepends=True), args.copies)
            replay(lines, args.limit, Path(tmp), args.copies, args.against, args.probe)
        fast_path(pythons, Path(tmp), args.fast_path_rounds)
    print(
        f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; "
        f"python {sys.version.split()[0]}"
    )


if __name__ == "__main__":
    main()
