"""OpenAI Codex CLI transcripts: two formats, registered here.

* ``codex`` (`codex_rollout`): the rollout JSONL the CLI writes to
  ``~/.codex/sessions/YYYY/MM/DD/rollout-<ts>-<uuid>.jsonl``.
* ``codex-exec`` (`codex_exec`): what ``codex exec --json`` prints.

Shell commands and patches are read for file edits by `shell_edits`, like every agent's.
"""

from __future__ import annotations

from auditor.api import hookimpl

from .codex_exec import CodexExecFormat
from .codex_rollout import CodexFormat

__all__ = ["CodexExecFormat", "CodexFormat", "register_formats"]


@hookimpl(trylast=True)
def register_formats(register) -> None:
    register(CodexFormat())
    register(CodexExecFormat())
