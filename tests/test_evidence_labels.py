"""The project's own labels (`benchmarks/evidence/labels.jsonl`) are an `auditor eval` labels file:
the README's measurement runs as written, on the real transcripts they name."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.wire import Reply, Stub, gemini_response

ROOT = Path(__file__).resolve().parent.parent
LABELS = ROOT / "benchmarks" / "evidence" / "labels.jsonl"
_spec = importlib.util.spec_from_file_location("evidence", ROOT / "benchmarks" / "evidence.py")
evidence = sys.modules.setdefault("evidence", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(evidence)


def auditor(db: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    env = {
        **{k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")},
        "AUDITOR_DISABLE_PLUGINS": "embedded",  # where installed it would be one more observer
        **env,
    }
    return subprocess.run(
        [sys.executable, "-m", "auditor", "--db", str(db), *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        env=env,
        timeout=600,
    )


@pytest.mark.slow  # 233 checkpoints rendered and audited
def test_the_readmes_eval_command_scores_every_label_of_the_projects_own_file(corpus, tmp_path):
    labels = [json.loads(line) for line in LABELS.read_text().splitlines() if line.strip()]
    files = sorted({str(corpus / label["file"]) for label in labels})
    db = tmp_path / "store.db"
    assert auditor(db, "ingest", *files, env={}).returncode == 0
    # The labels span agents of several vendors (Claude Code, Codex, Gemini CLI, Cursor...), so no
    # one observer is of another vendor than all of them: the README's command allows the same vendor.
    gemini = Stub(Reply(200, gemini_response({"needsCorrection": False, "message": ""})))
    try:
        keys = {"GEMINI_API_KEY": "AIza-TEST-dummy", "GOOGLE_GEMINI_BASE_URL": gemini.url}
        readme = "benchmarks/evidence/labels.jsonl --observer gemini --allow-same-vendor"
        out = auditor(db, "eval", *readme.split(), "--format", "json", env=keys)
    finally:
        gemini.close()
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout)
    extra = report["extra"] if "extra" in report else report
    needing = sum(label["needs_correction"] for label in labels)
    assert extra["labels"] == len(labels) == 233
    # The stand-in never asks for a correction: every label that needed one is a miss.
    assert extra["confusion"]["fn"] == needing == 74
    assert extra["confusion"]["tp"] == 0 and extra["failed"] == 0


@pytest.mark.slow  # every labelled transcript ingested and rendered uncut
def test_every_evidence_string_occurs_in_the_uncut_render_of_its_checkpoint(corpus, tmp_path):
    # A label is read off the transcript alone: were a string only in another file (a second
    # copy of the session), or mistyped, recall would count a miss the formatter never made.
    from auditor.audit.checkpoint_plan import CheckpointPlanner
    from auditor.ingest.ingester import ingest
    from auditor.plugins import get_plugin_manager
    from auditor.store.db import open_db

    labels = evidence.load_labels(LABELS)
    engine = open_db(tmp_path / "store.db")
    pm = get_plugin_manager()
    ingest(engine, pm, sorted({corpus / label["file"] for label in labels}))
    missing = []
    uncut_render = CheckpointPlanner(pm, formatter={"uncut": True}).render
    for c in evidence.load_checkpoints(engine, labels):
        uncut = uncut_render(c.checkpoint, c.thread, c.messages)
        flat = evidence.normalise(uncut)
        missing += [(c.label["at"], e) for e in c.label["evidence"] if not evidence.kept(e, flat)]
    assert missing == []
    # Every label names the round that added it, so held-out figures split into seen and new.
    assert {label["round"] for label in labels} == {1, 2, 3, 4}
