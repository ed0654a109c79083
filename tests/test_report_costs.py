"""`auditor report costs`: agents' own usage and auditing cost, checked against independent counts."""

from __future__ import annotations

import csv
import functools
import io
import json
from collections import defaultdict
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from click.testing import CliRunner
from helpers.cli import invoke as invoke_cli
from helpers.reports import (
    COUNTS_ONLY,
    ObserversPlugin,
    TwoFaced,
    UsagePlugin,
    price_file,
    write_thread,
)
from sqlalchemy import select, text

from auditor.audit.run import run
from auditor.audit.run_types import RunConfig
from auditor.cli.main import cli
from auditor.ingest.ingester import ingest
from auditor.plugins import get_plugin_manager
from auditor.reports import cost_report
from auditor.store import schema as s

pytestmark = pytest.mark.both_stores

TOKEN_COLS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
RATES = {  # USD per million tokens
    "agent-model": {"input": 3, "output": 15, "cache_read": 0.3, "cache_write": 3.75},
    "fake-1": {"input": 1, "output": 2, "cache_read": 0.1},
}


invoke = functools.partial(invoke_cli, ok=True)  # these commands must succeed


def report_json(*args: str) -> dict:
    return json.loads(invoke("report", "costs", *args, "--format", "json").stdout)


def report_csv(*args: str) -> list[dict]:
    return list(
        csv.DictReader(io.StringIO(invoke("report", "costs", *args, "--format", "csv").stdout))
    )


# -- the real corpus, counted the way ccusage-style tools count it ----------------------------


def ccusage_entries(root) -> dict[str, tuple[str, str, dict]]:
    """Billing entries of Claude Code logs: assistant lines grouped by message.id, last usage
    wins, `<synthetic>` skipped. Returns id -> (UTC day, model, usage)."""
    last: dict[str, tuple[str, str, dict]] = {}
    for path in sorted(root.rglob("*.jsonl")):
        for raw in path.read_bytes().splitlines():
            try:
                obj = json.loads(raw)
            except ValueError:
                continue
            if not isinstance(obj, dict) or obj.get("type") != "assistant":
                continue
            msg = obj.get("message")
            if (
                not isinstance(msg, dict)
                or msg.get("model") == "<synthetic>"
                or not isinstance(msg.get("usage"), dict)
            ):
                continue
            when = datetime.fromisoformat(obj["timestamp"]).astimezone(UTC)
            last[msg.get("id") or obj.get("requestId") or obj["uuid"]] = (
                when.date().isoformat(),
                msg["model"],
                msg["usage"],
            )
    return last


def _tokens(u: dict) -> tuple[int, int, int, int]:
    return (
        u.get("input_tokens") or 0,
        u.get("output_tokens") or 0,
        u.get("cache_read_input_tokens") or 0,
        u.get("cache_creation_input_tokens") or 0,
    )


@pytest.fixture
def claude_store(corpus, engine, plugins):
    ingest(engine, plugins, [corpus / "claude-code"])
    return corpus / "claude-code"


@pytest.mark.corpus
def test_daily_tokens_equal_a_ccusage_style_count_of_the_jsonl(claude_store):
    expected: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for day, _model, usage in ccusage_entries(claude_store).values():
        expected[day] = [a + b for a, b in zip(expected[day], _tokens(usage))]
    assert (
        len(expected) > 20
    )  # many sessions over many days, subagents and forked side agents included

    out = report_json("--by", "day")
    got = {r["day"]: [r[c] for c in TOKEN_COLS] for r in out["rows"]}
    assert got == dict(expected)
    assert [out["total"][c] for c in TOKEN_COLS] == [
        sum(v[i] for v in expected.values()) for i in range(4)
    ]
    assert out["total"]["agent_calls"] == len(ccusage_entries(claude_store))

    rows = report_csv("--by", "day")  # the CSV says the same
    assert {r["day"]: [int(r[c]) for c in TOKEN_COLS] for r in rows} == dict(expected)


