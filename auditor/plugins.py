"""The plugin manager and the one facade the rest of auditor calls hooks through."""

from __future__ import annotations

import importlib.metadata
import os
import sys
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pluggy

from . import hookspecs
from .errors import PluginError, UnknownName
from .threads import StoredThread

if TYPE_CHECKING:
    from .checkpoints import Checkpoint, GateDecision
    from .signals import Signal
    from .threads import StoredMessage

ENTRY_POINT_GROUP = "auditor"


@dataclass
class PluginInfo:
    name: str
    module: str
    dist: str | None = None
    version: str | None = None
    hooks: list[str] = field(default_factory=list)


@dataclass
class PluginFailure:
    name: str
    error: str


def _disabled() -> set[str]:
    raw = os.environ.get("AUDITOR_DISABLE_PLUGINS", "")
    return {part.strip() for part in raw.split(",") if part.strip()}


class Plugins:
    """Typed access to the loaded plugins. The only place that calls `pm.hook.*`."""

    def __init__(
        self,
        pm: pluggy.PluginManager,
        failures: list[PluginFailure],
        dists: dict[str, tuple[str, str]] | None = None,
    ):
        self.pm = pm
        self.failures = failures
        self.dists = dists or {}
        self._formats: dict[str, object] | None = None
        self._observers: dict[str, object] | None = None
        self._injectors: dict[str, object] | None = None

    # -- transcript formats -------------------------------------------------------------
    def formats(self) -> dict[str, object]:
        """Return the registered transcript formats by name, in detection order."""
        if self._formats is None:
            found: dict[str, object] = {}

            def register(fmt: object) -> None:
                name = fmt.name
                if name in found:
                    raise PluginError(f"Two plugins register the transcript format {name!r}.")
                found[name] = fmt

            self.pm.hook.register_formats(register=register)
            self._formats = found
        return self._formats

    def format(self, name: str) -> object:
        """Return the format called `name`, or raise `UnknownName` listing the valid ones."""
        formats = self.formats()
        if name not in formats:
            raise UnknownName("transcript format", name, list(formats))
        return formats[name]

    # -- observers ------------------------------------------------------------------------
    def observers(self) -> dict[str, object]:
        """Return the registered observer backends by name."""
        if self._observers is None:
            found: dict[str, object] = {}

            def register(obs: object) -> None:
                name = obs.name
                if name in found:
                    raise PluginError(f"Two plugins register the observer {name!r}.")
                found[name] = obs

            self.pm.hook.register_observers(register=register)
            self._observers = found
        return self._observers

    def observer(self, name: str) -> object:
        """Return the observer called `name`, or raise `UnknownName` listing the valid ones."""
        observers = self.observers()
        if name not in observers:
            raise UnknownName("observer", name, list(observers))
        return observers[name]

    # -- injectors ------------------------------------------------------------------------
    def injectors(self) -> dict[str, object]:
        """Return the registered injectors by name."""
        if self._injectors is None:
            found: dict[str, object] = {}

            def register(inj: object) -> None:
                name = inj.name
                if name in found:
                    raise PluginError(f"Two plugins register the injector {name!r}.")
                found[name] = inj

            self.pm.hook.register_injectors(register=register)
            self._injectors = found
        return self._injectors

    def injector(self, name: str) -> object:
        """Return the injector called `name`, or raise `UnknownName` listing the valid ones."""
        injectors = self.injectors()
        if name not in injectors:
            raise UnknownName("injector", name, list(injectors))
        return injectors[name]

    # -- decisions ------------------------------------------------------------------------
    def signals(
        self,
        checkpoint: Checkpoint,
        thread: Any,
        messages: list[StoredMessage],
        config: dict[str, Any] | None = None,
    ) -> list[Signal]:
        """Return every plugin's signals for a checkpoint, as one list, strongest first.

        `thread` is a `StoredThread` or a row of the `threads` table (made a `StoredThread`).
        """
        from .signals import Signal, strongest

        found: list[Signal] = []
        results = self.pm.hook.compute_signals(
            checkpoint=checkpoint,
            thread=StoredThread.of(thread),
            messages=messages,
            config=config or {},
        )
        for result in results:
            for sig in result or []:
                if not isinstance(sig, Signal):
                    raise PluginError(
                        f"A compute_signals hook returned {sig!r}; return auditor.signals.Signal objects."
                    )
                found.append(sig)
        return strongest(found)

    def gate(
        self,
        checkpoint: Checkpoint,
        thread: Any,
        messages: list[StoredMessage],
        config: dict[str, Any],
        signals: list[Signal] | None = None,
    ) -> GateDecision:
        """Return the GateDecision for a checkpoint: the core's loop guards, else the winning
        plugin's (see `checkpoints.loop_guard`; no gate plugin can audit what they hold back)."""
        from .checkpoints import loop_guard

        held = loop_guard(checkpoint, config)
        if held is not None:
            return held
        return self.pm.hook.gate_checkpoint(
            checkpoint=checkpoint,
            thread=StoredThread.of(thread),
            messages=messages,
            config=config,
            signals=signals or [],
        )

    def render_checkpoint(
        self,
        checkpoint: Checkpoint,
        thread: Any,
        messages: list[StoredMessage],
        config: dict[str, Any],
    ) -> str:
        """Return the observer's user content for a checkpoint."""
        out = self.pm.hook.format_checkpoint(
            checkpoint=checkpoint,
            thread=StoredThread.of(thread),
            messages=messages,
            config=config,
        )
        if out is None:
            raise PluginError(
                "No formatter plugin rendered the checkpoint; is the built-in 'formatter' plugin disabled?"
            )
        return out

    # -- listing ------------------------------------------------------------------------
    def describe(self) -> list[PluginInfo]:
        """Describe every registered plugin for `auditor plugins`."""
        out = []
        for name, plugin in sorted(self.pm.list_name_plugin(), key=lambda np: np[0] or ""):
            if plugin is None:
                continue
            dist, version = self.dists.get(name, (None, None))
            hooks = sorted(c.name for c in self.pm.get_hookcallers(plugin) or [])
            module = getattr(plugin, "__name__", None) or type(plugin).__module__
            out.append(PluginInfo(name, module, dist, version, hooks))
        return out


