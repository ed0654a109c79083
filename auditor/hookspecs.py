"""The hooks auditor calls. Plugins implement them with `@auditor.hookimpl` (the same marker as
`auditor.api.hookimpl`); every type named here is importable from `auditor.api`.

Naming: things users choose by name (transcript formats, observers, injectors) are collected
with `register_*(register)` hooks; decisions where one plugin wins are `firstresult` hooks that
return None for "no opinion". Built-in plugins are registered like third-party ones, through
the `auditor` entry-point group, and mark their implementations `trylast=True` so that a user's
plugin wins.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import pluggy

if TYPE_CHECKING:
    from .audit.checkpoints import Checkpoint, GateDecision
    from .audit.observe import Observer
    from .live.delivery import Injector
    from .model import TranscriptFormat
    from .store.signal_rows import Signal
    from .store.threads import StoredMessage, StoredThread

hookspec = pluggy.HookspecMarker("auditor")
hookimpl = pluggy.HookimplMarker("auditor")


@hookspec
def register_formats(register: Callable[[TranscriptFormat], None]) -> None:
    """Register transcript formats.

    Called once when the plugin manager is first used. Call `register(fmt)` once per format;
    `fmt` is an object with the attributes and methods of `TranscriptFormat`:
    `name` (what `--format NAME` selects), `agent`, `appendable`, `detect(path, head)` (cheap:
    looks at the path and the first 64 KiB only) and `parse(path, cursor)` (yields records);
    optionally `vendor`, who made the agent's model ("anthropic", "google", "openai"): its
    threads then get an observer of another vendor (`auditor.audit.observer_choice`).

    Two plugins registering the same name is an error reported by `auditor plugins`.
    """


@hookspec
def register_observers(register: Callable[[Observer], None]) -> None:
    """Register observer backends (the models that judge a checkpoint).

    Called once, the first time a command needs the observers (`auditor run`, `auditor
    observers`, `auditor hook`). Call `register(observer)` once per backend; `observer` has
    the attributes and methods of `Observer`: `name` (what `--observer NAME`
    selects), `default_model`, `check(options)` (returns None when usable, else a one-line
    reason with the fix: missing SDK, key or server) and `async observe(request, options)`
    returning an `ObserveResult`; optionally `concurrency` (calls in flight that suit it, when
    `-j` is not given), `timeout` (seconds per call, when `--timeout` is not given),
    `seconds_per_call` (how long an answer takes, for `hook install`), `context_tokens`
    (the tokens a prompt may take, when the window is small: the thread is rendered to fit),
    and `needs` (an `ObserverNeeds`: its vendor, and the key, login or offline model that makes
    it ready). An observer with `needs` may be chosen for a thread without being named, when
    it is ready and its vendor is not the agent's (see `auditor.audit.observer_choice`); one
    without is used only when named with `--observer`, or as the only one installed.
    """


@hookspec
def compute_signals(
    checkpoint: Checkpoint,
    thread: StoredThread,
    messages: list[StoredMessage],
    config: dict[str, Any],
) -> list[Signal] | None:
    """Compute cheap local signals at a checkpoint: no model, no network.

    Called once per candidate checkpoint by `auditor run` (also `--dry-run`), before the gate,
    and by `auditor prompt` and `auditor show`. The arguments are those of `gate_checkpoint`
    except `config`: the signal options, a dict keyed by signal name (`{"tool-loop":
    {"min_repeats": 4}}`) plus `disabled`, a list of signal names not to compute. Read only
    the options of your own signals and ignore unknown keys.

    Return a list of `Signal` (name, score in [0, 1], evidence: the native ids of the
    messages involved with short excerpts), one per signal that fired, or None or `[]` when
    none did. Every plugin is called and the lists are concatenated; signal names
    should be unique across plugins. Excerpts are redacted by the core, but never put a
    secret in `detail`. Keep it fast: it runs on every checkpoint of every thread.
    """


@hookspec(firstresult=True)
def gate_checkpoint(
    checkpoint: Checkpoint,
    thread: StoredThread,
    messages: list[StoredMessage],
    config: dict[str, Any],
    signals: list[Signal],
) -> GateDecision | None:
    """Decide whether a checkpoint is worth a paid observer call.

    Called once per candidate checkpoint by `auditor run` (and `--dry-run`), after
    `compute_signals`. `checkpoint` is a `Checkpoint` (index, message id, kind, tool calls,
    file edits...), `thread` a `StoredThread` (agent, cwd, native id...), `messages` the
    thread's `StoredMessage` list up to and including the checkpoint's message, `config` the
    gate options (`mode`, `min_tool_calls`, `require_edit`, `projects`, `agents`,
    `audit_on_signals`, `skip_quiet_below_edits`...), `signals` the `Signal`s every plugin
    computed for this checkpoint. A hookimpl may declare only the arguments it uses.

    Return a `GateDecision` (audit or not, and why), or None to leave the decision to the
    next plugin. The first non-None result wins; the built-in gate runs last.
    Not called where the core's loop guard holds the checkpoint back (right after a course
    correction): no gate can audit those. `min_tool_calls` and `require_edit` are None when
    the user left them unset; `gate_policy(config)` gives the values in effect in `mode`.
    """


@hookspec(firstresult=True)
def format_checkpoint(
    checkpoint: Checkpoint,
    thread: StoredThread,
    messages: list[StoredMessage],
    config: dict[str, Any],
) -> str | None:
    """Render the thread up to a checkpoint as the markdown the observer reads.

    Called once per checkpoint that passed the gate by `auditor run` (and `--dry-run`), and
    by `auditor prompt`. Same arguments as `gate_checkpoint` without `signals`; `config`
    carries the formatter options (token budget...). Return the user content of the observer
    call (secrets already redacted), or None to leave it to the next plugin. The first
    non-None result wins; the built-in formatter runs last.
    """


@hookspec
def register_injectors(register: Callable[[Injector], None]) -> None:
    """Register injectors: the ways a correction reaches a running agent.

    Called once when the plugin manager is first used. Call `register(injector)` once per
    injector; `injector` has the attributes and methods of `Injector`: `name`
    (what `--injector NAME` selects), `description` (one line for `auditor inject --help`),
    `live` (True when it can deliver only from inside the agent's own hook, like
    `claude-code`, whose delivery is the Stop hook's output) and
    `deliver(correction, options)`, which delivers one `Correction` and
    returns a short description of the target (a file, a URL), or raises to report a
    failed attempt. `options` holds the injector's settings from the config file's
    `[injectors.NAME]` table and the command line (`url`, `timeout`, `stream`...).

    The core applies the loop guards and records every attempt in the `injections` table; an
    injector only delivers. Two plugins registering the same name is an error.
    """


class CheckpointHooks(Protocol):
    """The decision hooks as the core calls them through the plugin manager's hook relay
    (`pm.hook`), typed: by keyword, with what pluggy gives back (every plugin's non-None
    answer for `compute_signals`, the first one for the `firstresult` hooks). Only
    `auditor.audit.checkpoint_plan.CheckpointPlanner` calls them; a test holds the arguments
    here equal to the hookspecs above."""

    def compute_signals(
        self,
        *,
        checkpoint: Checkpoint,
        thread: StoredThread,
        messages: list[StoredMessage],
        config: dict[str, Any],
    ) -> list[list[Signal]]: ...

    def gate_checkpoint(
        self,
        *,
        checkpoint: Checkpoint,
        thread: StoredThread,
        messages: list[StoredMessage],
        config: dict[str, Any],
        signals: list[Signal],
    ) -> GateDecision | None: ...

    def format_checkpoint(
        self,
        *,
        checkpoint: Checkpoint,
        thread: StoredThread,
        messages: list[StoredMessage],
        config: dict[str, Any],
    ) -> str | None: ...