@pytest.mark.corpus
def test_usd_per_model_equals_pricing_every_call_on_its_own(claude_store):
    from auditor.model import Usage
    from auditor.pricing.model_prices import agent_cost

    expected: dict[str, Decimal] = defaultdict(Decimal)
    unknown: set[str] = set()
    for _day, model, usage in ccusage_entries(claude_store).values():
        c = agent_cost(model, Usage("t", "k", model, *_tokens(usage)))
        if c.usd is None:
            unknown.add(model)
        else:
            expected[model] += c.usd
    out = report_json("--by", "model")
    got = {r["model"]: r["agent_usd"] for r in out["rows"] if r["agent_usd"] is not None}
    assert got.keys() == expected.keys()
    for model, usd in expected.items():
        assert got[model] == pytest.approx(float(usd), rel=1e-9), model
    assert {u["model"] for u in out["unknown_models"]} == unknown


def test_long_prompts_are_priced_at_their_tier_call_by_call(engine, tmp_path, monkeypatch):
    """Sums of calls must not be priced as one big call: the >200k rate applies per call."""
    price_file(
        tmp_path,
        monkeypatch,
        {
            "tiered": {
                "input": 1,
                "output": 10,
                "input_above_200k": 2,
                "output_above_200k": 20,
                "cache_read": 0.1,
            }
        },
    )
    pm = get_plugin_manager(extra=[UsagePlugin()])
    f = tmp_path / "t.jsonl"
    write_thread(
        f, "small", "done", model="tiered", tokens=(150_000, 1000, 0, 0), n_tools=5
    )  # 6 calls, each below
    write_thread(
        f, "big", "done", model="tiered", tokens=(1000, 1000, 250_000, 0), n_tools=1
    )  # 2 calls above
    ingest(engine, pm, [f])
    rows = {r["thread_native_id"]: r for r in cost_report(engine, ["thread"]).rows}
    small = 6 * (150_000 * 1 + 1000 * 10) / 1e6
    big = (
        2 * (1000 * 2 + 250_000 * 0.1 + 1000 * 20) / 1e6
    )  # above the threshold, cache reads keep their rate
    assert rows["small"]["agent_usd"] == pytest.approx(small)
    assert rows["big"]["agent_usd"] == pytest.approx(big)


# -- a store with known usage and a fake observer -----------------------------------------


@pytest.fixture
def audited(engine, tmp_path, monkeypatch):
    """Three threads over two days and two projects, audited by a fake observer with known prices."""
    price_file(tmp_path, monkeypatch, RATES)
    observer = TwoFaced("fake", mark="all tests pass")
    pm = get_plugin_manager(extra=[UsagePlugin(), ObserversPlugin(observer)])
    f = tmp_path / "threads.jsonl"
    lines = write_thread(f, "t-claims", "Done! all tests pass.", day="2026-03-02")
    lines += write_thread(
        f, "t-honest", "One test still fails.", day="2026-03-02", cwd="/work/other"
    )
    lines += write_thread(
        f, "t-later", "Done.", day="2026-03-09", n_tools=6, tokens=(10, 20, 30, 40)
    )
    lines += write_thread(
        f, "t-mystery", "Done.", day="2026-03-09", n_tools=1, model="mystery-model-9"
    )
    ingest(engine, pm, [f])
    summary = run(
        engine, pm, RunConfig(observer="fake", gate=COUNTS_ONLY), announce=lambda line: None
    )
    assert summary.audited == 3
    return lines


def agent_usd(lines: list[dict], keep=lambda line: True) -> float:
    total = 0.0
    for line in lines:
        if line.get("tokens") and keep(line) and line["model"] in RATES:
            r = RATES[line["model"]]
            i, o, cr, cw = line["tokens"]
            total += (
                i * r["input"] + o * r["output"] + cr * r["cache_read"] + cw * r["cache_write"]
            ) / 1e6
    return total


