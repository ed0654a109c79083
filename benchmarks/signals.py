"""How fast the built-in signals are computed at every checkpoint of the corpus, in CPU time.

The corpus (../shared/corpus, or $AUDITOR_SHARED/corpus) is ingested into a temporary SQLite
store; then `compute` runs on each thread's messages up to each every-inference checkpoint,
as a run does before it asks the observer. Printed: checkpoints, messages handed over in all,
CPU seconds of this process, and checkpoints per CPU second. The test suite checks that every
checkpoint computes without error; how fast is a figure, read here.

    python benchmarks/signals.py
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = Path(os.environ.get("AUDITOR_SHARED", ROOT.parent / "shared")) / "corpus"


def main() -> None:
    from auditor_plugins.signals import compute
    from sqlalchemy import select

    from auditor.audit.checkpoints import find_checkpoints
    from auditor.ingest.ingester import ingest
    from auditor.plugins import get_plugin_manager
    from auditor.store import schema as s
    from auditor.store.db import open_db
    from auditor.store.threads import load_messages

    if not CORPUS.is_dir():
        sys.exit(f"the corpus is not at {CORPUS}: set AUDITOR_SHARED to the folder holding it")
    with tempfile.TemporaryDirectory() as tmp:
        engine = open_db(str(Path(tmp) / "auditor.db"))
        ingest(engine, get_plugin_manager(), [CORPUS])
        with engine.connect() as conn:
            ids = conn.execute(select(s.Thread.id)).scalars().all()
        threads = [(tid, load_messages(engine, tid)) for tid in ids]
        engine.dispose()
    checkpoints = handed = 0
    started = time.process_time()
    for tid, messages in threads:
        for cp in find_checkpoints(tid, messages, "every-inference"):
            compute(messages[: cp.index + 1])
            checkpoints += 1
            handed += cp.index + 1
    cpu = time.process_time() - started
    print(f"{len(threads)} threads, {checkpoints} checkpoints, {handed} messages handed over")
    print(f"{cpu:.2f} CPU s: {checkpoints / cpu:.0f} checkpoints per CPU second")


if __name__ == "__main__":
    main()
