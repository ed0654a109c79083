"""Evidence recall: does the observer's prompt keep what a reviewer needs to decide?

`benchmarks/evidence/labels.jsonl` holds end-of-turn checkpoints of real transcripts in
../shared/corpus, each with the exact strings a reviewer needed to decide whether the agent should
have been corrected (the user's requirement, the agent's own sentences, failure lines, the last
result of a command) and whether it should have been. It is a labels file of `auditor eval` (one
schema): `thread` (native id), `at` (the message ending the checkpoint) and `needs_correction`,
plus what only this script reads: `file` (the transcript, relative to the corpus), `agent`,
`evidence` (the strings), `note` (why the label says what it says) and `round` (the labelling
round that added it, 1 for the first). For each label this script:

1. ingests the label's transcript into a scratch store and renders the checkpoint exactly as
   `auditor prompt THREAD --at MESSAGE_ID` does (find_thread, load_messages, checkpoint_at, the
   formatter hook);
2. renders the same checkpoint uncut, through the same hook with the formatter option
   `uncut` (nothing abbreviated, nothing left out);
3. counts an evidence string as kept when it occurs in the prompt after the prompt's own
   transformations of text: `auditor.redact.redact` is applied to the string, and runs of
   whitespace are collapsed on both sides (the prompt re-indents tool inputs, fences output and
   flattens harness notes; it never rewrites words). Every evidence string must occur in the
   uncut render, else the label is reported as broken.

It prints recall over all evidence strings and over those of the checkpoints that should have been
corrected, and the median of prompt tokens / uncut tokens, for two parts of the labels apart: the
development part the formatter is tuned on, and a held-out part it must not be tuned on. A label is
held out when the SHA-256 of its transcript's path (`file`; a subagent's counts as its session's),
read as a number, is divisible by 3: about a third of the transcripts, every checkpoint of a
session on the same side. The held-out part is reported twice: the labels of earlier rounds,
whose figures someone has already seen, and those of the latest round, which nobody had seen
before that round's first run, then both together (the error bar of the earlier part narrows each time its figures
guide a choice, so each round adds a fresh part). `--verbose`
lists the evidence lost on the development part only; the held-out part is reported as figures,
so that nobody tunes on it by reading its misses. The same figures are printed for the
seeds' simple cut (every message, tool inputs cut to 200 and results to 500 characters) and, with
`--before REF`, for the formatter of git revision REF, so a change is measured against what it
replaces in one run. Goal: recall >= 0.97 overall and >= 0.96 at positives on both parts, the median prompt no
larger than before.

    python benchmarks/evidence.py [--corpus DIR] [--labels FILE] [--budget TOKENS] [--before REF]
                                  [--development] [--verbose]
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import importlib.util
import io
import json
import os
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from auditor.audit.checkpoint_plan import CheckpointPlanner
from auditor.audit.checkpoints import checkpoint_at
from auditor.ingest.ingester import ingest
from auditor.plugins import get_plugin_manager
from auditor.redact import redact
from auditor.store.db import open_db
from auditor.store.threads import find_thread, load_messages

ROOT = Path(__file__).resolve().parent.parent
LABELS = Path(__file__).resolve().parent / "evidence" / "labels.jsonl"
SHARED = Path(os.environ.get("AUDITOR_SHARED", ROOT.parent / "shared"))
Render = Callable[[object, object, list, dict], str]


def load_labels(path: Path) -> list[dict]:
    """Read the labels, one JSON object a line."""
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise SystemExit(f"{path}:{n}: not JSON ({exc.msg})") from None
    return out


# A Claude Code subagent's transcript lives beside its session's: SESSION/subagents/agent-X.jsonl
_SUBAGENT = re.compile(r"^(?P<session>.+)/subagents/[^/]+\.jsonl$")


def held_out(label: dict) -> bool:
    """True for a label of the held-out part: its transcript's path hashes to 0 modulo 3.

    A subagent's transcript counts as its session's (`SESSION.jsonl`), so that a session and
    the subagents it started fall on the same side.
    """
    path = label["file"]
    subagent = _SUBAGENT.match(path)
    if subagent:
        path = subagent["session"] + ".jsonl"
    return int(hashlib.sha256(path.encode("utf-8")).hexdigest(), 16) % 3 == 0


def normalise(text: str) -> str:
    """Collapse every run of whitespace to one space: the prompt re-indents and re-wraps."""
    return " ".join(text.split())


def kept(evidence: str, rendered: str) -> bool:
    """True when `evidence`, redacted as the prompt redacts, occurs in normalised `rendered`."""
    return normalise(redact(evidence)) in rendered


@dataclass
class Checkpoint:
    label: dict
    checkpoint: object
    thread: object
    messages: list


def load_checkpoints(engine, labels: list[dict]) -> list[Checkpoint]:
    """Find each label's checkpoint the way `auditor prompt THREAD --at MESSAGE_ID` does."""
    out = []
    for label in labels:
        th = find_thread(engine, label["thread"])
        messages = load_messages(engine, th.id)
        cp = checkpoint_at(th.id, messages, label["at"], "end-turn")
        out.append(Checkpoint(label, cp, th, messages[: cp.index + 1]))
    return out


