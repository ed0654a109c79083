"""Debian's Chromium driven by Playwright for Python, for the tests of `auditor serve`.

The browser is the system's (`apt-get install -y chromium chromium-driver`; .ci/chromium installs
it under CI), never one Playwright downloads. Under CI a missing chromium or playwright fails the
test; elsewhere the test is skipped with the command that installs it.
"""

from __future__ import annotations

import os
import shutil

import pytest

CHROMIUM = "/usr/bin/chromium"
# Headless, as root, on a machine with no network: no sandbox, no GPU, and nothing that phones
# home (the closed network refuses those connections, many at a time).
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def _missing(reason: str):
    if os.environ.get("CI"):
        pytest.fail(f"CI runs the browser tests and {reason}")
    pytest.skip(reason)


def require_chromium() -> str:
    """The path of Debian's chromium; skips (fails under CI) when it is not installed."""
    path = CHROMIUM if os.path.exists(CHROMIUM) else shutil.which("chromium")
    if not path:
        _missing("chromium is not installed (apt-get install -y chromium chromium-driver)")
    try:
        import playwright  # noqa: F401
    except ImportError:
        _missing("playwright is not installed (pip install -e '.[test]')")
    return path
