"""The command line in-process, as the tests call it."""

from __future__ import annotations

from click.testing import CliRunner, Result

from auditor.cli.main import cli


def invoke(*args: str, ok: bool = False) -> Result:
    """Run `auditor ARGS` in this process (exceptions other than exit propagate); with `ok`,
    fail unless it exited 0."""
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    if ok:
        assert result.exit_code == 0, result.output
    return result