def get_plugin_manager(extra: list[object] | None = None) -> Plugins:
    """Load the `auditor` entry points and return the facade.

    A plugin named in `AUDITOR_DISABLE_PLUGINS` (comma-separated entry-point names) is not
    loaded. A plugin that fails to import is skipped with a warning that names it and says how
    to disable it. `extra` plugin objects (tests, embedding code) are registered last.
    """
    pm = pluggy.PluginManager("auditor")
    pm.add_hookspecs(hookspecs)
    disabled = _disabled()
    failures: list[PluginFailure] = []
    dists: dict[str, tuple[str, str]] = {}
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in disabled or pm.get_plugin(ep.name) is not None:
            continue
        try:
            plugin = ep.load()
            pm.register(plugin, name=ep.name)
        except Exception as exc:  # a broken plugin must not take the CLI down
            error = f"{type(exc).__name__}: {exc}"
            failures.append(PluginFailure(ep.name, error))
            warnings.warn(
                f"auditor: plugin {ep.name!r} ({ep.value}) failed to load and was skipped: "
                f"{error}. Set AUDITOR_DISABLE_PLUGINS={ep.name} to silence this.",
                stacklevel=2,
            )
            continue
        if ep.dist is not None:
            dists[ep.name] = (ep.dist.metadata["name"], ep.dist.version)
    for plugin in extra or []:
        pm.register(plugin)
    pm.check_pending()
    if os.environ.get("AUDITOR_TRACE_HOOKS"):
        pm.trace.root.setwriter(lambda msg: sys.stderr.write(msg))
        pm.enable_tracing()
    return Plugins(pm, failures, dists)
