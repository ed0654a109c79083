"""Where the signals' thresholds stand on the labelled checkpoints: goal drift and critique.

For each label of `benchmarks/evidence/labels.jsonl` (the same development and held-out parts
as `benchmarks/evidence.py`) this script computes, at the label's checkpoint:

- the goal-drift score of the message that opened the turn, against two references: the
  thread's first typed message (what `goal-drift` uses) and the typed message before it (the
  previous goal); a turn opened by the first message has no score;
- the strongest signal's score (what `auditor run --critique` compares with its minimum).

It prints, per part and per threshold, how many checkpoints that need a correction and how
many that do not would fire. A label says whether the agent needed a correction, not whether
the user changed the subject: a drift signal that fires as often on negatives as on positives
tells the observer nothing about corrections. Decide on the development part; the held-out
part is printed as figures.

    python benchmarks/signal_thresholds.py [--corpus DIR] [--labels FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import evidence  # noqa: E402 (the labels' loader and parts, beside this file)

THRESHOLDS = (0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9)


def scores(pm, cp) -> dict[str, float | None]:
    """The checkpoint's goal-drift scores (first and previous goal) and strongest signal."""
    from auditor_plugins.signals_text import GOAL_DRIFT, goal_drift

    from auditor.audit.checkpoint_plan import CheckpointPlanner
    from auditor.audit.checkpoints import is_typed_user

    messages = cp.messages
    typed = [i for i, m in enumerate(messages) if is_typed_user(m) and (m.text or "").strip()]
    opts = {**GOAL_DRIFT, "threshold": 0.0}
    first = previous = None
    if len(typed) >= 2:
        start = typed[-1]
        found = goal_drift(messages, start, opts)
        first = found.score if found else None
        begin = typed[-2]  # the previous goal is the first typed message of what is passed
        found = goal_drift(messages[begin:], start - begin, opts)
        previous = found.score if found else None
    strongest = max(
        (s.score for s in CheckpointPlanner(pm).signals(cp.checkpoint, cp.thread, messages)),
        default=0.0,
    )
    return {"drift_first": first, "drift_previous": previous, "strongest": strongest}


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--corpus", type=Path, default=evidence.SHARED / "corpus")
    ap.add_argument("--labels", type=Path, default=evidence.LABELS)
    args = ap.parse_args()
    labels = evidence.load_labels(args.labels)
    engine = evidence.open_db(Path(tempfile.mkdtemp(prefix="auditor-signals-")) / "store.db")
    pm = evidence.get_plugin_manager()
    evidence.ingest(engine, pm, sorted({args.corpus / label["file"] for label in labels}))
    rows = [
        (evidence.held_out(c.label), bool(c.label["needs_correction"]), scores(pm, c))
        for c in evidence.load_checkpoints(engine, labels)
    ]
    for part, held in (("development", False), ("held-out", True)):
        chosen = [(positive, s) for h, positive, s in rows if h == held]
        positives = sum(p for p, _ in chosen)
        for name in ("drift_first", "drift_previous", "strongest"):
            scored = [(p, s[name]) for p, s in chosen if s[name] is not None]
            for t in THRESHOLDS:
                fired = [p for p, score in scored if score >= t]
                print(
                    json.dumps(
                        {
                            "part": part,
                            "score": name,
                            "threshold": t,
                            "scored": len(scored),
                            "fires_at_positives": f"{sum(fired)}/{positives}",
                            "fires_at_negatives": f"{len(fired) - sum(fired)}/{len(chosen) - positives}",
                        }
                    )
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
