"""The test command's machine setup: nothing is installed system-wide outside CI."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def setup_chromium(tmp_path: Path, env: dict[str, str]) -> tuple[subprocess.CompletedProcess, str]:
    """Run .ci/chromium as root would on a machine without chromium, with apt-get recording
    its calls instead of installing anything."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "apt-get.calls"
    apt = bin_dir / "apt-get"
    apt.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    apt.chmod(0o755)
    fake_id = bin_dir / "id"
    fake_id.write_text("#!/bin/sh\necho 0\n")  # as root
    fake_id.chmod(0o755)
    bash = shutil.which("bash")
    result = subprocess.run(
        [bash, str(ROOT / ".ci" / "chromium")],
        env={"PATH": str(bin_dir), **env},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return result, calls.read_text() if calls.exists() else ""


def test_chromium_is_not_installed_outside_ci(tmp_path):
    result, apt_calls = setup_chromium(tmp_path, {})
    assert result.returncode == 0 and apt_calls == ""
    assert "browser tests will be skipped" in result.stderr


def test_ci_installs_chromium(tmp_path):
    result, apt_calls = setup_chromium(tmp_path, {"CI": "1"})
    assert result.returncode == 0
    assert apt_calls.splitlines() == ["update -qq", "install -y -qq chromium chromium-driver"]
