"""No planted secret leaves through any way text goes out: the observer's HTTP request (Gemini
and Claude, through their real SDKs against a local server), `auditor prompt`, `auditor show`
and `auditor export html`; `--no-redact` shows them; terminal escapes never reach a terminal.

The transcript is a Claude Code session whose last turn carries every format of
`helpers.secrets.PLANTED` in the places text comes from (typed, said, commands, output, a file
read, a file written) and a tool output with terminal escapes.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from helpers.secrets import PLANTED, all_secrets, write_claude_code_session
from helpers.wire import Reply, Stub, anthropic_response, gemini_response

from auditor.cli.main import cli

QUIET = {"needsCorrection": False, "message": None}


def leaked(text: str) -> list[str]:
    return [p.name for p in PLANTED if any(s in text for s in p.secrets)]


@pytest.fixture
def session(tmp_path):
    """The planted session, ingested; returns (its id, the native id of its last message)."""
    path = tmp_path / "projects" / "-home-dev-shop" / "planted.jsonl"
    sid = write_claude_code_session(path)
    result = CliRunner().invoke(cli, ["ingest", "-q", str(path.parent)])
    assert result.exit_code == 0, result.output
    last = json.loads(path.read_text().splitlines()[-1])["uuid"]
    return sid, last


@pytest.mark.parametrize(
    ("observer", "env", "reply"),
    [
        ("gemini", {"GEMINI_API_KEY": "TEST-GEMINI-KEY"}, gemini_response(QUIET)),
        ("claude", {"ANTHROPIC_API_KEY": "sk-ant-TEST-dummy"}, anthropic_response(QUIET)),
    ],
)
def test_the_observers_request_carries_no_planted_secret(
    session, monkeypatch, observer, env, reply
):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    stub = Stub(Reply(200, reply))
    try:
        result = CliRunner().invoke(
            cli,
            [
                "run",
                "--observer",
                observer,
                "--base-url",
                stub.url,
                "--min-tool-calls",
                "1",
                "--max-retries",
                "0",
                "--since",
                "2000-01-01",
            ],
        )
        assert result.exit_code == 0, result.output
        assert len(stub.log) == 1, result.output
        body = json.dumps(stub.log[0]["body"])
    finally:
        stub.close()
    assert leaked(body) == []
    # The lines were sent (redacted), not cut: the text around each secret is in the request.
    for p in PLANTED:
        assert json.dumps(p.anchor)[1:-1] in body, p.name
    assert "\\u001b" not in body and "\\u0007" not in body  # no terminal escapes either


def test_auditor_prompt_prints_no_planted_secret(session):
    sid, last = session
    result = CliRunner().invoke(cli, ["prompt", sid, "--at", last])
    assert result.exit_code == 0, result.output
    assert leaked(result.stdout) == []
    assert "[REDACTED:" in result.stdout and "\x1b" not in result.stdout


def test_show_redacts_by_default_and_never_prints_terminal_escapes(session):
    sid, _ = session
    shown = CliRunner().invoke(cli, ["show", sid, "--no-pager", "--full"])
    assert shown.exit_code == 0, shown.output
    assert leaked(shown.stdout) == []
    assert "\x1b" not in shown.stdout and "\x07" not in shown.stdout
    assert "./deploy.sh --verbose" in shown.stdout  # the tool call with the escapes is there

    raw = CliRunner().invoke(cli, ["show", sid, "--no-pager", "--full", "--no-redact"])
    assert raw.exit_code == 0, raw.output
    assert "AKIAQ3EGRXBM7NVT5WPY" in raw.stdout and "Tangerine!Falcon42" in raw.stdout
    assert "\x1b" not in raw.stdout and "\x07" not in raw.stdout  # not even with --no-redact


def test_export_html_redacts_by_default(session, tmp_path):
    out = tmp_path / "html"
    result = CliRunner().invoke(cli, ["export", "html", "-o", str(out)])
    assert result.exit_code == 0, result.output
    pages = "".join(f.read_text(encoding="utf-8") for f in out.glob("*.html"))
    assert leaked(pages) == []
    assert "[REDACTED:" in pages and "\x1b" not in pages

    raw = tmp_path / "raw"
    result = CliRunner().invoke(cli, ["export", "html", "-o", str(raw), "--no-redact"])
    assert result.exit_code == 0, result.output
    pages = "".join(f.read_text(encoding="utf-8") for f in raw.glob("*.html"))
    assert "AKIAQ3EGRXBM7NVT5WPY" in pages and "\x1b" not in pages


def test_every_planted_secret_is_in_the_transcript(tmp_path):
    """The transcript really carries them all (so the tests above test something)."""
    path = tmp_path / "s.jsonl"
    write_claude_code_session(path)
    raw = path.read_text()
    decoded = "".join(json.dumps(json.loads(line)) for line in raw.splitlines())
    for secret in all_secrets():
        assert json.dumps(secret)[1:-1] in decoded, secret
