"""Concurrent and scheduled runs: leases on observer calls, `auditor run --every`, clean Ctrl-C."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest
from helpers.audit import FakeObserver, FakeObserverPlugin, ScriptPlugin, quiet, write_script_thread
from helpers.live import auditor_argv, copy_lines, rows, run_cli
from helpers.wire import Reply, Stub, anthropic_response
from sqlalchemy import func, select

from auditor.audit.observer_audit import Auditor, audit_checkpoint
from auditor.audit.run import run
from auditor.audit.run_types import RunConfig
from auditor.audit.schedule import Stopper, repeat
from auditor.durations import format_duration, parse_duration, parse_since
from auditor.errors import AuditorError
from auditor.ingest.ingester import ingest
from auditor.plugins import get_plugin_manager
from auditor.store import leases
from auditor.store import schema as s

KEY = {"ANTHROPIC_API_KEY": "sk-ant-TEST-dummy"}
SESSIONS = [
    "claude-code/daaain-claude-code-log/-Users-dain-workspace-JSSoundRecorder/7acd37a8-2745-4b58-a8a9-46164b22ad9e.jsonl",
    "claude-code/daaain-claude-code-log/-Users-dain-workspace-danieldemmel-me-next/9e953218-585f-4692-89df-9e0747a31c68.jsonl",
    "claude-code/daaain-claude-code-log/-src-deep-manifest/a7da6a22-facc-4fcd-8bab-f83c87862004.jsonl",
    "claude-code/4thehalibit-omarchy-backup/-home-vwestberg-Claude/44ef5cbf-9cc3-4f7b-ac40-337a4d39713b.jsonl",
]


@pytest.fixture
def stub():
    server = Stub(
        Reply(200, anthropic_response({"needsCorrection": False, "message": None}), delay=0.2)
    )
    yield server
    server.close()


@pytest.fixture
def sessions(corpus, tmp_path):
    out = tmp_path / "projects"
    for rel in SESSIONS:
        copy_lines(corpus / rel, out / rel.split("/", 1)[1])
    return out


@pytest.mark.corpus
def test_two_runs_started_together_audit_each_checkpoint_once(engine, plugins, sessions, stub):
    ingest(engine, plugins, [sessions])
    argv = auditor_argv() + [
        "run",
        "--observer",
        "claude",
        "--base-url",
        stub.url,
        "-j",
        "2",
        "--json",
    ]
    import os

    env = {**os.environ, **KEY}
    procs = [
        subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1] for o in outs]
    summaries = [json.loads(o[0]) for o in outs]
    with engine.connect() as conn:
        per_checkpoint = conn.execute(
            select(s.Verdict.checkpoint_id, func.count()).group_by(s.Verdict.checkpoint_id)
        ).all()
        passed = conn.execute(
            select(func.count()).where(s.Checkpoint.gate_audit.is_(True))
        ).scalar()
        leftover = conn.execute(select(func.count()).select_from(s.Claim)).scalar()
    assert passed >= 10
    assert len(per_checkpoint) == passed and {n for _, n in per_checkpoint} == {1}
    assert len(stub.log) == passed  # no call was made twice
    assert sum(x["audited"] for x in summaries) == passed
    assert all(x["audited"] > 0 for x in summaries), "the two runs should have shared the work"
    assert leftover == 0


# -- leases, in process -----------------------------------------------------------------------
@pytest.fixture
def fake():
    return FakeObserver()


@pytest.fixture
def pm(fake):
    return get_plugin_manager(extra=[ScriptPlugin(), FakeObserverPlugin(fake)])


@pytest.fixture
def store(engine, pm, tmp_path):
    f = tmp_path / "threads.jsonl"
    write_script_thread(f, "t-claims", "Done! all tests pass.")
    ingest(engine, pm, [f])
    return engine


def claim_everything(engine, pm, owner: str, expires_in: float) -> None:
    """Hold the lease of every call a run would make, as `owner`."""
    auditor = Auditor(engine, pm, RunConfig(observer="fake"))
    now = datetime.now(UTC)
    for job in auditor.jobs():
        with engine.begin() as conn:
            conn.execute(
                s.Claim.__table__.insert().values(
                    key=job.claim_key,
                    checkpoint_id=job.checkpoint_id,
                    owner=owner,
                    claimed_at=now,
                    expires_at=now + timedelta(seconds=expires_in),
                )
            )


def test_a_call_leased_to_another_live_run_is_left_to_it(store, pm, fake):
    claim_everything(store, pm, "other-host:1:abcd", expires_in=600)
    summary = run(store, pm, RunConfig(observer="fake"), announce=quiet)
    assert (summary.busy, summary.audited, fake.calls) == (1, 0, 0)


def test_an_expired_lease_is_taken_over(store, pm, fake):
    claim_everything(store, pm, "other-host:1:abcd", expires_in=-1)
    summary = run(store, pm, RunConfig(observer="fake"), announce=quiet)
    assert (summary.busy, summary.audited, fake.calls) == (0, 1, 1)
    assert rows(store, s.Claim) == []


def test_the_lease_of_a_local_process_that_died_is_taken_over_at_once(store, pm, fake):
    dead = subprocess.Popen(["true"])
    dead.wait()
    claim_everything(store, pm, f"{leases.HOST}:{dead.pid}:abcd", expires_in=600)
    summary = run(store, pm, RunConfig(observer="fake"), announce=quiet)
    assert (summary.busy, summary.audited) == (0, 1)


def test_a_call_answered_while_waiting_is_not_made_again(store, pm, fake):
    auditor = Auditor(store, pm, RunConfig(observer="fake"))
    [job] = list(auditor.jobs())
    run(store, pm, RunConfig(observer="fake"), announce=quiet)  # another run answers it meanwhile
    import asyncio

    assert asyncio.run(audit_checkpoint(auditor, job)) is None
    assert job.answered is not None and fake.calls == 1


# -- the schedule -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text, seconds, written",
    [
        ("15m", 900, "15m"),
        ("90s", 90, "90s"),
        ("2h", 7200, "2h"),
        ("1d", 86400, "1d"),
        ("2w", 1209600, "2w"),
        ("30", 30, "30s"),
        ("0.5m", 30, "30s"),
    ],
)
def test_durations_read_and_write_one_unit_set(text, seconds, written):
    assert parse_duration(text).total_seconds() == seconds
    assert format_duration(parse_duration(text)) == written


@pytest.mark.parametrize("text", ["", "-5m", "soon", "15x"])
def test_a_duration_that_is_not_one_is_refused(text):
    with pytest.raises(
        AuditorError, match="is not a duration: use a number with s, m, h, d or w, like 90s"
    ):
        parse_duration(text)


@pytest.mark.parametrize("text", ["0s", "0m", "0.0h"])
def test_a_zero_duration_is_refused_as_such(text):
    with pytest.raises(AuditorError, match="is no time at all: a duration must be longer than 0"):
        parse_duration(text)


def test_since_takes_a_date_or_a_span_back_but_not_a_bare_number():
    now = datetime(2026, 11, 25, 12, tzinfo=UTC)
    assert parse_since("90s", now) == datetime(2026, 11, 25, 11, 58, 30, tzinfo=UTC)
    assert parse_since("2w", now) == datetime(2026, 11, 11, 12, tzinfo=UTC)
    assert parse_since("2026-11-01") == datetime(2026, 11, 1, tzinfo=UTC)
    for bad in ("30", "yesterday"):
        with pytest.raises(AuditorError, match=f"'{bad}' is not a time: use an ISO date"):
            parse_since(bad, now)


class Waited(threading.Event):
    """A stop event whose waits move a clock of the test's own instead of taking time, so the
    schedule's grid is read off exactly, whatever the machine is doing."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    def wait(self, timeout: float | None = None) -> bool:
        assert timeout is not None and timeout > 0, timeout
        self.now += timeout
        return self.is_set()


