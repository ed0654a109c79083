"""`auditor serve`: the store in a browser (the pages are in `auditor.web_app`)."""

from __future__ import annotations

import click

from .common import Context, pass_ctx


@click.command("serve")
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on. Only this machine can connect to 127.0.0.1; 0.0.0.0 opens the "
    "pages (redacted, but your transcripts) to every machine that can reach this one.",
)
@click.option(
    "--port",
    "-p",
    type=click.IntRange(0, 65535),
    default=8420,
    show_default=True,
    help="Port to listen on; 0 takes a free one (the address is printed).",
)
@pass_ctx
def serve(ctx: Context, host: str, port: int) -> None:
    """Browse the store in a web browser, at http://127.0.0.1:8420/ unless told otherwise.

    \b
    /             threads, with full-text search (as `auditor search`) and filters
                  by agent, project and date
    /threads/ID   a thread with the signals and verdicts at each checkpoint
                  (the page `auditor export html` writes)
    /corrections  every correction an observer asked for, with its cost and
                  whether it reached the agent
    /review       mark each correction right or wrong: the marks are labels in
                  the store, which `auditor eval` (without LABELS) scores
                  observers against and `auditor report verdicts` counts

    Secrets in the transcripts are shown as [REDACTED:kind]. The pages run no script and load
    nothing from elsewhere. Works on SQLite and PostgreSQL stores (--db). Needs the `serve`
    extra: pip install 'auditor[serve]'. Ctrl-C stops it.
    """
    import sys

    from ..web_app import require_server
    from ..web_app import serve as run_server

    require_server()

    def announce(line: str) -> None:
        click.echo(line)
        sys.stdout.flush()

    run_server(ctx.engine, ctx.plugins, host, port, announce)


COMMANDS = [serve]
