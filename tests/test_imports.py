"""The import rules of the source tree: plugins and examples use only the public API, and no
module of auditor/ or plugins/ imports itself back through others, at import time or from
inside a function.

`auditor.api` (and `auditor.hookimpl`) is what a plugin may import; the built-in plugins
(`plugins/`, shipped as `auditor_plugins`) and `examples/` are held to it like a third-party
package, so that what they need is public and the rest of `auditor` can change.
"""

from __future__ import annotations

import ast
import os
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
        "from auditor.api import Block\ndef f():\n    from auditor.audit.run import run\n"
    )
    assert auditor_imports(f) == [
        (1, "auditor.model"),
        (2, "auditor.schema"),
        (3, "auditor.api"),
        (5, "auditor.audit.run"),
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
        "print(light, 'auditor.audit.run' not in sys.modules, 'auditor.ingest.ingester' not in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "True", "True"]


def test_loading_every_plugin_imports_no_asyncio():
    """Every command loads every plugin; asyncio (a tenth of a cold ingest's start) is
    imported by the commands that run observers, not by loading the CLIs that serve them."""
    code = (
        "import sys; from auditor.plugins import get_plugin_manager; get_plugin_manager(); "
        "print('asyncio' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False"]


def test_an_ingest_that_shows_no_progress_loads_no_terminal_library(tmp_path):
    """`auditor ingest --json` (and --quiet), as scripts and hooks run it, pays for no rich."""
    code = (
        "import sys; from auditor.cli.main import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print('rich' in sys.modules, file=sys.stderr)"
    )
    env = {**os.environ, "AUDITOR_DB": str(tmp_path / "store.db")}
    for flag in ("--json", "--quiet"):
        out = subprocess.run(
            [sys.executable, "-c", code, "ingest", flag, str(tmp_path)],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        )
        assert out.stderr.split()[-1] == "False", out.stderr


# -- no import cycle -------------------------------------------------------------------------

PACKAGES = {"auditor": ROOT / "auditor", "auditor_plugins": ROOT / "plugins"}


def project_modules() -> dict[str, Path]:
    """Return every module of auditor and auditor_plugins by its dotted name."""
    out = {}
    for package, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = [package, *path.relative_to(folder).with_suffix("").parts]
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _is_type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        getattr(test, "id", None) == "TYPE_CHECKING"
        or getattr(test, "attr", None) == "TYPE_CHECKING"
    )


def imported_modules(name: str, path: Path, known: set[str], in_functions: bool) -> set[str]:
    """Return the project modules `name` imports when it is imported (the module level, and
    class bodies), or also when its functions run (`in_functions`). Imports under
    `if TYPE_CHECKING:` never run and are left out."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if _is_type_checking(node):
                continue
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not in_functions:
                continue
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(parts + ([node.module] if node.module else []))
                found.add(base)
                found.update(f"{base}.{alias.name}" for alias in node.names)
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.stmt):
                    visit([child])
                elif isinstance(child, ast.ExceptHandler | ast.match_case):
                    visit(child.body)

    visit(ast.parse(path.read_text(), str(path)).body)
    return (found & known) - {name}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Return the strongly connected groups of more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while not group or group[-1] != v:
                group.append(stack.pop())
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return sorted(out)


def import_graph(in_functions: bool) -> dict[str, set[str]]:
    modules = project_modules()
    known = set(modules)
    return {n: imported_modules(n, p, known, in_functions) for n, p in modules.items()}


def test_no_import_cycle_among_the_modules():
    """Not even through an import inside a function, which only hides a circle until it runs."""
    graph = import_graph(in_functions=True)
    assert len(graph) > 60 and {"auditor.model", "auditor.audit.observe"} <= graph["auditor.api"]
    assert "auditor.api" in graph["auditor_plugins.gate"]  # plugins/ is walked as auditor_plugins
    assert (
        "auditor.audit.batch" in graph["auditor.audit.run"]
    )  # imported inside run(): functions are walked
    assert cycles(graph) == []


def test_the_cycle_finder_finds_one(tmp_path):
    (tmp_path / "a.py").write_text("from . import b\n")
    (tmp_path / "b.py").write_text("def f():\n    from .a import x\n")
    (tmp_path / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import a\n"
    )
    known = {"p.a", "p.b", "p.c"}
    graph = {f"p.{n}": imported_modules(f"p.{n}", tmp_path / f"{n}.py", known, True) for n in "abc"}
    assert graph == {"p.a": {"p.b"}, "p.b": {"p.a"}, "p.c": set()}
    assert cycles(graph) == [["p.a", "p.b"]]
    module_level = {
        f"p.{n}": imported_modules(f"p.{n}", tmp_path / f"{n}.py", known, False) for n in "abc"
    }
    assert cycles(module_level) == []


def test_every_deliberate_catch_all_says_why():
    """ruff's BLE rule refuses `except Exception` unless marked; each mark gives its reason."""
    marked = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in python_files("auditor", "plugins", "tests", "benchmarks")
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if line.lstrip().startswith("except")
        and "noqa: BLE001" in line
        and not line.split("noqa: BLE001", 1)[1].startswith(" - ")
    ]
    assert marked == [], "say why after '# noqa: BLE001 - ':\n" + "\n".join(marked)


def test_comments_point_at_documents_in_the_repository():
    """The design is explained in docs/design.md; no comment cites a document a reader lacks."""
    import re

    cited = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in [*python_files("auditor", "plugins", "tests"), *ROOT.glob("*.md")]
        + sorted((ROOT / "docs").glob("*.md"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"\bseeds? 0\d\d", line, re.IGNORECASE)
    ]
    assert (ROOT / "docs" / "design.md").is_file()
    assert cited == [], "explain it in docs/design.md and point there:\n" + "\n".join(cited)