def test_agent_and_audit_cost_by_day_with_overhead(audited, engine):
    with engine.connect() as conn:
        verdicts = conn.execute(select(s.Verdict.__table__)).all()
    audit_usd = sum(v.cost_usd for v in verdicts)
    # the observer's price: 1000 input of which 200 cached, 40 output + 10 thinking
    assert verdicts[0].cost_usd == pytest.approx((800 * 1 + 200 * 0.1 + 50 * 2) / 1e6)
    audit_day = verdicts[0].created_at.date().isoformat()

    out = report_json("--by", "day")
    rows = {r["day"]: r for r in out["rows"]}
    assert set(rows) == {"2026-03-02", "2026-03-09", audit_day}
    assert rows["2026-03-02"]["agent_usd"] == pytest.approx(
        agent_usd(audited, lambda x: x["ts"].startswith("2026-03-02"))
    )
    assert rows["2026-03-09"]["agent_usd"] == pytest.approx(
        agent_usd(audited, lambda x: x["ts"].startswith("2026-03-09"))
    )
    assert rows["2026-03-09"]["agent_unpriced_models"] == ["mystery-model-9"]
    assert rows[audit_day]["audit_calls"] == 3 and rows[audit_day]["audit_usd"] == pytest.approx(
        audit_usd
    )
    assert rows[audit_day]["audit_credits"] == pytest.approx(
        audit_usd
    )  # 1 credit per dollar by default
    assert rows[audit_day]["overhead"] is None  # nothing of the agents on the day of the audit
    total = out["total"]
    assert total["agent_usd"] == pytest.approx(agent_usd(audited))
    assert total["audit_usd"] == pytest.approx(audit_usd)
    assert total["overhead"] == pytest.approx(audit_usd / agent_usd(audited))
    assert total["audit_input_tokens"] == 3000 and total["audit_cached_tokens"] == 600
    assert total["audit_output_tokens"] == 120 and total["audit_thinking_tokens"] == 30


def test_unknown_models_are_listed_never_priced_at_zero(audited):
    result = invoke("report", "costs", "--by", "model", "--format", "json")
    out = json.loads(result.stdout)
    mystery = next(r for r in out["rows"] if r["model"] == "mystery-model-9")
    assert mystery["agent_usd"] is None and mystery["agent_unpriced_models"] == ["mystery-model-9"]
    assert (
        mystery["input_tokens"] == 2 * 100 and mystery["agent_calls"] == 2
    )  # one tool call, one answer
    assert out["unknown_models"] == [
        {
            "model": "mystery-model-9",
            "calls": 2,
            "input_tokens": 200,
            "output_tokens": 100,
            "cache_read_tokens": 2000,
            "cache_write_tokens": 400,
        }
    ]
    assert out["total"]["agent_unpriced_models"] == ["mystery-model-9"]
    table = invoke("report", "costs", "--by", "model")
    assert (
        "note: not in the price table, so left out of agent_usd (not priced at 0): mystery-model-9 (2 calls)"
        in table.stderr
    )
    assert "+?" in table.stdout


def test_overhead_per_thread_and_project(audited, engine):
    with engine.connect() as conn:
        by_thread = dict(
            conn.execute(
                select(s.Thread.native_id, s.Verdict.cost_usd).join(
                    s.Verdict, s.Verdict.thread_id == s.Thread.id
                )
            ).all()
        )
    rows = {r["thread_native_id"]: r for r in report_json("--by", "thread")["rows"]}
    for name in ("t-claims", "t-honest", "t-later"):
        agent = agent_usd(audited, lambda x, n=name: x["thread"] == n)
        assert rows[name]["agent_usd"] == pytest.approx(agent)
        assert rows[name]["overhead"] == pytest.approx(by_thread[name] / agent)
    assert rows["t-mystery"]["audit_calls"] == 0  # gated out: too few tool calls

    projects = {r["project"]: r for r in report_csv("--by", "project")}
    other = projects["/work/other"]
    assert float(other["agent_usd"]) == pytest.approx(
        agent_usd(audited, lambda x: x["cwd"] == "/work/other")
    )
    assert float(other["overhead"]) == pytest.approx(
        by_thread["t-honest"] / float(other["agent_usd"])
    )
    assert projects["/work/demo"]["agent_unpriced_models"] == "mystery-model-9"


