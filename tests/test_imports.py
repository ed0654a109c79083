"""The import rules of the source tree: plugins and examples use only the public API.

`auditor.api` (and `auditor.hookimpl`) is what a plugin may import; the built-in plugins
(`plugins/`, shipped as `auditor_plugins`) and `examples/` are held to it like a third-party
package, so that what they need is public and the rest of `auditor` can change.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import auditor
import auditor.api
from auditor.hookspecs import hookimpl

ROOT = Path(__file__).resolve().parent.parent
PUBLIC = {"auditor", "auditor.api"}


def python_files(*folders: str) -> list[Path]:
    return sorted(
        p
        for folder in folders
        for p in (ROOT / folder).rglob("*.py")
        if not {".venv", "build", "__pycache__"} & set(p.parts)
    )


def auditor_imports(path: Path) -> list[tuple[int, str]]:
    """Return (line, module) for every absolute import of an `auditor` module in `path`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [node.module]
            if node.module == "auditor":  # `from auditor import api` names a module
                modules = [f"auditor.{a.name}" for a in node.names if a.name != "hookimpl"]
                modules = [m if m != "auditor.__version__" else "auditor" for m in modules]
        else:
            continue
        found += [(node.lineno, m) for m in modules if m.split(".")[0] == "auditor"]
    return found


def test_plugins_and_examples_import_only_the_public_api():
    files = python_files("plugins", "examples")
    assert len(files) > 20
    private = [
        f"{path.relative_to(ROOT)}:{line}: {module}"
        for path in files
        for line, module in auditor_imports(path)
        if module not in PUBLIC
    ]
    assert private == [], "import these names from auditor.api instead:\n" + "\n".join(private)


def test_the_walk_sees_a_private_import(tmp_path):
    f = tmp_path / "p.py"
    f.write_text(
        "import auditor.model\nfrom auditor import hookimpl, schema\n"
        "from auditor.api import Block\ndef f():\n    from auditor.run import run\n"
    )
    assert auditor_imports(f) == [
        (1, "auditor.model"),
        (2, "auditor.schema"),
        (3, "auditor.api"),
        (5, "auditor.run"),
    ]


@pytest.mark.parametrize("name", auditor.api.__all__)
def test_every_public_name_resolves(name):
    assert getattr(auditor.api, name) is not None


def test_hookimpl_is_reachable_as_the_docs_say():
    assert auditor.hookimpl is auditor.api.hookimpl is hookimpl


def test_importing_auditor_or_its_api_stays_light():
    """`auditor hook` imports the package on every event; a plugin imports the API on load."""
    code = (
        "import sys, auditor; light = 'pluggy' not in sys.modules; import auditor.api; "
        "print(light, 'auditor.run' not in sys.modules, 'auditor.ingest' not in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "True", "True"]
