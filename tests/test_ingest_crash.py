"""Crash safety: an ingest SIGKILLed at random points and re-run equals one clean ingest.

A small version of benchmarks/ingest_crash.py: real corpus files copied with fresh ids, the
real `auditor ingest` in child processes, ingest's commit groups shortened to one file so
that the kills land between and inside many commits.
"""

from __future__ import annotations

import importlib.util
import random
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("ingest_crash", ROOT / "benchmarks/ingest_crash.py")
crash = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(crash)

SUBSET = (
    "claude-code/4thehalibit-omarchy-backup",
    "claude-code/jnarowski-agentcmd",
    "claude-code/d-kimuson-claude-code-viewer",
    "codex/Kooksun-Lotto645",
    "codex/aneesh199608-dslint",
    "amp",
)


@pytest.mark.corpus
def test_ingest_killed_at_random_points_then_resumed_equals_a_clean_ingest(corpus, tmp_path):
    sources = sorted(
        p
        for sub in SUBSET
        for p in (corpus / sub).rglob("*")
        if p.is_file() and p.suffix in (".jsonl", ".json")
    )
    root = tmp_path / "copy"
    crash.copy_with_fresh_ids(sources, corpus, root, copy=7)
    clean_db, crash_db = tmp_path / "clean.db", tmp_path / "crash.db"
    subprocess.run(crash.ingest_cmd(clean_db, root), capture_output=True, check=False)

    rng = random.Random()
    seed = rng.randrange(1 << 30)
    stats = crash.crash_and_resume(
        root, crash_db, 10, random.Random(seed), len(sources), commit_seconds=0.0
    )
    assert stats["kills_landed"] >= 10, (seed, stats)
    assert stats["last_exit"] in (0, 1)

    clean, crashed = crash.snapshot(clean_db), crash.snapshot(crash_db)
    figures = crash.compare(clean, crashed)
    assert figures["threads"] > 20 and figures["dry_run_clean"][1] > 0
    assert figures["threads_differing"] == 0, (seed, figures)
    assert crashed == clean, seed
