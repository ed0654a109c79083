"""Commands for reports and retrospective analysis (`auditor report ...`, `eval`, `export`)."""

from __future__ import annotations

import click


@click.group()
def report() -> None:
    """Reports over the store: costs, verdicts, agreement between observers."""


COMMANDS = [report]