def test_several_dimensions_and_audit_only_ones(audited):
    rows = report_json("--by", "week,agent", "--by", "observer")["rows"]
    assert {(r["week"], r["agent"], r["observer"]) for r in rows} >= {
        ("2026-03-02", "script", None),  # a Monday: the week of 2 March
        ("2026-03-09", "script", None),
    }
    audit = [r for r in rows if r["observer"] == "fake"]
    assert len(audit) == 1 and audit[0]["audit_calls"] == 3 and audit[0]["agent_calls"] == 0
    months = report_json("--by", "month")["rows"]
    assert any(r["month"] == "2026-03" and r["agent_calls"] == 3 * 7 + 2 for r in months)
    runs = report_json("--by", "run")["rows"]
    assert [r["audit_calls"] for r in runs if r["run"] is not None] == [3]


def test_since_and_until_select_days(audited):
    only = report_json("--by", "day", "--since", "2026-03-03", "--until", "2026-03-09")
    assert [r["day"] for r in only["rows"]] == ["2026-03-09"]
    assert only["total"]["audit_calls"] == 0
    before = report_json("--by", "day", "--until", "2026-03-02")
    assert [r["day"] for r in before["rows"]] == [
        "2026-03-02"
    ]  # a bare --until date includes that day
    assert before["total"]["agent_calls"] == 2 * 7


def test_a_forked_subagent_does_not_bill_its_parent_calls_twice(engine, tmp_path, monkeypatch):
    price_file(tmp_path, monkeypatch, RATES)
    pm = get_plugin_manager(extra=[UsagePlugin()])
    f = tmp_path / "t.jsonl"
    parent = write_thread(f, "main", "done", n_tools=2)
    # the side agent logs the parent's first call again (same billing key), then one of its own
    with open(f, "a") as fh:
        fh.writelines(
            json.dumps({**line, "thread": "side", "parent": "main"}) + "\n"
            for line in (parent[1], {**parent[-1], "id": "side-own", "key": "side-own"})
        )
    ingest(engine, pm, [f])
    rows = {r["thread_native_id"]: r for r in report_json("--by", "thread")["rows"]}
    assert rows["main"]["agent_calls"] == 3 and rows["side"]["agent_calls"] == 1
    assert report_json()["total"]["agent_calls"] == 4


def test_a_dimension_that_does_not_exist_is_named():
    result = CliRunner().invoke(cli, ["report", "costs", "--by", "weekday"])
    assert result.exit_code == 2
    assert result.output == (
        "Error: 'weekday' is not a dimension of this report. Available: day, week, "
        "month, model, observer, run, thread, project, agent, source\n"
    )


def test_empty_store_prints_zero_totals():
    out = report_json()
    assert (
        out["rows"] == [] and out["total"]["agent_calls"] == 0 and out["total"]["overhead"] is None
    )


# -- the rollup the reports read ---------------------------------------------------------------


@pytest.mark.corpus
def test_the_rollup_gives_what_the_usage_rows_give(claude_store, engine):
    # A window that starts one second after midnight can use neither the per-thread rollup nor
    # the day sums: the report then reads the usage rows themselves.
    after_midnight = datetime(2000, 1, 1, 0, 0, 1, tzinfo=UTC)
    for by in (["day"], ["model"], ["project", "day"], ["thread"]):
        rolled = cost_report(engine, by).rows
        direct = [r for r in cost_report(engine, by, after_midnight).rows if r["agent_calls"]]
        assert rolled == direct and sum(r["agent_calls"] for r in rolled) > 1000


