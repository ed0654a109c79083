"""Everything a plugin needs, in one place: `from auditor.api import hookimpl, ObserveResult`.

Plugins (the built-in ones in `auditor_plugins` too) import only from this module; the other
modules of `auditor` may change without notice. A test walks the imports of the built-in
plugins and of `examples/` to keep it so.

- **Hooks**: `hookimpl` marks a hook implementation (also reachable as `auditor.hookimpl`).
- **Transcript formats** (`register_formats`): the `TranscriptFormat` protocol and the records
  a parser yields (`ThreadInfo`, `Message` with its `Block`s, `Usage`, `Problem`, `Notice`), the role
  and source-type constants, `Cursor`, and the readers `read_jsonl` (JSONL from a cursor),
  `read_document` (a whole JSON file), `read_lines` (text lines from a cursor, with their
  offsets), `each_record` (a parser's reading of each record, a damaged one costing only
  itself) and `parse_time`; `LiveHooks`, which a format declares (`live_hooks`) when
  auditor's live hooks serve the agent that writes it; the markers of Claude Code's user-role
  texts nobody typed (`CLAUDE_CODE_*_PREFIXES`, shared with the live hook).
- **Observers** (`register_observers`): the `Observer` protocol, `ObserveRequest`,
  `ObserveResult`, `ObserverUsage`, the one tool (`TOOL_NAME`, `TOOL_DESCRIPTION`,
  `TOOL_SCHEMA`), `validate` (the core's check of an answer), `ClientCache` and `installed` (whether an SDK
  is there, without importing it); for the
  providers' batch APIs (optional), `BatchObserver` with `BatchItem`, `BatchStatus` and
  `BatchAnswer`.
- **Signals, gate, formatter** (`compute_signals`, `gate_checkpoint`, `format_checkpoint`): the
  hook arguments `Checkpoint`, `StoredThread` (with its `GuidanceText`s) and `StoredMessage`,
  and what the hooks return: `Signal` with its `Evidence`, `GateDecision`; `gate_policy`
  (the busy-turn policy in effect under a run's gate options and mode).
- **Injectors** (`register_injectors`): the `Injector` protocol, `Correction`,
  `CORRECTION_MARKER`, `HeldBack` (the injector's own channel holds a correction back) and
  `SessionSpool` (a live session's spool, where the outbox injector stages corrections).
- **Helpers**: `redact` (secrets out of text), `replace_atomically` (rewrite a file others
  read), the errors `AuditorError` and `UnknownName`.
- **Running auditor from Python** (a plugin's tests): `get_plugin_manager`, `Plugins`,
  `open_db`, `ingest`, `run` and `RunConfig` (imported when first used), `inject_pending`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .atomic_files import replace_atomically
from .audit.checkpoints import (
    END_TURN,
    INFERENCE,
    Checkpoint,
    GateDecision,
    gate_policy,
    is_typed_user,
)
from .audit.observe import (
    TOOL_DESCRIPTION,
    TOOL_NAME,
    TOOL_SCHEMA,
    BatchAnswer,
    BatchItem,
    BatchObserver,
    BatchStatus,
    ClientCache,
    Observer,
    ObserveRequest,
    ObserveResult,
    ObserverNeeds,
    ObserverUsage,
    Verdict,
    installed,
    validate,
)
from .client_texts import (
    CLAUDE_CODE_COMMAND_PREFIXES,
    CLAUDE_CODE_HOOK_FEEDBACK_PREFIXES,
    CLAUDE_CODE_INTERRUPT_PREFIX,
    CLAUDE_CODE_META_PREFIXES,
)
from .errors import AuditorError, UnknownName
from .hookspecs import hookimpl
from .live.delivery import CORRECTION_MARKER, Correction, HeldBack, Injector, inject_pending
from .live.fast_path import SessionSpool
from .model import (
    ASSISTANT,
    BOM,
    SOURCE_AGENT,
    SOURCE_COMMAND,
    SOURCE_COMPACT,
    SOURCE_COURSE_CORRECTION,
    SOURCE_ERROR,
    SOURCE_INTERRUPT,
    SOURCE_META,
    SOURCE_TOOL_RESULT,
    SOURCE_TYPED,
    SYSTEM,
    TOOL,
    USER,
    Block,
    Cursor,
    LiveHooks,
    Message,
    Notice,
    Problem,
    Record,
    Reread,
    ThreadInfo,
    TranscriptFormat,
    Usage,
    parse_time,
)
from .redact import redact
from .store.signal_rows import Evidence, Signal
from .store.threads import GuidanceText, StoredMessage, StoredThread
from .text_cache import text_cache
from .transcript_reading import each_record, read_document, read_jsonl, read_lines

if TYPE_CHECKING:
    from .audit.run import run
    from .audit.run_types import RunConfig
    from .ingest.ingester import ingest
    from .plugins import Plugins, get_plugin_manager
    from .store.db import open_db

# Imported on first use: loading a plugin must not load the whole run machinery.
_LAZY = {
    "get_plugin_manager": "plugins",
    "Plugins": "plugins",
    "open_db": "store.db",
    "ingest": "ingest.ingester",
    "run": "audit.run",
    "RunConfig": "audit.run_types",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"auditor.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'auditor.api' has no attribute {name!r}")


__all__ = [
    "ASSISTANT",
    "BOM",
    "CLAUDE_CODE_COMMAND_PREFIXES",
    "CLAUDE_CODE_HOOK_FEEDBACK_PREFIXES",
    "CLAUDE_CODE_INTERRUPT_PREFIX",
    "CLAUDE_CODE_META_PREFIXES",
    "CORRECTION_MARKER",
    "END_TURN",
    "INFERENCE",
    "SOURCE_AGENT",
    "SOURCE_COMMAND",
    "SOURCE_COMPACT",
    "SOURCE_COURSE_CORRECTION",
    "SOURCE_ERROR",
    "SOURCE_INTERRUPT",
    "SOURCE_META",
    "SOURCE_TOOL_RESULT",
    "SOURCE_TYPED",
    "SYSTEM",
    "TOOL",
    "TOOL_DESCRIPTION",
    "TOOL_NAME",
    "TOOL_SCHEMA",
    "USER",
    "AuditorError",
    "Block",
    "Checkpoint",
    "BatchAnswer",
    "BatchItem",
    "BatchObserver",
    "BatchStatus",
    "ClientCache",
    "Correction",
    "HeldBack",
    "Cursor",
    "LiveHooks",
    "Evidence",
    "GateDecision",
    "GuidanceText",
    "Injector",
    "Message",
    "ObserveRequest",
    "ObserveResult",
    "Observer",
    "ObserverNeeds",
    "ObserverUsage",
    "Notice",
    "Plugins",
    "Problem",
    "Record",
    "Reread",
    "RunConfig",
    "Signal",
    "StoredMessage",
    "StoredThread",
    "ThreadInfo",
    "TranscriptFormat",
    "UnknownName",
    "Usage",
    "Verdict",
    "gate_policy",
    "get_plugin_manager",
    "hookimpl",
    "ingest",
    "inject_pending",
    "SessionSpool",
    "installed",
    "is_typed_user",
    "open_db",
    "parse_time",
    "each_record",
    "read_document",
    "read_jsonl",
    "read_lines",
    "redact",
    "text_cache",
    "replace_atomically",
    "run",
    "validate",
]
