"""Commands that audit and read what the audits said: `run`, `prompt`, `events`, `verdicts`,
`runs`."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from .common import (
    DURATION,
    SINCE,
    Context,
    echo_json,
    formatter_config,
    mode_option,
    pass_ctx,
    prompt_token_options,
    row_formats,
    run_options,
)

if TYPE_CHECKING:
    from ..audit.run_types import RunConfig


@click.command()
@run_options
@click.option(
    "--thread", "threads", multiple=True, metavar="THREAD", help="Only this thread (repeatable)."
)
@click.option("--since", type=SINCE, help="Only threads active since WHEN (ISO date, or 12h / 7d).")
@click.option("--limit", type=int, help="Make at most N observer calls.")
@click.option(
    "--concurrency",
    "-j",
    type=int,
    show_default=True,  # shows a config file's value; without one, the help says the rule
    help="Observer calls in flight at once (default: what the observer suits: 4, the embedded model 1).",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Gate and format only: print how many checkpoints pass and the estimated tokens and cost, calling no model.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option(
    "--every",
    type=DURATION,
    help="Repeat until Ctrl-C: ingest the sources, then run, every DURATION (90s, 15m, 1h, 1d).",
)
@click.option(
    "--source",
    "sources",
    multiple=True,
    type=click.Path(),
    metavar="PATH",
    help="With --every: ingest PATH on each tick (repeatable; default: `sources` in the config file).",
)
@click.option(
    "--signal",
    "signal_options",
    multiple=True,
    metavar="NAME.KEY=VALUE",
    help="Signal option, e.g. tool-loop.min_repeats=4; NAME=off turns a signal off (repeatable; see docs/plugins.md).",
)
@click.option(
    "--audit-on",
    "audit_on",
    multiple=True,
    metavar="SIGNAL",
    help="Gate: always audit where SIGNAL fires, under the thresholds too (repeatable; default: claimed-success-after-failure; `none` for none).",
)
@click.option(
    "--skip-quiet-below",
    type=int,
    default=0,
    show_default=True,
    metavar="N",
    help="Gate: skip checkpoints where no signal fired and fewer than N files were edited (0: off).",
)
@click.option(
    "--critique",
    is_flag=True,
    help="Second pass: where the observer stayed silent but a signal scored high, ask it again with a more critical prompt (a separate verdict, with its own cost).",
)
@click.option(
    "--critique-min-score",
    type=float,
    default=0.6,
    show_default=True,
    help="With --critique: the signal score that calls for a second pass.",
)
@click.option(
    "--budget",
    type=float,
    metavar="USD",
    help="Spend at most USD on this run: no observer call starts whose estimate (prompt tokens and the answer's max tokens at the model's price) would cross it.",
)
@click.option(
    "--budget-per-day",
    type=float,
    metavar="USD",
    help="Spend at most USD on verdicts recorded since midnight UTC, by any run (config: budget_per_day in [run]).",
)
@click.option(
    "--allow-unpriced",
    is_flag=True,
    help="Under a budget, still call a model the price table does not know (its cost counts as unknown).",
)
@click.option(
    "--batch",
    is_flag=True,
    help="Through the provider's batch API (gemini, claude), at the batch price: record the answers of finished batches, then submit the checkpoints that still need one. Run it again later to collect.",
)
@click.option(
    "--collect",
    is_flag=True,
    help="Only record the answers of finished batches; submit nothing.",
)
@click.option(
    "--batch-size",
    type=click.IntRange(min=1),
    default=1000,
    show_default=True,
    help="With --batch: at most N requests a batch.",
)
@pass_ctx
def run(
    ctx: Context,
    config: RunConfig,
    threads,
    since,
    limit,
    concurrency,
    dry_run,
    as_json,
    every,
    sources,
    signal_options,
    audit_on,
    skip_quiet_below,
    critique,
    critique_min_score,
    budget,
    budget_per_day,
    allow_unpriced,
    batch,
    collect,
    batch_size,
) -> None:
    """Audit stored threads: gate -> format -> observe -> record.

    Every checkpoint's gate decision is recorded with its reason; every observer call is
    recorded with its verdict, raw answer, tokens and cost. Re-running never pays twice for
    a checkpoint already answered with the same observer, model, prompt and thread content,
    and a run stopped at any moment keeps every answer it had. Runs at the same time over one
    database share the work: each observer call is leased to one of them.

    With --every, ingest + run repeat on a schedule; the first Ctrl-C lets the calls in
    flight finish and stops, a second one stops at once.
    """
    import shlex
    import signal

    from ..audit.run import run as run_audit
    from ..audit.run_types import RunInterrupted
    from .render import interrupted_lines, run_progress, run_summary

    config.threads, config.since, config.limit = list(threads), since, limit
    config.concurrency, config.dry_run = concurrency, dry_run
    from ..store.signal_rows import parse_options

    config.signals = parse_options(signal_options)
    config.critique, config.critique_min_score = critique, critique_min_score
    config.budget, config.budget_per_day = budget, budget_per_day
    config.allow_unpriced = allow_unpriced
    config.batch, config.collect, config.batch_size = batch, collect, batch_size
    if audit_on:
        config.gate["audit_on_signals"] = [a for a in audit_on if a.lower() != "none"]
    config.gate["skip_quiet_below_edits"] = skip_quiet_below

    if every:
        from ..audit.schedule import run_every

        paths = list(sources) or (ctx.config.sources if ctx.config else [])
        try:
            run_every(
                ctx.engine,
                ctx.plugins,
                config,
                every,
                paths,
                report=lambda line: click.echo(line, err=True),
            )
        except KeyboardInterrupt:
            click.echo("Stopped at once: every answer received so far is stored.", err=True)
            sys.exit(130)
        sys.exit(0)

    def _terminate(signum, frame):
        # As Ctrl-C: inside the event loop, asyncio's SIGINT handler cancels the run cleanly,
        # the calls in flight with it (an observer that never answers must not hold it up).
        signal.raise_signal(signal.SIGINT)

    # A run started in the background (`auditor run &`, a service manager) inherits SIGINT
    # ignored; asyncio then installs no handler of its own and SIGTERM, passed on as SIGINT,
    # would be dropped: the run went on until its calls timed out.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _terminate)
    interrupted = None
    with run_progress(
        enabled=not as_json and not dry_run and not batch and not collect
    ) as progress:
        try:
            summary = run_audit(ctx.engine, ctx.plugins, config, progress)
        except RunInterrupted as exc:
            interrupted = exc.summary
        except KeyboardInterrupt:  # before the run started
            click.echo("Interrupted before the run started; nothing was sent.", err=True)
            sys.exit(130)
    if interrupted is not None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # a second Ctrl-C ends the process at once
        if as_json:
            echo_json(interrupted.as_dict())
        else:
            run_summary(interrupted, False, _short_ids(ctx.engine, interrupted))
        command = shlex.join(["auditor", *sys.argv[1:]])
        click.echo(interrupted_lines(interrupted, command), err=True)
        sys.exit(130)
    if as_json:
        echo_json(summary.as_dict())
    else:
        for line in summary.messages:
            click.echo(line, err=True)
        from ..audit.checkpoints import describe_gate_policy

        # The gate's policy is said, not assumed: it differs between the two modes.
        mode = config.gate.get("mode") or "end-turn"
        click.echo(f"gate ({mode}): {describe_gate_policy(config.gate)}", err=True)
        run_summary(summary, dry_run, _short_ids(ctx.engine, summary))
        if not summary.checkpoints:
            from ..store.threads import empty_store_hint

            if hint := empty_store_hint(ctx.engine):
                click.echo(hint, err=True)
        if critique:
            click.echo(
                f"critique: {summary.critique_candidates} checkpoints with strong signals; "
                f"{summary.critiques} second passes, {summary.critique_corrections} corrections"
            )
    # Every agent's threads refused (only its own vendor's observer is ready): nothing was done.
    sys.exit(1 if summary.errors or summary.status == "refused" else 0)


@click.command()
@click.argument("thread")
@click.option(
    "--at",
    "at",
    required=True,
    metavar="MESSAGE_ID",
    help="Id of the message the checkpoint ends at (e.g. a Claude Code uuid), or a prefix "
    "no other message of the thread shares.",
)
@prompt_token_options
@mode_option
@click.option(
    "--observer",
    metavar="NAME",
    default=None,
    help="Render as for this observer: one with a small context window (embedded) gets the "
    "thread sized to fit it.",
)
@pass_ctx
def prompt(
    ctx: Context, thread: str, at: str, min_prompt_tokens, max_prompt_tokens, mode, observer
) -> None:
    """Print the exact system prompt and user content the observer would get at a checkpoint."""
    from ..audit.checkpoint_plan import CheckpointPlanner, formatter_for
    from ..audit.checkpoints import checkpoint_at
    from ..audit.prompt import load_prompt
    from ..store.threads import find_message, find_thread, load_messages

    th = find_thread(ctx.engine, thread)
    messages = load_messages(ctx.engine, th.id)
    cp = checkpoint_at(th.id, messages, find_message(th, messages, at), mode)
    system = load_prompt()
    formatter = formatter_config(min_prompt_tokens, max_prompt_tokens)
    if observer:
        formatter = formatter_for(formatter, ctx.plugins.observer(observer), system.text)
    with ctx.engine.connect() as conn:
        planner = CheckpointPlanner(ctx.plugins, gate={"mode": mode}, formatter=formatter)
        p = planner.plan(conn, cp, th, messages, render=True)
    signals, decision, user = p.signals, p.decision, p.user
    click.echo(
        f"<!-- prompt {system.version} sha256:{system.sha256[:16]}; gate: {decision.reason} -->",
        err=True,
    )
    from ..store.signal_rows import format_signals

    click.echo("<!-- signals: " + "; ".join(format_signals(signals)) + " -->", err=True)
    click.echo("=== system ===")
    click.echo(system.text)
    click.echo("=== user ===")
    click.echo(user)


@click.command()
@click.argument("thread")
@mode_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@row_formats
@pass_ctx
def checkpoints(ctx: Context, thread: str, mode: str, as_json: bool) -> None:
    """List the checkpoints of THREAD: where `auditor prompt THREAD --at ID` can look, whether
    the gate lets each through (as the last run decided, else as it decides now) and what the
    observers said there."""
    from ..audit.checkpoint_plan import list_checkpoints
    from ..store.threads import find_thread, load_messages

    th = find_thread(ctx.engine, thread)
    rows = list_checkpoints(ctx.engine, ctx.plugins, th, load_messages(ctx.engine, th.id), mode)
    if as_json:
        echo_json(rows)
        return
    if not rows:
        click.echo(f"Thread {th.native_id} has no checkpoint yet (no turn has ended).", err=True)
        return
    from .render import checkpoints_table

    checkpoints_table(rows)


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option(
    "--type",
    "types",
    multiple=True,
    metavar="TYPE",
    help="Only events of this type (repeatable): ingested, gated, audited, critiqued, corrected, injected, injection-failed, run-started, run-finished, error.",
)
@click.option(
    "--limit",
    type=int,
    default=50,
    show_default=True,
    help="Show at most N events, newest first (0: all).",
)
@click.option("--thread", metavar="THREAD", help="Only events about this thread.")
@click.option("--run", "run_id", type=int, metavar="ID", help="Only events of this run.")
@click.option("--since", type=SINCE, help="Only events since WHEN (ISO date, or 12h / 7d).")
@row_formats
@pass_ctx
def events(ctx: Context, as_json: bool, types, limit: int, thread, run_id, since) -> None:
    """Show the event log: what auditor did (ingested, gated, audited, corrected...), newest first."""
    from ..store.events import format_event, list_events
    from ..store.threads import find_thread

    thread_id = find_thread(ctx.engine, thread).id if thread else None
    rows = list_events(ctx.engine, list(types), limit or None, since, thread_id, run_id)
    if as_json:
        echo_json(rows)
        return
    for row in rows:
        click.echo(format_event(row))
    if not rows:
        from ..store.threads import empty_store_hint

        filtered = any((types, thread, run_id, since))
        click.echo(
            empty_store_hint(ctx.engine)
            or ("No event matches these filters." if filtered else "No events yet."),
            err=True,
        )


@click.command()
@click.option(
    "--corrections", "-c", is_flag=True, help="Only verdicts that asked for a correction."
)
@click.option("--thread", metavar="THREAD", help="Only verdicts on this thread.")
@click.option("--observer", "-o", metavar="NAME", help="Only this observer's verdicts.")
@click.option("--model", "-m", metavar="MODEL", help="Only this observer model's verdicts.")
@click.option("--run", "run_id", type=int, metavar="ID", help="Only verdicts of this run.")
@click.option("--since", type=SINCE, help="Only verdicts since WHEN (ISO date, or 12h / 7d).")
@click.option(
    "--query", "-q", metavar="TEXT", help="Only verdicts whose message or problem contains TEXT."
)
@click.option(
    "--status",
    type=click.Choice(["ok", "invalid", "error"]),
    help="Only answers (ok), answers that broke the contract (invalid) or failed calls (error).",
)
@click.option(
    "--limit",
    "-n",
    type=int,
    default=10,
    show_default=True,
    help="Show at most N verdicts, newest first (0: all).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@row_formats
@pass_ctx
def verdicts(
    ctx: Context, corrections, thread, observer, model, run_id, since, query, status, limit, as_json
) -> None:
    """Show what the observers said, newest first: each verdict with its thread and checkpoint,
    the message, the cost, and whether the correction reached the agent.

    `auditor verdicts -c` lists the corrections; `auditor show THREAD` shows them in place.
    """
    from ..live.delivery import check_pending
    from ..store.threads import empty_store_hint, find_thread
    from ..store.verdict_rows import format_verdict, list_verdicts

    rows = list_verdicts(
        ctx.engine,
        corrections=corrections,
        thread_id=find_thread(ctx.engine, thread).id if thread else None,
        observer=observer,
        model=model,
        run_id=run_id,
        since=since,
        query=query,
        status=status,
        limit=limit or None,
    )
    check_pending(ctx.engine, rows)
    if as_json:
        echo_json(rows)
    elif rows:
        click.echo("\n\n".join(format_verdict(v) for v in rows))
    if not rows and not as_json:
        filtered = any((corrections, thread, observer, model, run_id, since, query, status))
        hint = empty_store_hint(ctx.engine) or (
            "No verdict matches these filters."
            if filtered
            else "No verdicts yet: `auditor run` audits the stored threads."
        )
        click.echo(hint, err=True)


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option(
    "--limit",
    type=int,
    default=20,
    show_default=True,
    help="Show at most N runs, newest first (0: all).",
)
@click.option(
    "--wide", "-w", is_flag=True, help="Every column, in full, even past the terminal's width."
)
@row_formats
@pass_ctx
def runs(ctx: Context, as_json: bool, limit: int, wide: bool) -> None:
    """List audit runs, newest first: status, totals, cost. A run killed before it could finish
    is shown as interrupted, with when it was last heard of."""
    from ..store.run_rows import list_runs

    rows = list_runs(ctx.engine, limit or None)
    if as_json:
        echo_json(rows)
        return
    if not rows:
        from ..store.threads import empty_store_hint

        hint = empty_store_hint(ctx.engine)
        click.echo(hint or "No runs yet: `auditor run` audits the stored threads.", err=True)
        return
    from .render import runs_table

    runs_table(rows, wide=wide)


COMMANDS = [run, prompt, checkpoints, events, verdicts, runs]


def _short_ids(engine, summary) -> dict[str, str]:
    from ..store.threads import short_ids

    return short_ids(engine, {c["thread"] for c in summary.found}) if summary.found else {}
