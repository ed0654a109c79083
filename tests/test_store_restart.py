"""A PostgreSQL server restarted under running workers (`pg_ctl restart -m fast`, as an operator
or a package upgrade does): the workers reconnect and go on, or stop with one line saying how to
resume; no traceback, and only the calls in flight at the restart are ever paid twice.

The server is one of the test's own (restarting the session's would end other tests'
connections); the observer is Gemini's real SDK against a stub on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest
from helpers.wire import Reply, Stub, gemini_response
from test_workers import GATE, SESSIONS, verdicts

pytestmark = [pytest.mark.corpus, pytest.mark.slow]

WORKERS, CONCURRENCY = 2, 2


@pytest.fixture
def own_server(pg_server):  # pg_server: skips (or fails under CI) where PostgreSQL is missing
    from helpers import pg_server as pg

    server = pg.Server(pg_server.bin)
    yield server
    server.stop()


def test_workers_go_on_or_stop_in_one_line_when_the_server_restarts(corpus, tmp_path, own_server):
    for rel in SESSIONS:
        shutil.copy(corpus / rel, tmp_path / os.path.basename(rel))
    own_server.admin().execute("CREATE DATABASE store")
    db = own_server.url_base + "store"
    # A worker that hangs says where: faulthandler prints every thread's stack on SIGABRT.
    base = [sys.executable, "-X", "faulthandler", "-m", "auditor", "--db", db]
    subprocess.run([*base, "ingest", "-q", str(tmp_path)], check=True, timeout=300)
    env = {**os.environ, "GEMINI_API_KEY": "AIza-TEST-dummy"}
    stub = Stub(Reply(200, gemini_response({"needsCorrection": False, "message": None}), delay=0.3))
    env["GOOGLE_GEMINI_BASE_URL"] = stub.url
    run = [*base, "run", "--observer", "gemini", "--max-retries", "0", "-j", str(CONCURRENCY)]
    try:
        workers = [
            subprocess.Popen(
                [*run, *GATE], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
            for _ in range(WORKERS)
        ]
        deadline = time.monotonic() + 120
        while len(verdicts(db)) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        own_server.restart()
        ended = [ended_or_stacks(w, timeout=300) for w in workers]
        codes = [w.returncode for w in workers]
        # What a worker that stopped says to do: run the same command again.
        again = subprocess.run(
            [*run, *GATE], env=env, capture_output=True, text=True, timeout=300, check=False
        )
    finally:
        stub.close()
    for (_, err), code in zip(ended, codes, strict=True):
        assert "Traceback" not in err, err[-3000:]
        if code != 0:  # stopped: one line on the store, saying how to resume
            said = err.strip().splitlines()[-1]
            assert said.startswith("Error: ") and "run the same command again" in said, said
    assert again.returncode == 0, again.stderr[-3000:]
    rows = verdicts(db)
    answered = Counter(cp for cp, status, _ in rows if status == "ok")
    assert set(answered.values()) == {1}  # none recorded twice
    assert not [r for r in rows if r[1] == "error"]  # no call failed for the store's sake
    sent = Counter(json.dumps(r["body"], sort_keys=True) for r in stub.log)
    resent = sum(n - 1 for n in sent.values())
    # Paid twice: at most the calls in flight when the server went away.
    assert resent <= WORKERS * CONCURRENCY, resent
    print(f"calls {len(stub.log)}, paid twice {resent}, exit codes {codes}")
    for _, err in ended:
        print(err.strip().splitlines()[-1])


def ended_or_stacks(proc: subprocess.Popen, timeout: float) -> tuple[str, str]:
    """`proc`'s output once it ends; if it is still running after `timeout` seconds, the
    test fails with the stacks of its threads (started with `-X faulthandler`)."""
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        _, err = proc.communicate(timeout=60)
        what = " ".join(map(str, proc.args[7:9]))  # after python -X faulthandler -m auditor --db X
        pytest.fail(
            f"`auditor {what}` still ran {timeout:.0f} s after the restart:\n{err[-12000:]}"
        )


INGESTERS, RUN_WORKERS = 4, 3
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def fresh_copies(corpus, dest, copies: int) -> None:
    """The corpus's Codex sessions `copies` times, each copy's ids its own: an ingest long
    enough to be under way when the server restarts (the workers audit Claude Code only)."""
    for copy in range(copies):
        prefix = f"{copy:08x}"

        def fresh(m: re.Match, prefix: str = prefix) -> str:
            return prefix + m.group(0)[8:]

        for src in (corpus / "codex").rglob("*.jsonl"):
            out = dest / f"copy{copy}" / UUID.sub(fresh, str(src.relative_to(corpus)))
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(UUID.sub(fresh, src.read_text()))


def test_ingesters_and_workers_at_the_issues_scale_survive_a_restart(corpus, tmp_path, own_server):
    """4 ingesters and 3 workers (-j 2) against one server restarted mid-run: each goes on or
    stops with one line saying to run it again; run again, each finishes; no traceback; paid
    twice at most the calls in flight."""
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    for rel in SESSIONS:
        shutil.copy(corpus / rel, sessions / os.path.basename(rel))
    more = tmp_path / "more"
    fresh_copies(corpus, more, 8)
    own_server.admin().execute("CREATE DATABASE store")
    db = own_server.url_base + "store"
    base = [sys.executable, "-X", "faulthandler", "-m", "auditor", "--db", db]
    subprocess.run([*base, "ingest", "-q", str(sessions)], check=True, timeout=300)
    env = {**os.environ, "GEMINI_API_KEY": "AIza-TEST-dummy"}
    stub = Stub(Reply(200, gemini_response({"needsCorrection": False, "message": None}), delay=0.3))
    env["GOOGLE_GEMINI_BASE_URL"] = stub.url
    run = [*base, "run", "--observer", "gemini", "--max-retries", "0", "-j", str(CONCURRENCY)]
    run += [*GATE, "--agent", "claude-code"]
    ingest = [
        [*base, "ingest", "-q", "--source", f"machine-{i}", str(more)] for i in range(INGESTERS)
    ]

    def start(argv):
        return subprocess.Popen(
            argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )

    try:
        procs = [start(argv) for argv in ingest] + [start(run) for _ in range(RUN_WORKERS)]
        deadline = time.monotonic() + 120
        while len(verdicts(db)) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        under_way = [p.poll() is None for p in procs]
        own_server.restart()
        ended = [ended_or_stacks(p, timeout=600) for p in procs]
        codes = [p.returncode for p in procs]
        # What a process that stopped says to do: run the same command again.
        again = [
            subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600, check=False)
            for argv, code in zip([*ingest, *[run] * RUN_WORKERS], codes, strict=True)
            if code != 0
        ]
    finally:
        stub.close()
    assert all(under_way), under_way  # every one of them was running at the restart
    names = [f"ingester {i}" for i in range(INGESTERS)] + [
        f"worker {i}" for i in range(RUN_WORKERS)
    ]
    for name, (_, err), code in zip(names, ended, codes, strict=True):
        assert "Traceback" not in err, f"{name} (exit {code}):\n{err[-6000:]}"
        if code != 0:
            said = err.strip().splitlines()[-1]
            assert said.startswith("Error: ") and "run the same command again" in said, said
    assert [a.returncode for a in again] == [0] * len(again), [a.stderr[-2000:] for a in again]
    rows = verdicts(db)
    answered = Counter(cp for cp, status, _ in rows if status == "ok")
    assert set(answered.values()) == {1}  # none recorded twice
    assert not [r for r in rows if r[1] == "error"]  # no call failed for the store's sake
    sent = Counter(json.dumps(r["body"], sort_keys=True) for r in stub.log)
    resent = sum(n - 1 for n in sent.values())
    assert resent <= RUN_WORKERS * CONCURRENCY, resent  # at most the calls in flight
    print(f"calls {len(stub.log)}, paid twice {resent}, exit codes {codes}")
    for _, err in ended:
        print((err.strip().splitlines() or [""])[-1])
