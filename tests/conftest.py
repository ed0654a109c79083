"""Shared fixtures: an isolated home and database per test, and the real corpus."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # test helper modules

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("AUDITOR_SHARED", ROOT.parent / "shared"))
CORPUS = SHARED / "corpus"

from helpers.third_party import THIRD_PARTY, third_party_plugin  # noqa: E402 (a helper module above)

if os.environ.get(THIRD_PARTY):
    # Set by test_plugin_kit: run auditor's own tests with a third-party plugin installed, for
    # this process and the commands it starts.
    _paths = third_party_plugin(Path(os.environ[THIRD_PARTY]))
    sys.path[:0] = _paths
    os.environ["PYTHONPATH"] = os.pathsep.join(
        _paths + [p for p in [os.environ.get("PYTHONPATH")] if p]
    )


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    """Point HOME, the data directory and AUDITOR_DB at tmp_path so no test touches real files."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / ".local" / "share"))
    monkeypatch.setenv("AUDITOR_DB", str(tmp_path / "auditor.db"))
    monkeypatch.delenv("AUDITOR_DISABLE_PLUGINS", raising=False)
    monkeypatch.delenv("AUDITOR_STATE_DIR", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(home / ".local" / "state"))
    monkeypatch.setenv("AUDITOR_WORKER_IDLE", "5")  # a hook's worker does not outlive its test
    for key in ("GEMINI_API_KEY", "GOOGLE_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(key, raising=False)
    return tmp_path


@pytest.fixture
def corpus() -> Path:
    """The real transcripts in ../shared/corpus. Skips where absent, fails under CI."""
    if not CORPUS.is_dir():
        if os.environ.get("CI"):
            pytest.fail(f"CI must have the corpus at {CORPUS}, and it is missing")
        pytest.skip(
            f"the real-transcript corpus is not at {CORPUS} (it ships beside the repo, not in it)"
        )
    return CORPUS


@pytest.fixture
def engine(tmp_path):
    from auditor.db import open_db

    return open_db(tmp_path / "auditor.db")


@pytest.fixture
def plugins():
    from auditor.plugins import get_plugin_manager

    return get_plugin_manager()
