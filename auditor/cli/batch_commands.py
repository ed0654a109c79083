"""`auditor batch`: the batches `run --batch` submitted, and dropping one that will not come."""

from __future__ import annotations

import click

from .common import Context, echo_json, pass_ctx, row_formats


@click.group()
def batch() -> None:
    """The provider batches of `auditor run --batch`: list them, drop one that will not come."""


@batch.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option(
    "--limit", type=int, default=50, show_default=True, help="At most N batches, newest first."
)
@row_formats
@pass_ctx
def batch_list(ctx: Context, as_json: bool, limit: int) -> None:
    """List the batches, newest first: state, checkpoints still waiting, the provider's last
    refusal. `submitting` means the provider's answer to the submission never came."""
    from ..audit.batch import list_batches
    from .render import console
    from .tables import Col, print_table

    rows = list_batches(ctx.engine, limit or None)
    if as_json:
        echo_json(rows)
        return
    if not rows:
        click.echo("No batches yet: `auditor run --batch` submits them.", err=True)
        return
    cols = [
        Col("id", right=True, keep=True),
        Col("label", keep=True),
        Col("state", keep=True),
        Col("waiting", right=True, keep=True),
        Col("observer"),
        Col("model", cut="end", min=10),
        Col("submitted", keep=True),
        Col("provider id", cut="end", min=12),
    ]
    lines = [
        [
            str(r["id"]),
            r["label"],
            r["state"],
            f"{r['waiting']}/{r['requests']}",
            r["observer"],
            r["model"],
            (r["submitted_at"] or "")[:16].replace("T", " "),
            r["provider_id"] or "—",
        ]
        for r in rows
    ]
    print_table(console, cols, lines)
    for r in rows:  # the provider's words whole, under the table
        if r["error"] and r["state"] in ("submitting", "pending"):
            click.echo(f"{r['label']}: {r['error']}")


@batch.command("drop")
@click.argument("batch_id", metavar="BATCH")
@pass_ctx
def batch_drop(ctx: Context, batch_id: str) -> None:
    """Stop waiting for BATCH (its label, provider id or id): its checkpoints without an answer
    go to the next `run --batch`.

    For a batch the provider never got (a submission it refused) or will never answer. If it
    does hold it, the checkpoints sent again are paid twice and its answers are not collected.
    """
    from ..audit.batch import drop_batch

    label, left = drop_batch(ctx.engine, batch_id)
    click.echo(
        f"dropped batch {label}: its {left} checkpoints without an answer go to the next "
        "`auditor run --batch`."
    )


COMMANDS = [batch]
