"""`auditor observers`: whether each backend is ready, without loading any of them.

It took 15 s (5 s of CPU) because each backend's check imported its SDK to see whether it was
installed: the Anthropic SDK alone takes seconds to import. The checks now look the packages
up without importing them; benchmarks/startup.py measures the command (CPU 3.8 s -> 0.85 s).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

SDKS = ("anthropic", "google.genai", "openai", "llama_cpp")


def test_observers_says_what_is_ready_without_importing_any_sdk(tmp_path):
    env = {**os.environ, "AUDITOR_DB": str(tmp_path / "a.db")}
    for key in ("GEMINI_API_KEY", "GOOGLE_API_KEY", "ANTHROPIC_API_KEY"):
        env.pop(key, None)
    run = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "auditor", "observers", "--json"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    imported = {line.rsplit("|", 1)[-1].strip() for line in run.stderr.splitlines()}
    assert not imported & set(SDKS), sorted(imported & set(SDKS))
    rows = {r["name"]: r for r in json.loads(run.stdout)}
    assert rows["claude"]["problem"] == (
        "The claude observer needs an API key: set ANTHROPIC_API_KEY (or pass --key)."
    )
    assert rows["gemini"]["problem"] == (
        "The gemini observer needs an API key: set GEMINI_API_KEY (or pass --key)."
    )


def test_a_missing_sdk_is_still_named(monkeypatch):
    from auditor_plugins.claude import ClaudeObserver
    from auditor_plugins.gemini import GeminiObserver

    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    monkeypatch.setenv("GEMINI_API_KEY", "k")
    assert ClaudeObserver().check({}) is None and GeminiObserver().check({}) is None
    monkeypatch.setitem(sys.modules, "anthropic", None)  # as if it were not installed
    monkeypatch.setitem(sys.modules, "google.genai", None)
    assert ClaudeObserver().check({}).startswith("The claude observer needs the anthropic SDK")
    assert GeminiObserver().check({}).startswith("The gemini observer needs the google-genai SDK")