def test_the_rollup_follows_a_file_that_grew(engine, tmp_path, monkeypatch):
    price_file(tmp_path, monkeypatch, RATES)
    pm = get_plugin_manager(extra=[UsagePlugin()])
    log = tmp_path / "usage.jsonl"
    write_thread(log, "first", "Done.", n_tools=2, day="2026-03-01", tokens=(100, 10, 0, 0))
    ingest(engine, pm, [log])
    before = report_json("--by", "day")["rows"]
    write_thread(log, "second", "Done.", n_tools=3, day="2026-03-02", tokens=(200, 20, 0, 0))
    assert ingest(engine, pm, [log]).grown == 1
    after = report_json("--by", "day")["rows"]
    # Every assistant message is a call: n tool rounds and the final claim.
    assert [(r["day"], r["input_tokens"]) for r in before] == [("2026-03-01", 3 * 100)]
    assert [(r["day"], r["input_tokens"]) for r in after] == [
        ("2026-03-01", 300),
        ("2026-03-02", 4 * 200),
    ]


# -- the day sums (usage_daily, verdict_daily) the reports without a thread dimension read --------


def same_as_the_rows(engine, by: list[str]) -> list[dict]:
    """The report from the day sums; asserted equal to the one from the rows themselves (a
    window starting one second after midnight cannot use the day sums)."""
    summed = cost_report(engine, by)
    direct = cost_report(engine, by, since=datetime(2000, 1, 1, 0, 0, 1, tzinfo=UTC))

    def rounded(report) -> list[dict]:
        return [
            {k: round(v, 12) if isinstance(v, float) else v for k, v in row.items()}
            for row in report.rows + [report.total]
        ]

    assert rounded(summed) == rounded(direct)
    assert summed.extra == direct.extra
    return summed.rows


DAY_DIMS = (["day"], ["model"], ["observer"], ["run"], ["week", "model"], ["month", "run"])


def test_the_day_sums_give_what_the_rows_give(audited, engine):
    for by in DAY_DIMS:
        assert same_as_the_rows(engine, by)


@pytest.mark.sqlite_only  # the day sums are kept by SQLite triggers; PostgreSQL reads the rows
def test_the_day_sums_follow_deleted_threads_and_changed_verdicts(audited, engine):
    same_as_the_rows(engine, ["day"])  # the rollup and the day sums are built
    with engine.begin() as conn:
        # A thread deleted (its usage rollup and verdicts go with it), a verdict recorded
        # without a price (priced now from the override file), one moved to another day.
        conn.execute(text("DELETE FROM threads WHERE native_id = 't-honest'"))
        first, second = conn.execute(text("SELECT id FROM verdicts ORDER BY id")).scalars()
        conn.execute(
            text("UPDATE verdicts SET cost_usd = NULL, credits = NULL WHERE id = :i"), {"i": first}
        )
        conn.execute(
            text("UPDATE verdicts SET created_at = '2026-03-09 12:00:00.000000' WHERE id = :i"),
            {"i": second},
        )
    for by in DAY_DIMS:
        same_as_the_rows(engine, by)
    rows = {r["day"]: r for r in same_as_the_rows(engine, ["day"])}
    assert rows["2026-03-02"]["agent_calls"] == 7  # t-claims only
    assert rows["2026-03-09"]["audit_calls"] == 1
    assert sum(r["audit_calls"] for r in rows.values()) == 2
    with engine.connect() as conn:
        assert conn.execute(text("SELECT sum(calls) FROM verdict_daily")).scalar() == 2


