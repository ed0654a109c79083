"""The built-in gate: audit only checkpoints where a correction could plausibly matter.

Rules, in order (each configurable through the run's gate config):
- `agents` / `projects`: optional allow-lists (agent names; cwd prefixes);
- sidechains (subagent threads) are skipped unless `include_sidechains`;
- the busy-turn policy: at least `min_tool_calls` tool calls since the last typed user
  message, and at least one file edit since then when `require_edit`. It is the default of
  end-turn mode (5 calls and an edit), where a turn is judged once, as a whole. Every-inference
  mode's default is to look after every round (0 calls, no edit needed), as docs/design.md
  says; a user keeps the policy there by giving the two options (`--min-tool-calls 5
  --require-edit`, or `[gate]` in the config file);
- ...unless a signal named in `audit_on_signals` fired (default:
  `claimed-success-after-failure`): then audit anyway, with the reason `signal (NAME)`;
  `[]` turns the rule off;
- when `skip_quiet_below_edits` is N > 0 (default 0, off): skip a checkpoint where no signal
  fired and fewer than N file edits were made.

The loop guard (never right after a course correction) is not here: the core applies it before
any gate (`auditor.audit.checkpoints.loop_guard`), so a gate of one's own cannot switch it off.
Whether the user wrote after a checkpoint decides delivery, not the audit.
"""

from __future__ import annotations

from collections.abc import Sequence

from auditor.api import GateDecision, gate_policy, hookimpl

DEFAULTS = {
    "include_sidechains": False,
    "audit_on_signals": ["claimed-success-after-failure"],
    "skip_quiet_below_edits": 0,
}


def decide(checkpoint, thread, config: dict, signals: Sequence = ()) -> GateDecision:
    given = {k: v for k, v in config.items() if v is not None}
    cfg = {**DEFAULTS, **given, **gate_policy(config)}
    agents = cfg.get("agents")
    if agents and thread.agent not in agents:
        return GateDecision(False, f"agent-not-allowed ({thread.agent})", "agent-not-allowed")
    projects = cfg.get("projects")
    if projects and not any((thread.cwd or "").startswith(p) for p in projects):
        return GateDecision(False, "project-not-allowed")
    if thread.is_sidechain and not cfg["include_sidechains"]:
        return GateDecision(False, "sidechain")
    forcing = [s.name for s in signals if s.name in (cfg["audit_on_signals"] or ())]
    # The reason names the signal only where it changed the outcome.
    if checkpoint.tool_calls < cfg["min_tool_calls"]:
        if forcing:
            return GateDecision(True, f"signal ({forcing[0]})", "signal")
        return GateDecision(
            False,
            f"too-few-tool-calls ({checkpoint.tool_calls} < {cfg['min_tool_calls']})",
            "too-few-tool-calls",
        )
    if cfg["require_edit"] and checkpoint.file_edits == 0:
        return (
            GateDecision(True, f"signal ({forcing[0]})", "signal")
            if forcing
            else GateDecision(False, "no-file-edit")
        )
    quiet_below = cfg["skip_quiet_below_edits"] or 0
    if quiet_below and not signals and checkpoint.file_edits < quiet_below:
        return GateDecision(
            False, f"quiet ({checkpoint.file_edits} < {quiet_below} edits, no signal)", "quiet"
        )
    return GateDecision(True, "passed")


@hookimpl(trylast=True)
def gate_checkpoint(checkpoint, thread, messages, config, signals):
    return decide(checkpoint, thread, config, signals)