def tokens(text: str) -> int:
    return -(-len(text.encode("utf-8", "surrogatepass")) // 4)


def rendered_by(pm) -> Render:
    """What `auditor prompt` renders: the plugins' formatter, redacted, with `config`."""

    def render(checkpoint, thread, messages, config) -> str:
        return CheckpointPlanner(pm, formatter=config).render(checkpoint, thread, messages)

    return render


def seed_cut(checkpoint, thread, messages, config) -> str:
    """The seeds' simple render: every message, tool inputs cut to 200 and results to 500 chars."""
    parts = []
    for m in messages:
        text = ""
        for b in m.blocks:
            if b.kind == "text" and b.text:
                text += b.text
            elif b.kind == "tool_use":
                text += f"\n[Tool: {b.tool_name}({json.dumps(b.tool_input)[:200]}...)]"
            elif b.kind == "tool_result":
                text += f"\n[Result: {(b.text or '')[:500]}...]"
        parts.append(f"**{m.role}**: {redact(text)}")
    return "\n\n".join(parts)


def formatter_at(ref: str):
    """Import plugins/formatter.py as it was at git revision `ref`, with the modules beside it
    (the formatter imports its text tools from a sibling module) as they were then."""
    tree = subprocess.run(
        ["git", "-C", str(ROOT), "archive", ref, "plugins"], check=True, capture_output=True
    ).stdout
    root = Path(tempfile.mkdtemp(prefix="auditor-evidence-"))
    with tarfile.open(fileobj=io.BytesIO(tree)) as tar:
        tar.extractall(root, filter="data")
    package = root / "plugins"
    name = f"plugins_at_{root.name.replace('-', '_')}"
    spec = importlib.util.spec_from_file_location(
        name, package / "__init__.py", submodule_search_locations=[str(package)]
    )
    sys.modules[name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sys.modules[name])
    return importlib.import_module(f"{name}.formatter")


@dataclass
class Figures:
    name: str
    evidence: int = 0
    found: int = 0
    positive_evidence: int = 0
    positive_found: int = 0
    ratios: list[float] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    missed: list[tuple[str, str]] = field(default_factory=list)

    def line(self) -> dict:
        return {
            "render": self.name,
            "recall": round(self.found / max(self.evidence, 1), 3),
            "recall_at_positives": round(self.positive_found / max(self.positive_evidence, 1), 3),
            "evidence": self.evidence,
            "positive_evidence": self.positive_evidence,
            "median_prompt_tokens": statistics.median(self.sizes) if self.sizes else None,
            "median_ratio_to_uncut": round(statistics.median(self.ratios), 3)
            if self.ratios
            else None,
        }


def measure(
    name: str, render: Render, checkpoints: list[Checkpoint], full: list[str], config: dict
) -> Figures:
    """Recall of the evidence strings and size against the uncut render, for one renderer."""
    figures = Figures(name)
    for cp, full_text in zip(checkpoints, full, strict=True):
        text = render(cp.checkpoint, cp.thread, cp.messages, config)
        flat = normalise(text)
        positive = bool(cp.label["needs_correction"])
        for evidence in cp.label["evidence"]:
            hit = kept(evidence, flat)
            figures.evidence += 1
            figures.found += hit
            figures.positive_evidence += positive
            figures.positive_found += positive and hit
            if not hit:
                figures.missed.append((cp.label["at"], evidence))
        figures.sizes.append(tokens(text))
        figures.ratios.append(tokens(text) / max(tokens(full_text), 1))
    return figures


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--corpus",
        type=Path,
        default=SHARED / "corpus",
        help="default: $AUDITOR_SHARED/corpus, else ../shared/corpus",
    )
    ap.add_argument("--labels", type=Path, default=LABELS)
    ap.add_argument(
        "--budget", type=int, default=None, help="formatter token budget (default: the formatter's)"
    )
    ap.add_argument(
        "--before", metavar="REF", help="also measure plugins/formatter.py of git revision REF"
    )
    ap.add_argument(
        "--verbose", "-v", action="store_true", help="list every evidence string the prompt lost"
    )
    ap.add_argument(
        "--development",
        action="store_true",
        help="measure the development part only: what to run while tuning, so that the "
        "held-out figures stay unseen until the change is decided",
    )
    args = ap.parse_args()
    if not args.corpus.is_dir():
        print(f"The corpus is not at {args.corpus}; pass --corpus DIR.", file=sys.stderr)
        return 2
    labels = load_labels(args.labels)
    engine = open_db(Path(tempfile.mkdtemp(prefix="auditor-evidence-")) / "store.db")
    pm = get_plugin_manager()
    ingest(engine, pm, sorted({args.corpus / label["file"] for label in labels}))
    checkpoints = load_checkpoints(engine, labels)

    full = [
        CheckpointPlanner(pm, formatter={"uncut": True}).render(c.checkpoint, c.thread, c.messages)
        for c in checkpoints
    ]
    broken = [
        (c.label["at"], e)
        for c, text in zip(checkpoints, full, strict=True)
        for e in c.label["evidence"]
        if not kept(e, normalise(text))
    ]
    positives = sum(bool(label["needs_correction"]) for label in labels)
    agents = sorted({c.thread.agent for c in checkpoints})
    print(
        json.dumps(
            {
                "labels": len(labels),
                "positives": positives,
                "agents": agents,
                "evidence": sum(len(label["evidence"]) for label in labels),
                "evidence_missing_from_uncut_render": len(broken),
            }
        )
    )
    for at, evidence in broken:
        print(f"  broken label {at}: {evidence!r}", file=sys.stderr)

    config = {"max_tokens": args.budget} if args.budget else {}
    runs = [("seed 200/500 cut", seed_cut)]
    if args.before:
        runs.append((f"formatter at {args.before}", formatter_at(args.before).render))
    runs.append(("formatter (auditor prompt)", rendered_by(pm)))
    latest = max(label["round"] for label in labels)
    parts = {
        "development": [i for i, c in enumerate(checkpoints) if not held_out(c.label)],
        "held-out, earlier rounds": [
            i for i, c in enumerate(checkpoints) if held_out(c.label) and c.label["round"] < latest
        ],
        f"held-out, round {latest} (new)": [
            i for i, c in enumerate(checkpoints) if held_out(c.label) and c.label["round"] == latest
        ],
        # The two together: the held-out part as the split defines it.
        "held-out, all rounds": [i for i, c in enumerate(checkpoints) if held_out(c.label)],
    }
    if args.development:
        parts = {"development": parts["development"]}
    for part, indexes in parts.items():
        chosen = [checkpoints[i] for i in indexes]
        print(
            json.dumps(
                {
                    "part": part,
                    "labels": len(chosen),
                    "positives": sum(bool(c.label["needs_correction"]) for c in chosen),
                    "agents": {
                        a: sum(c.thread.agent == a for c in chosen)
                        for a in sorted({c.thread.agent for c in chosen})
                    },
                }
            )
        )
        for name, render in runs:
            figures = measure(name, render, chosen, [full[i] for i in indexes], config)
            print(json.dumps({"part": part, **figures.line()}))
            if args.verbose and part == "development":
                for at, evidence in figures.missed:
                    print(f"  lost at {at}: {evidence[:120]!r}")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
