"""A third-party plugin installed for a test run: examples/auditor-cli-observer, as pip would."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Set to a directory, it makes conftest install the plugin there for the whole run.
THIRD_PARTY = "AUDITOR_TEST_THIRD_PARTY"


def third_party_plugin(where: Path) -> list[str]:
    """Install examples/auditor-cli-observer into `where` as pip would: a dist-info with its
    entry point. Return the paths to put in front of sys.path (or PYTHONPATH) to have it."""
    info = where / "auditor_cli_observer-0.1.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: auditor-cli-observer\nVersion: 0.1.0\n"
    )
    (info / "entry_points.txt").write_text("[auditor]\ncli_observer = auditor_cli_observer\n")
    return [str(where), str(ROOT / "examples" / "auditor-cli-observer" / "src")]