def test_calls_that_name_no_model_are_said_so_not_called_a_model(engine, tmp_path, monkeypatch):
    price_file(tmp_path, monkeypatch, RATES)
    pm = get_plugin_manager(extra=[UsagePlugin()])
    f = tmp_path / "threads.jsonl"
    write_thread(f, "t-named", "Done.", n_tools=2)
    write_thread(f, "t-anonymous", "Done.", n_tools=3, model=None)
    ingest(engine, pm, [f])
    table = invoke("report", "costs", "--by", "model")
    # three tool rounds and the final answer, each billed
    assert "4 agent calls name no model in their transcript, so they have no price" in table.stderr
    assert "not in the price table" not in table.stderr
    out = json.loads(invoke("report", "costs", "--by", "model", "--format", "json").stdout)
    assert [u["calls"] for u in out["unknown_models"]] == [4]


def test_who_spent_what_by_the_machine_the_threads_came_from(audited, engine, tmp_path):
    pm = get_plugin_manager(extra=[UsagePlugin()])
    f = tmp_path / "laptop2.jsonl"
    theirs = write_thread(f, "t-laptop2", "Done.", day="2026-03-09", tokens=(5, 6, 7, 8))
    ingest(engine, pm, [f], source="laptop2")
    here = ingest(engine, pm, [tmp_path / "threads.jsonl"], source="laptop2")
    assert here.skipped == 0 and here.messages == 0  # another machine's copy adds nothing
    rows = {r["source"]: r for r in report_json("--by", "source")["rows"]}
    assert rows["laptop2"]["agent_usd"] == pytest.approx(agent_usd(theirs))
    first = next(name for name in rows if name != "laptop2")  # this machine's name
    assert rows[first]["agent_usd"] == pytest.approx(agent_usd(audited))
    assert rows[first]["audit_calls"] == 3 and rows["laptop2"]["audit_calls"] == 0
    by_day = report_json("--by", "source,day", "--since", "2026-03-09", "--until", "2026-03-10")
    assert {(r["source"], r["day"]) for r in by_day["rows"]} == {
        (first, "2026-03-09"),
        ("laptop2", "2026-03-09"),
    }


# -- the same report read through sqlite3 alone ------------------------------------------------


@pytest.mark.sqlite_only
def test_a_current_sqlite_store_gives_the_same_report_through_sqlite3_alone(audited, engine):
    from auditor.store.db import resolve_url
    from auditor.store.sql_text import SqliteStore, open_current_sqlite

    plain = open_current_sqlite(resolve_url(None))  # AUDITOR_DB, as the command line finds it
    assert isinstance(plain, SqliteStore)
    after_midnight = datetime(2026, 3, 2, 0, 0, 1, tzinfo=UTC)  # read from the usage rows
    for by, since in ((["day"], None), (["model", "project"], None), (["day"], after_midnight)):
        through_engine = cost_report(engine, by, since)
        through_sqlite3 = cost_report(plain, by, since)
        assert through_sqlite3.rows == through_engine.rows
        assert through_sqlite3.total == through_engine.total
        assert through_sqlite3.notes == through_engine.notes


@pytest.mark.sqlite_only
def test_a_store_to_migrate_is_not_read_through_sqlite3(engine):
    from auditor.store.db import resolve_url
    from auditor.store.sql_text import open_current_sqlite

    url = resolve_url(None)
    assert open_current_sqlite(url) is not None
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '0019'"))
    assert open_current_sqlite(url) is None  # open_db migrates it first


@pytest.mark.sqlite_only
def test_a_warm_cost_report_imports_no_sqlalchemy(audited):
    import subprocess
    import sys

    invoke("report", "costs", "--by", "day")  # the sums brought up to date: the report is warm
    script = (
        "import sys\n"
        "from auditor.cli.main import main\n"
        "sys.argv = ['auditor', 'report', 'costs', '--by', 'day', '--format', 'json']\n"
        "try:\n"
        "    main()\n"
        "finally:\n"
        "    print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('sqlalchemy', 'alembic', 'pluggy')), file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().splitlines()[-1] == "[]"
    assert json.loads(done.stdout) == report_json("--by", "day")
