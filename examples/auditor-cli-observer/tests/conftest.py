"""Let the tests run from a checkout too: use ../src when the package is not installed."""

import importlib.util
import sys
from pathlib import Path

if importlib.util.find_spec("auditor_cli_observer") is None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
