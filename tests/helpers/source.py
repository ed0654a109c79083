"""The project's source copied for a build, so that a test's `pip install` never writes build
output (`build/`, `*.egg-info`) into the working tree, where tests running beside it (pytest-xdist
runs two at once) would meet half-written files."""

from __future__ import annotations

import shutil
from pathlib import Path


def copy_source(src: Path, dest: Path) -> Path:
    """Copy a project without build output, so a build never writes into the working tree."""
    ignore = shutil.ignore_patterns(
        ".git",
        ".venv",
        ".venv-*",
        "build",
        "dist",
        "*.egg-info",
        "__pycache__",
        "*.db",
        "tests",
        "benchmarks",
        "examples",
        ".pytest_cache",
    )
    shutil.copytree(src, dest, ignore=ignore)
    return dest