def test_repeat_runs_ticks_until_stopped_and_survives_a_failing_tick():
    stopper, seen, errors = Stopper(), [], []
    stopper.event = waited = Waited()

    def tick(n):
        seen.append((n, round(waited.now, 6)))
        if n == 2:
            raise RuntimeError("the store was locked")
        if n == 3:
            waited.now += 0.12  # a slow tick overruns two slots: they are not made up
        if n == 4:
            stopper.event.set()

    ran = repeat(0.05, tick, stopper, lambda n, exc: errors.append((n, str(exc))), waited.clock)
    assert ran == 4 and errors == [(2, "the store was locked")]
    assert seen == [(1, 0.0), (2, 0.05), (3, 0.1), (4, 0.25)]  # on the grid, the next free slot


def test_every_ticks_and_the_first_ctrl_c_stops_after_the_call_in_flight(
    engine, corpus, tmp_path, stub
):
    src = tmp_path / "src"
    copy_lines(corpus / SESSIONS[3], src / "a.jsonl")
    stub.default = Reply(
        200, anthropic_response({"needsCorrection": False, "message": None}), delay=1.5
    )
    import os

    proc = subprocess.Popen(
        auditor_argv()
        + [
            "run",
            "--every",
            "1s",
            "--source",
            str(src),
            "--observer",
            "claude",
            "--base-url",
            stub.url,
            "--min-tool-calls",
            "1",
            "--no-require-edit",
            "-j",
            "1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **KEY},
    )
    deadline = time.monotonic() + 60
    while not stub.log and time.monotonic() < deadline:
        time.sleep(0.02)
    assert stub.log, "the first tick made no observer call"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "every 1s: ingest" in err and "tick 1" in err
    [verdict] = rows(engine, s.Verdict)  # the call in flight finished and was recorded...
    assert verdict.status == "ok"
    [run_row] = rows(engine, s.Run)  # ...and nothing new started after Ctrl-C
    assert run_row.status == "interrupted" and len(stub.log) == 1


def test_every_ingests_the_sources_on_each_tick(engine, corpus, tmp_path, stub):
    src = tmp_path / "src"
    src.mkdir()
    config = tmp_path / "config.toml"
    config.write_text(
        f'sources = ["{src}"]\n\n[observer]\nobserver = "claude"\nbase_url = "{stub.url}"\n'
    )
    import os

    proc = subprocess.Popen(
        auditor_argv() + ["run", "--every", "1s"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **KEY, "AUDITOR_CONFIG": str(config)},
    )
    time.sleep(2.5)  # a tick or two over an empty directory
    copy_lines(corpus / SESSIONS[3], src / "later.jsonl")
    deadline = time.monotonic() + 60
    while not stub.log and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert stub.log and rows(engine, s.Verdict)
    assert "ingested 1 new" in err


def test_every_with_an_unusable_observer_fails_at_once(engine, tmp_path):
    result = run_cli(
        "run", "--every", "1s", "--observer", "claude", env={"ANTHROPIC_API_KEY": ""}, timeout=30
    )
    assert result.returncode == 2
    assert result.stderr.startswith("Error: observer 'claude' cannot be used: ")
