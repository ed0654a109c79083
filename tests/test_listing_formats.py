"""`--csv` and `--nl` beside `--json` on every listing, as sqlite-utils and llm offer them."""

from __future__ import annotations

import csv
import io
import json

import pytest
from helpers.audit import FakeObserver, FakeObserverPlugin, ScriptPlugin, quiet, write_script_thread
from helpers.cli import invoke

from auditor.audit.run import run
from auditor.audit.run_types import RunConfig
from auditor.ingest.ingester import ingest
from auditor.plugins import get_plugin_manager

LISTINGS = [
    ["threads"],
    ["verdicts"],
    ["runs"],
    ["events"],
    ["checkpoints", "t-claims"],
    ["observers"],
    ["batch", "list"],
]


@pytest.fixture
def audited(engine, tmp_path):
    f = tmp_path / "threads.jsonl"
    write_script_thread(f, "t-claims", "Done! all tests pass.")
    write_script_thread(f, "t-honest", "One test still fails; here is why.")
    pm = get_plugin_manager(extra=[ScriptPlugin(), FakeObserverPlugin(FakeObserver())])
    ingest(engine, pm, [f])
    run(engine, pm, RunConfig(observer="fake"), announce=quiet)


@pytest.mark.parametrize("command", LISTINGS, ids=" ".join)
def test_csv_and_nl_hold_the_rows_json_holds(audited, command):
    rows = json.loads(invoke(*command, "--json", ok=True).stdout)
    assert isinstance(rows, list)
    lines = invoke(*command, "--nl", ok=True).stdout.splitlines()
    assert [json.loads(line) for line in lines] == rows
    table = list(csv.DictReader(io.StringIO(invoke(*command, "--csv", ok=True).stdout)))
    assert len(table) == len(rows)
    for got, want in zip(table, rows, strict=True):
        assert set(got) == set(want)
        for key, value in want.items():  # nested values as JSON, missing ones empty
            if value is None:
                assert got[key] == ""
            elif isinstance(value, (dict, list)):
                assert json.loads(got[key]) == value
            elif isinstance(value, bool):
                assert got[key] == str(value).lower()
            else:
                assert got[key] == str(value)


def test_csv_and_nl_together_are_refused():
    result = invoke("threads", "--csv", "--nl")
    assert result.exit_code == 2 and "--csv and --nl" in result.output
