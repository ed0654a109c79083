"""The plugin-author kit: every hook documented and tested, and the example package installed for real.

- every hookspec has a docstring, a `test_hook_<name>` here that drives it through the real
  plugin manager, and its exact signature in docs/plugins.md;
- examples/auditor-cli-observer, installed into a fresh virtualenv, shows up in `auditor
  plugins` and `auditor observers`, answers `auditor run --observer cli`, goes away with
  AUDITOR_DISABLE_PLUGINS; a plugin that raises on import is reported and skipped.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import site
import subprocess
import sys
import textwrap
import venv
from pathlib import Path

import pytest
from helpers.audit import (
    FakeObserver,
    FakeObserverPlugin,
    ScriptFormat,
    ScriptPlugin,
    quiet,
    write_script_thread,
)
from helpers.source import copy_source
from helpers.third_party import THIRD_PARTY, third_party_plugin
from sqlalchemy import select

from auditor import hookspecs
from auditor.audit.checkpoint_plan import CheckpointPlanner
from auditor.audit.checkpoints import GateDecision
from auditor.audit.run import run
from auditor.audit.run_types import RunConfig
from auditor.hookspecs import hookimpl
from auditor.ingest.ingester import ingest
from auditor.plugins import get_plugin_manager
from auditor.store import schema as s
from auditor.store.signal_rows import Signal
from auditor.store.threads import StoredThread

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "plugins.md"
EXAMPLE = ROOT / "examples" / "auditor-cli-observer"


def hook_specs() -> dict[str, object]:
    """Return the hookspec functions of auditor.hookspecs by name."""
    marker = "auditor_spec"
    return {
        name: fn for name, fn in vars(hookspecs).items() if callable(fn) and hasattr(fn, marker)
    }


def signature_text(fn) -> str:
    sig = inspect.signature(fn)
    params = ", ".join(f"{p.name}: {p.annotation}" for p in sig.parameters.values())
    return f"def {fn.__name__}({params}) -> {sig.return_annotation}"


# -- the meta-tests --------------------------------------------------------------------------


def test_there_are_hooks_to_check():
    assert {
        "register_formats",
        "register_observers",
        "compute_signals",
        "gate_checkpoint",
        "format_checkpoint",
    } <= set(hook_specs())


@pytest.mark.parametrize("name", sorted(hook_specs()))
def test_every_hook_has_a_docstring_saying_when_it_is_called_and_what_it_returns(name):
    doc = inspect.getdoc(hook_specs()[name]) or ""
    assert len(doc) > 200, f"{name}: the hookspec docstring is missing or too short"
    assert "Called" in doc, f"{name}: the docstring does not say when the hook is called"
    assert re.search(r"\bReturn|\bCall `register", doc), (
        f"{name}: the docstring does not say what to return or do"
    )


@pytest.mark.parametrize("name", sorted(hook_specs()))
def test_every_hook_has_a_test_here(name):
    assert callable(globals().get(f"test_hook_{name}")), f"add test_hook_{name} to {__file__}"


@pytest.mark.parametrize("name", sorted(hook_specs()))
def test_every_hook_is_documented_with_its_full_signature(name):
    doc = DOC.read_text()
    section = re.search(rf"^### `{name}`\n(.*?)(?=^## |^### |\Z)", doc, re.MULTILINE | re.DOTALL)
    assert section, f"docs/plugins.md has no '### `{name}`' section"
    body = section.group(1)
    documented = re.search(rf"^def {name}\(.*$", body, re.MULTILINE)
    assert documented, f"docs/plugins.md: the {name} section shows no signature"
    assert documented.group(0).strip() == signature_text(hook_specs()[name])
    assert "**When:**" in body and "**Returns:**" in body
    spec = getattr(get_plugin_manager().pm.hook, name).spec
    assert ("firstresult" in body) == bool(spec.opts.get("firstresult")), (
        f"{name}: say whether the first result wins"
    )


def test_the_doc_walks_through_the_example_package():
    doc = DOC.read_text()
    assert "examples/auditor-cli-observer" in doc and "[project.entry-points.auditor]" in doc
    assert 'cli_observer = "auditor_cli_observer"' in (EXAMPLE / "pyproject.toml").read_text()


# -- one test per hook, through the real plugin manager -------------------------------------


@pytest.fixture
def script_file(tmp_path):
    f = tmp_path / "threads.jsonl"
    write_script_thread(f, "t-claims", "Done! all tests pass.")
    write_script_thread(f, "t-short", "Stopping here.", n_tools=2)
    return f


def test_hook_register_formats(engine, script_file):
    pm = get_plugin_manager(extra=[ScriptPlugin()])
    assert isinstance(pm.format("script"), ScriptFormat)
    summary = ingest(engine, pm, [script_file])
    assert summary.messages == 20 and summary.threads == 2


def test_hook_register_observers(engine, script_file):
    fake = FakeObserver()
    pm = get_plugin_manager(extra=[ScriptPlugin(), FakeObserverPlugin(fake)])
    assert pm.observer("fake") is fake
    ingest(engine, pm, [script_file])
    summary = run(engine, pm, RunConfig(observer="fake"), announce=quiet)
    assert fake.calls == 1 and summary.corrections == 1


def test_hook_compute_signals(engine, script_file):
    class Mine:
        @hookimpl
        def compute_signals(self, checkpoint, thread, messages, config):
            if config.get("mine", {}).get("on"):
                return [Signal("mine", 0.4, [(checkpoint.message_id, "seen")])]
            return None

    pm = get_plugin_manager(extra=[ScriptPlugin(), FakeObserverPlugin(FakeObserver()), Mine()])
    ingest(engine, pm, [script_file])
    run(
        engine,
        pm,
        RunConfig(observer="fake", signals={"mine": {"on": True}}),
        announce=quiet,
    )
    with engine.connect() as conn:
        names = conn.execute(select(s.Signal.name).where(s.Signal.name == "mine")).scalars().all()
    assert names == ["mine", "mine"]


def test_hook_gate_checkpoint(engine, script_file):
    class Gate:
        @hookimpl
        def gate_checkpoint(self, checkpoint, thread, signals):  # a subset of the arguments
            return GateDecision(False, "my-gate") if thread.native_id == "t-claims" else None

    pm = get_plugin_manager(extra=[ScriptPlugin(), FakeObserverPlugin(FakeObserver()), Gate()])
    ingest(engine, pm, [script_file])
    summary = run(engine, pm, RunConfig(observer="fake", dry_run=True), announce=quiet)
    assert summary.gated_out == {
        "my-gate": 1,
        "too-few-tool-calls": 1,
    }  # None: the built-in gate decided


def test_a_gate_decisions_are_counted_by_their_code_and_recorded_with_their_reason(
    engine, script_file
):
    class Gate:
        @hookimpl
        def gate_checkpoint(self, checkpoint):
            reason = f"costly ({checkpoint.tool_calls} tool calls)"
            return GateDecision(False, reason, "costly")

    pm = get_plugin_manager(extra=[ScriptPlugin(), FakeObserverPlugin(FakeObserver()), Gate()])
    ingest(engine, pm, [script_file])
    summary = run(engine, pm, RunConfig(observer="fake"), announce=quiet)
    assert summary.gated_out == {"costly": 2}
    with engine.connect() as conn:
        reasons = conn.execute(select(s.Checkpoint.gate_reason)).scalars().all()
    assert sorted(reasons) == ["costly (2 tool calls)", "costly (6 tool calls)"]


def test_hook_format_checkpoint(engine, script_file):
    fake = FakeObserver(trigger="CUSTOM")

    class Formatter:
        @hookimpl
        def format_checkpoint(self, checkpoint, thread, messages, config):
            return f"CUSTOM rendering of {len(messages)} messages"

    pm = get_plugin_manager(extra=[ScriptPlugin(), FakeObserverPlugin(fake), Formatter()])
    ingest(engine, pm, [script_file])
    thread = StoredThread(1, "script", "t-claims")
    assert CheckpointPlanner(pm).render(None, thread, [1, 2]) == "CUSTOM rendering of 2 messages"
    summary = run(engine, pm, RunConfig(observer="fake"), announce=quiet)
    assert summary.corrections == 1


def test_hook_register_injectors(engine, script_file):
    from auditor.live.delivery import DELIVERED, inject_pending

    delivered = []

    class Memo:
        name, description, live = "memo", "keeps corrections in a list", False

        def deliver(self, correction, options):
            delivered.append(correction.message)
            return "the memo list"

    class Plugin:
        @hookimpl
        def register_injectors(self, register):
            register(Memo())

    pm = get_plugin_manager(extra=[ScriptPlugin(), FakeObserverPlugin(FakeObserver()), Plugin()])
    ingest(engine, pm, [script_file])
    run(engine, pm, RunConfig(observer="fake"), announce=quiet)
    (delivery,) = inject_pending(engine, pm.injector("memo"), {})
    assert delivery.status == DELIVERED and delivered == ["the tests failed, look again"]


# -- the example package, installed into a fresh virtualenv ---------------------------------

FAKE_TOOL = """\
import json, sys
prompt = sys.stdin.read()
needs = "audit-me" in prompt
print("Verdict follows.")
print(json.dumps({"needsCorrection": needs, "message": "look again" if needs else None}))
"""

BROKEN = {
    "pyproject.toml": """\
        [build-system]
        requires = ["setuptools>=68"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "auditor-broken-example"
        version = "0.0.1"

        [project.entry-points.auditor]
        broken_example = "auditor_broken_example"
        """,
    "auditor_broken_example/__init__.py": """\
        raise RuntimeError("this plugin is broken on purpose")
        """,
}


class Venv:
    def __init__(self, root: Path):
        self.root = root
        self.bin = root / "venv" / "bin"
        self.home = root / "home"
        self.home.mkdir()

    def env(self, **extra: str) -> dict[str, str]:
        # Nothing of the outer run: its settings, or a path to other installed plugins.
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("AUDITOR_") and k != "PYTHONPATH"
        }
        env.update(
            HOME=str(self.home),
            XDG_DATA_HOME=str(self.home / "data"),
            XDG_CONFIG_HOME=str(self.home / "config"),
            AUDITOR_DB=str(self.root / "store.db"),
            PATH=f"{self.bin}{os.pathsep}{env.get('PATH', '')}",
        )
        env.update(extra)
        return env

    def pip_install(self, *paths: Path) -> None:
        out = subprocess.run(
            [self.bin / "python", "-m", "pip", "install", "-q", "--no-deps", *map(str, paths)],
            check=False,
            cwd=self.root,
            capture_output=True,
            text=True,
            env=self.env(),
        )
        assert out.returncode == 0, out.stderr[-2000:]

    def auditor(self, *args: str, **env: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [self.bin / "auditor", *args],
            check=False,
            cwd=self.root,
            capture_output=True,
            text=True,
            env=self.env(**env),
            timeout=300,
        )


# The tests of the installed example share one virtualenv (`kit`, built once per process that
# runs them): one xdist group, so that it is built once, not once in each test process.
uses_kit = pytest.mark.xdist_group("plugin-kit")


@pytest.fixture(scope="module")
def kit(tmp_path_factory) -> Venv:
    root = tmp_path_factory.mktemp("kit")
    v = Venv(root)
    venv.EnvBuilder(system_site_packages=True, with_pip=True).create(root / "venv")
    if sys.prefix != sys.base_prefix:
        # Run from a virtualenv (CI): its packages are auditor's dependencies; `system site
        # packages` would be the base interpreter's only.
        purelib = subprocess.run(
            [v.bin / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        Path(purelib, "_auditor_parent.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    v.pip_install(
        copy_source(ROOT, root / "src" / "auditor"),
        copy_source(EXAMPLE, root / "src" / "example"),
    )
    (root / "fake_llm.py").write_text(FAKE_TOOL)
    v.command = f"{sys.executable} {root / 'fake_llm.py'}"
    return v


def _where(v: Venv, module: str) -> str:
    return subprocess.run(
        [v.bin / "python", "-c", f"import {module}; print({module}.__file__)"],
        capture_output=True,
        text=True,
        env=v.env(),
        cwd=v.root,
        check=True,
    ).stdout


@pytest.mark.slow
@uses_kit
def test_the_installed_example_is_listed_by_plugins_and_observers(kit):
    assert str(ROOT) not in _where(kit, "auditor") and str(EXAMPLE) not in _where(
        kit, "auditor_cli_observer"
    )
    plugins = kit.auditor("plugins", "--json")
    assert plugins.returncode == 0, plugins.stderr
    info = {p["name"]: p for p in json.loads(plugins.stdout)["plugins"]}
    assert info["cli_observer"]["dist"] == "auditor-cli-observer" and info["cli_observer"][
        "hooks"
    ] == ["register_observers"]
    observers = {
        o["name"]: o
        for o in json.loads(
            kit.auditor("observers", "--json", AUDITOR_CLI_COMMAND=kit.command).stdout
        )
    }
    assert observers["cli"]["ready"] is True
    unset = {o["name"]: o for o in json.loads(kit.auditor("observers", "--json").stdout)}
    assert "set AUDITOR_CLI_COMMAND" in unset["cli"]["problem"]


@pytest.mark.slow
@uses_kit
def test_the_installed_example_observes_an_audit_run(kit):
    samples = ROOT / "data" / "samples"
    assert kit.auditor("ingest", "-q", str(samples)).returncode == 0
    out = kit.auditor(
        "run",
        "--observer",
        "cli",
        "--model",
        "fake-llm",
        "--min-tool-calls",
        "0",
        "--no-require-edit",
        "--json",
        AUDITOR_CLI_COMMAND=kit.command,
    )
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert summary["observer"] == "cli" and summary["model"] == "fake-llm"
    assert summary["audited"] >= 1 and summary["invalid"] == 0 and summary["errors"] == 0
    events = json.loads(kit.auditor("events", "--json", "--type", "audited").stdout)
    assert len(events) == summary["audited"] and {e["data"]["observer"] for e in events} == {"cli"}


@pytest.mark.slow
@uses_kit
def test_disabling_the_example_removes_it(kit):
    plugins = json.loads(
        kit.auditor("plugins", "--json", AUDITOR_DISABLE_PLUGINS="cli_observer").stdout
    )
    assert "cli_observer" not in {p["name"] for p in plugins["plugins"]}
    observers = json.loads(
        kit.auditor("observers", "--json", AUDITOR_DISABLE_PLUGINS="cli_observer").stdout
    )
    assert "cli" not in {o["name"] for o in observers}
    out = kit.auditor(
        "run", "--observer", "cli", "--dry-run", AUDITOR_DISABLE_PLUGINS="cli_observer"
    )
    assert out.returncode == 2 and "'cli' is not a known observer. Available:" in out.stderr


@pytest.mark.slow
@uses_kit
def test_a_plugin_that_raises_on_import_is_reported_and_skipped(kit):
    broken = kit.root / "src" / "broken"
    for rel, body in BROKEN.items():
        (broken / rel).parent.mkdir(parents=True, exist_ok=True)
        (broken / rel).write_text(textwrap.dedent(body))
    kit.pip_install(broken)
    out = kit.auditor("plugins", "--json")
    assert out.returncode == 0
    report = json.loads(out.stdout)
    assert report["failed"] == [
        {"name": "broken_example", "error": "RuntimeError: this plugin is broken on purpose"}
    ]
    assert "cli_observer" in {p["name"] for p in report["plugins"]}
    assert (
        "plugin 'broken_example'" in out.stderr
        and "AUDITOR_DISABLE_PLUGINS=broken_example" in out.stderr
    )
    observers = kit.auditor("observers", "--json", AUDITOR_CLI_COMMAND=kit.command)
    assert observers.returncode == 0 and "cli" in {o["name"] for o in json.loads(observers.stdout)}
    silenced = kit.auditor("plugins", "--json", AUDITOR_DISABLE_PLUGINS="broken_example")
    assert json.loads(silenced.stdout)["failed"] == [] and "broken_example" not in silenced.stderr


@pytest.mark.slow
@uses_kit
def test_the_example_packages_own_tests_pass(kit):
    out = subprocess.run(
        [
            kit.bin / "python",
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            str(EXAMPLE / "tests"),
        ],
        check=False,
        cwd=kit.root,
        capture_output=True,
        text=True,
        env=kit.env(),
        timeout=300,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]


# -- auditor's own tests with a third-party plugin installed ----------------------------------

# The tests of the plugin machinery and of the commands that list, choose and call plugins.
PLUGIN_TESTS = [
    "test_plugins.py",
    "test_plugin_kit.py",
    "test_cli.py",
    "test_run.py",
    "test_inject.py",
]


@pytest.mark.slow
def test_auditors_plugin_tests_pass_with_a_third_party_plugin_installed(tmp_path):
    if os.environ.get(THIRD_PARTY):
        pytest.skip("this run already has the third-party plugin installed")
    where = tmp_path / "site"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(third_party_plugin(where))}
    listed = subprocess.run(
        [sys.executable, "-m", "auditor", "plugins", "--json"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    dists = {p["name"]: p["dist"] for p in json.loads(listed.stdout)["plugins"]}
    assert dists["cli_observer"] == "auditor-cli-observer"  # installed, through its entry point
    out = subprocess.run(
        # On SQLite only: the plugin meets the same code on either store, and the PostgreSQL
        # leg would start a second server for this nested run.
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow"]
        + ["-k", "not postgresql"]
        + [str(ROOT / "tests" / name) for name in PLUGIN_TESTS],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, THIRD_PARTY: str(where)},
        timeout=1200,
        check=False,
    )
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert " passed" in out.stdout.splitlines()[-1]


# -- the walk-through of docs/plugins.md, run as written -------------------------------------


def walkthrough_files() -> dict[str, str]:
    """Return the files the walk-through's Python blocks make: each block goes at the end of
    the file its first line names (`# my_auditor_plugin.py`)."""
    doc = DOC.read_text()
    section = re.search(r"^## Walk-through: .*?(?=^## )", doc, re.MULTILINE | re.DOTALL)
    assert section, "docs/plugins.md has no '## Walk-through: ...' section"
    files: dict[str, str] = {}
    for block in re.findall(r"^```python\n(.*?)^```", section.group(0), re.MULTILINE | re.DOTALL):
        first, _, body = block.partition("\n")
        name = re.fullmatch(r"# (\w+\.py)", first)
        assert name, f"a walk-through block does not start with '# FILE.py': {first!r}"
        files[name.group(1)] = files.get(name.group(1), "") + body + "\n\n"
    return files


def test_the_walkthrough_uses_only_the_public_api():
    files = walkthrough_files()
    assert set(files) == {"my_auditor_plugin.py", "try_it.py"}
    for name, text in files.items():
        modules = {
            m.group(1) for m in re.finditer(r"^(?:from|import) (auditor\S*)", text, re.MULTILINE)
        }
        assert modules == {"auditor.api"}, name


def test_the_walkthrough_runs_as_written(tmp_path):
    for name, text in walkthrough_files().items():
        (tmp_path / name).write_text(text)
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "AUDITOR_DB": str(tmp_path / "unused.db")}
    out = subprocess.run(
        [sys.executable, "try_it.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert out.stdout.splitlines()[-1].startswith("user-wrote-again")
    delivered = [
        json.loads(line) for line in (tmp_path / "corrections.jsonl").read_text().splitlines()
    ]
    assert [(c["observer"], c["message"]) for c in delivered] == [
        ("failed-tests", "The tests still fail: fix them before you stop.")
    ]
