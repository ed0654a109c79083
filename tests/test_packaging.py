"""A non-editable install into a fresh virtualenv works from any directory, migrations included."""

from __future__ import annotations

import json
import subprocess
import sysconfig
import venv
from pathlib import Path

import pytest
from helpers.source import copy_source

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_wheel_install_runs_ingest_from_another_directory(tmp_path):
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py = env_dir / "bin" / "python"
    # The dependencies come from the environment running the tests (the base interpreter may
    # have none of them); auditor itself is installed non-editable. A path in a .pth file adds
    # that directory only: the test environment's own editable auditor is not picked up.
    site = subprocess.run(
        [py, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    ours = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
    (Path(site) / "test-deps.pth").write_text("\n".join(sorted(ours)) + "\n")
    # Built from a copy: pip builds in the source tree, and the tree is the one the other tests read.
    source = copy_source(ROOT, tmp_path / "source")
    built = subprocess.run(
        [py, "-m", "pip", "install", "-v", "--no-deps", str(source)],
        check=True,
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    # setuptools has nothing to warn of (a deprecated field, a data folder left out of the
    # packages): its warnings fill the test command's output.
    warned = [line for line in (built.stdout + built.stderr).splitlines() if "Warning:" in line]
    assert warned == []
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = subprocess.run(
        [py, "-c", "import auditor, auditor_plugins, auditor_migrations; print(auditor.__file__)"],
        check=True,
        cwd=elsewhere,
        capture_output=True,
        text=True,
    ).stdout
    assert str(ROOT) not in where and "site-packages" in where
    # Every module of the source tree is installed (a package missing from pyproject.toml's
    # list is not), and py.typed says the annotations are for type checkers: a plugin
    # author's mypy checks their code against auditor.api.
    installed = Path(where.strip()).parent
    source = ROOT / "auditor"
    modules = {p.relative_to(source) for p in source.rglob("*.py")}
    assert {p.relative_to(installed) for p in installed.rglob("*.py")} >= modules
    assert (installed / "py.typed").is_file()
    # the CMake file the embedded observer's install hint names by its installed path
    assert (installed.parent / "auditor_plugins" / "llama_cpp_text_only.cmake").is_file()
    transcript = elsewhere / "chat.json"
    transcript.write_text(
        json.dumps(
            {
                "id": "chat-1",
                "messages": [
                    {"role": "user", "content": "hello"},
                    {"role": "assistant", "content": "hi there"},
                ],
            }
        )
    )
    db = elsewhere / "store.db"
    out = subprocess.run(
        [env_dir / "bin" / "auditor", "--db", str(db), "ingest", "--json", str(transcript)],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["messages"] == 2
    current = subprocess.run(
        [env_dir / "bin" / "auditor", "--db", str(db), "db", "current"],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    words = current.split()  # "current: 0002 head: 0002"
    assert words[0] == "current:" and words[1] == words[3] != "(empty)"
    # Every subpackage is in the wheel (a package left out of pyproject's list fails here).
    costs = subprocess.run(
        [env_dir / "bin" / "auditor", "--db", str(db), "report", "costs", "--format", "json"],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        check=False,
    )
    assert costs.returncode == 0, costs.stderr
    assert json.loads(costs.stdout)["report"] == "costs"
    # The HTML export's templates ship in the wheel (package data, not only source files).
    pages = elsewhere / "html"
    exported = subprocess.run(
        [env_dir / "bin" / "auditor", "--db", str(db), "export", "html", "-o", str(pages)],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        check=False,
    )
    assert exported.returncode == 0, exported.stderr
    thread_page = next(pages.glob("thread-*.html")).read_text()
    assert "hi there" in thread_page and "--audit: #b4237a" in thread_page  # text and the CSS
