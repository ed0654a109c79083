"""Shared fixtures: an isolated home and database per test, and the real corpus."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # test helper modules
# pytest-xdist hands its workers the terminal's width as COLUMNS, which auditor's output honours:
# the tests read output as a pipe gets it, whether they run in one process or two.
os.environ.pop("COLUMNS", None)

ROOT = Path(__file__).resolve().parent.parent
# Resolved: the CLI names files by their real path, so a ../shared that is a link compares equal.
SHARED = Path(os.environ.get("AUDITOR_SHARED", ROOT.parent / "shared")).resolve()
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


STORES = ("sqlite", "postgresql")


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "both_stores: run the test once on SQLite and once on a real PostgreSQL server "
        "(started by the tests; required under CI, skipped with a reason where not installed)",
    )
    config.addinivalue_line(
        "markers", "sqlite_only: in a both_stores module, a test of SQLite's own behaviour"
    )


def pytest_runtest_setup(item):
    """Tests marked `xdist_group` share something one process must hold (a module's costly
    fixture, processes a test looks for by name): on two processes, pytest-xdist's loadgroup
    runs each group in one. It marks a grouped test by a suffix of its node id; a pytest that
    drops the suffix leaves the groups silently split, so such a test fails here instead."""
    if getattr(item.config.option, "loadgroup", False) and item.get_closest_marker("xdist_group"):
        if "@" not in item.nodeid:
            pytest.fail(
                f"pytest {pytest.__version__} with pytest-xdist ignores xdist_group: install "
                "the pytest version pyproject.toml's test extra names",
                pytrace=False,
            )


def pytest_generate_tests(metafunc):
    if metafunc.definition.get_closest_marker("both_stores"):
        only = metafunc.definition.get_closest_marker("sqlite_only")
        metafunc.parametrize("store_url", STORES[:1] if only else STORES, indirect=True)


def _unavailable(reason: str):
    if os.environ.get("CI"):
        pytest.fail(f"CI runs the PostgreSQL leg and {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def pg_server():
    """A PostgreSQL server for the whole session, in a temporary directory (tests/pg_server.py)."""
    from helpers import pg_server as pg

    found = pg.bindir()
    if found is None:
        _unavailable(
            "PostgreSQL's server programs (initdb, pg_ctl) are not installed "
            "(apt-get install postgresql, or set AUDITOR_PG_BIN)"
        )
    try:
        import psycopg  # noqa: F401
    except ImportError:
        _unavailable("the psycopg driver is not installed (pip install 'auditor[postgres]')")
    try:
        server = pg.Server(found)
    except Exception as exc:  # noqa: BLE001 - whatever stops the server, the PostgreSQL leg is skipped with it
        _unavailable(f"the PostgreSQL server could not start: {exc}")
    try:
        server.make_template()
    except BaseException:
        server.stop()
        raise
    yield server
    server.stop()


@pytest.fixture
def store_url(request, tmp_path):
    """The store every test's commands use (AUDITOR_DB): a SQLite file in tmp_path, or in tests
    marked `both_stores`, also a fresh database on the session's PostgreSQL server."""
    if getattr(request, "param", "sqlite") == "sqlite":
        yield str(tmp_path / "auditor.db")
        return
    server = request.getfixturevalue("pg_server")
    url = server.new_database()
    yield url
    server.drop_database(url)


@pytest.fixture(autouse=True)
def isolated(tmp_path, tmp_path_factory, monkeypatch, store_url):
    """Point HOME, the data directory and AUDITOR_DB at tmp_path so no test touches real files.

    Each test also runs in a directory of its own: a file a test or a command it starts names
    by a bare relative path (a PostgreSQL database's name taken for a SQLite file, as `t3` and
    `t4` once were) lands there, not in the checkout."""
    monkeypatch.chdir(tmp_path_factory.mktemp("cwd"))
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / ".local" / "share"))
    monkeypatch.setenv("AUDITOR_DB", store_url)
    monkeypatch.delenv("AUDITOR_DISABLE_PLUGINS", raising=False)
    monkeypatch.delenv("AUDITOR_STATE_DIR", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(home / ".local" / "state"))
    monkeypatch.setenv("AUDITOR_WORKER_IDLE", "5")  # a hook's worker does not outlive its test
    # The hook tests keep their transcripts in tmp_path, a place the agents' own folders are
    # not: allowed as a user would allow it (test_transcript_places tests without it).
    monkeypatch.setenv("AUDITOR_TRANSCRIPT_DIRS", str(tmp_path))
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


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory) -> Path:
    """A SQLite store migrated to head once a session: `engine` starts each test from a copy,
    as the PostgreSQL leg clones its template database, instead of running every migration
    again (a fifth of a second of CPU a test)."""
    from auditor.store.db import open_db

    path = tmp_path_factory.mktemp("template") / "auditor.db"
    open_db(str(path)).dispose()  # the last connection closed: the WAL is folded into the file
    return path


@pytest.fixture
def engine(store_url, request):
    from auditor.store.db import open_db

    if not store_url.startswith("postgresql") and not os.path.exists(store_url):
        shutil.copyfile(request.getfixturevalue("sqlite_template"), store_url)
    engine = open_db(store_url)
    yield engine
    engine.dispose()


@pytest.fixture
def plugins():
    from auditor.plugins import get_plugin_manager

    return get_plugin_manager()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    """Keep each phase's report on the test item (`item.report_call`), so that a fixture's
    teardown can tell the test failed (the browser tests then take a screenshot)."""
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report
