"""Audit-run throughput, per-checkpoint overhead and prompt size, as ratios from one run.

On the real corpus (../shared/corpus/{claude-code,codex,amp}), ingested into a scratch store:
1. Throughput: a stub observer that answers after a fixed 200 ms, registered through the real
   hook; audits per second at concurrency 1, 8 and 32, divided by the ideal (concurrency / 0.2 s).
   Goal: >= 0.9 at 32.
2. Overhead: CPU milliseconds per checkpoint of gate + format + record (observer answers at once).
3. Prompt size: median tokens of the observer's user content over the gated-in checkpoints, as a
   ratio to a naive full render of the same thread up to the checkpoint (every tool input and
   result in full). Goal: <= 0.3, with every typed user message kept whole.

    python benchmarks/run.py [--corpus DIR] [--budget TOKENS]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from auditor.audit.checkpoint_plan import CheckpointPlanner
from auditor.audit.checkpoints import find_checkpoints, is_typed_user
from auditor.audit.observe import ObserveResult, ObserverUsage
from auditor.audit.observer_audit import Auditor
from auditor.audit.run_types import RunConfig
from auditor.hookspecs import hookimpl
from auditor.ingest.ingester import ingest
from auditor.plugins import get_plugin_manager
from auditor.store.db import open_db
from auditor.store.threads import load_messages

ROOT = Path(__file__).resolve().parent.parent
LATENCY = 0.2


@dataclass
class StubObserver:
    name: str = "stub"
    default_model: str = "stub-1"
    latency: float = LATENCY

    def check(self, options):
        return None

    async def observe(self, request, options):
        await asyncio.sleep(self.latency)
        usage = ObserverUsage(input=len(request.user) // 4, output=12)
        return ObserveResult(
            "course_correct",
            {"needsCorrection": False, "message": None},
            usage,
            request.model,
            self.latency,
        )


class StubPlugin:
    def __init__(self, observer):
        self.observer = observer

    @hookimpl
    def register_observers(self, register):
        register(self.observer)


def tokens(text: str) -> int:
    return len(text.encode()) // 4


def naive_render(messages) -> str:
    out = []
    for m in messages:
        out.append(f"## {m.role}")
        for b in m.blocks:
            if b.text:
                out.append(b.text)
            if b.kind == "tool_use":
                out.append(f"{b.tool_name}: {json.dumps(b.tool_input)}")
    return "\n".join(out)


def throughput(engine, concurrency: int, calls: int, gate: dict) -> float:
    observer = StubObserver(default_model=f"stub-c{concurrency}")
    pm = get_plugin_manager(extra=[StubPlugin(observer)])
    auditor = Auditor(
        engine, pm, RunConfig(observer="stub", concurrency=concurrency, limit=calls, gate=gate)
    )
    with auditor.recorder.recording():
        started = time.perf_counter()
        summary = asyncio.run(auditor.execute())
        elapsed = time.perf_counter() - started
    done = summary.audited
    return (done / elapsed) / (concurrency / LATENCY), done, elapsed


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--corpus", type=Path, default=ROOT.parent / "shared" / "corpus")
    ap.add_argument(
        "--budget", type=int, default=None, help="formatter token budget (default: the formatter's)"
    )
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="auditor-bench-run-"))
    engine = open_db(work / "store.db")
    pm = get_plugin_manager()
    ingest(engine, pm, [args.corpus / a for a in ("claude-code", "codex", "amp")])
    gate = {"min_tool_calls": 0, "require_edit": False, "include_sidechains": True}

    # 2. overhead: an observer that answers at once; CPU time over every checkpoint.
    instant = StubObserver(default_model="stub-instant", latency=0)
    pm_instant = get_plugin_manager(extra=[StubPlugin(instant)])
    auditor = Auditor(engine, pm_instant, RunConfig(observer="stub", concurrency=1, gate=gate))
    with auditor.recorder.recording():
        cpu = time.process_time()
        summary = asyncio.run(auditor.execute())
        cpu = time.process_time() - cpu
    n = summary.audited
    print(
        json.dumps(
            {"overhead_cpu_ms_per_checkpoint": round(cpu * 1000 / max(n, 1), 2), "checkpoints": n}
        )
    )

    # 1. throughput at 1, 8, 32 in flight.
    for concurrency, calls in ((1, 15), (8, 80), (32, min(n, 320))):
        ratio, done, elapsed = throughput(engine, concurrency, calls, gate)
        print(
            json.dumps(
                {
                    "concurrency": concurrency,
                    "calls": done,
                    "seconds": round(elapsed, 2),
                    "audits_per_s": round(done / elapsed, 1),
                    "ratio_to_ideal": round(ratio, 3),
                }
            )
        )

    # 3. prompt size against a naive full render, over the checkpoints the default gate passes.
    from sqlalchemy import select

    from auditor.store import schema as s

    fmt_cfg = {"max_tokens": args.budget} if args.budget else {}
    planner = CheckpointPlanner(pm, formatter=fmt_cfg)
    ratios, sizes, naive_sizes, users_whole = [], [], [], True
    with engine.connect() as conn:
        threads = conn.execute(select(s.Thread.__table__)).all()
    for thread in threads:
        messages = load_messages(engine, thread.id)
        for cp in find_checkpoints(thread.id, messages):
            upto = messages[: cp.index + 1]
            if not planner.gate(cp, thread, upto).audit:
                continue
            text = planner.render(cp, thread, upto)
            naive = naive_render(upto)
            sizes.append(tokens(text))
            naive_sizes.append(tokens(naive))
            ratios.append(tokens(text) / max(tokens(naive), 1))
            users_whole &= all(
                m.text.strip()[:2000] in text
                for m in upto
                if is_typed_user(m) and "[REDACTED" not in text
            )
    print(
        json.dumps(
            {
                "prompt_checkpoints": len(sizes),
                "median_prompt_tokens": statistics.median(sizes) if sizes else None,
                "median_naive_tokens": statistics.median(naive_sizes) if naive_sizes else None,
                "median_ratio_to_naive": round(statistics.median(ratios), 3) if ratios else None,
                "ratio_of_medians": round(
                    statistics.median(sizes) / statistics.median(naive_sizes), 3
                )
                if sizes
                else None,
                "typed_user_messages_whole": users_whole,
            }
        )
    )


if __name__ == "__main__":
    sys.exit(main())
