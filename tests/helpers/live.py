"""Helpers for the live re-injection tests: run the real `auditor` CLI as a subprocess on real
transcripts copied from the corpus, with the observer a local stub in the provider's wire format."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from sqlalchemy import select

# A real Claude Code session that ends a turn claiming a CLAUDE.md it was not allowed to write.
CC_SESSION = "claude-code/d-kimuson-claude-code-viewer/sample-project/1af7fc5e-8455-4414-9ccd-011d40f70b2a.jsonl"
# A real Codex rollout; its turn ends at line 221 after 30 tool calls and an edit.
CODEX_ROLLOUT = (
    "codex/aneesh199608-dslint/sessions/2025/12/09/"
    "rollout-2025-12-09T14-27-29-019b0254-78dd-7ea3-9224-5ae646e225ea.jsonl"
)
CODEX_TURN_END = 222  # lines: the final agent message and its token count
CORRECTION = (
    "You did not write CLAUDE.md: the Write call was denied. Ask for permission, then write it."
)


def auditor_argv() -> list[str]:
    """The installed `auditor` script beside this Python, else the same entry point via -c."""
    script = Path(sys.executable).parent / "auditor"
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-c", "from auditor.cli import main; main()"]


def run_cli(
    *args: str, stdin: str = "", env: dict | None = None, timeout: float = 60
) -> subprocess.CompletedProcess:
    full = {**os.environ, **(env or {})}
    return subprocess.run(
        auditor_argv() + list(args),
        input=stdin,
        capture_output=True,
        text=True,
        env=full,
        timeout=timeout,
        check=False,
    )


def copy_lines(src: Path, dest: Path, lines: int | None = None) -> Path:
    """Copy the first `lines` lines of `src` (all when None) to `dest`, writable."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    if lines is None:
        shutil.copyfile(src, dest)
    else:
        with open(src, "rb") as fh:
            head = b"".join(line for _, line in zip(range(lines), fh))
        dest.write_bytes(head)
    os.chmod(dest, 0o644)
    return dest


def append_lines(path: Path, src: Path, start: int, stop: int) -> None:
    """Append lines [start, stop) (0-based) of `src` to `path`."""
    with open(src, "rb") as fh:
        chunk = [line for i, line in enumerate(fh) if start <= i < stop]
    with open(path, "ab") as out:
        out.writelines(chunk)


def last_record(path: Path) -> dict:
    return json.loads(path.read_bytes().splitlines()[-1])


def rows(engine, table, *where):
    with engine.connect() as conn:
        return conn.execute(select(table.__table__).where(*where).order_by(table.id)).all()
