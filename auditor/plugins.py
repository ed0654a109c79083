"""The plugin manager and the one facade the rest of auditor calls hooks through."""

from __future__ import annotations

import importlib.metadata
import os
import sys
import warnings
from dataclasses import dataclass, field
from functools import partial
from typing import Generic, TypeVar

import pluggy

from . import hookspecs
from .audit.observe import Observer
from .errors import PluginError, UnknownName
from .live.delivery import Injector
from .model import LiveHooks, TranscriptFormat

ENTRY_POINT_GROUP = "auditor"
T = TypeVar("T")


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


class Registry(Generic[T]):
    """What the plugins register through one `register_*` hook, by name.

    Each object is checked against its protocol when it is registered, so that a plugin missing
    a method fails at once, with an error naming the plugin, not later in the middle of a run.
    """

    def __init__(self, pm: pluggy.PluginManager, hook: str, kind: str, protocol: type) -> None:
        self.pm, self.hook, self.kind, self.protocol = pm, hook, kind, protocol
        self._found: dict[str, T] | None = None

    def all(self) -> dict[str, T]:
        """Return every registered object by name (the hook is called the first time).

        Each plugin's implementation is called on its own, with a `register` that knows whose
        it is, so that a duplicate or a bad object is blamed on the plugin that registered it.
        """
        if self._found is None:
            found: dict[str, T] = {}
            owners: dict[str, str] = {}

            def register(obj: T, plugin: str) -> None:
                name = self._check(obj, plugin)
                if name in found:
                    raise PluginError(
                        f"Two plugins register the {self.kind} {name!r}: "
                        f"{owners[name]!r} and {plugin!r}. Disable one with "
                        "AUDITOR_DISABLE_PLUGINS."
                    )
                found[name], owners[name] = obj, plugin

            everyone = self.pm.get_plugins()
            # In the order pluggy calls them: the last registered first, tryfirst/trylast kept.
            for impl in reversed(getattr(self.pm.hook, self.hook).get_hookimpls()):
                alone = self.pm.subset_hook_caller(self.hook, everyone - {impl.plugin})
                alone(register=partial(register, plugin=self._plugin_name(impl.plugin_name)))
            self._found = found
        return self._found

    def get(self, name: str) -> T:
        """Return the object called `name`, or raise `UnknownName` listing the valid ones."""
        found = self.all()
        if name not in found:
            raise UnknownName(self.kind, name, list(found))
        return found[name]

    def _check(self, obj: object, plugin: str) -> str:
        """Return `obj`'s name, or raise PluginError when it lacks part of the protocol."""
        attributes = list(getattr(self.protocol, "__annotations__", {}))
        methods = [n for n, v in vars(self.protocol).items() if callable(v) and n[0] != "_"]
        missing = [a for a in attributes if not hasattr(obj, a)]
        missing += [f"{m}()" for m in methods if not callable(getattr(obj, m, None))]
        name = getattr(obj, "name", None)
        if not missing and not (isinstance(name, str) and name):
            missing = ["a name (a non-empty string)"]
        if missing:
            needs = ", ".join(attributes + [f"{m}()" for m in methods])
            article = "an" if self.kind[0] in "aeiou" else "a"
            raise PluginError(
                f"Plugin {plugin!r} registered {article} {self.kind} ({type(obj).__name__}) "
                f"without {', '.join(missing)}: {article} {self.kind} needs {needs} "
                f"(see auditor.api.{self.protocol.__name__})."
            )
        return str(name)

    def _plugin_name(self, name: str) -> str:
        """Return how messages name the plugin pluggy knows as `name`."""
        if name.isdigit():  # registered without a name (`extra`): pluggy names it by its id
            plugin = self.pm.get_plugin(name)
            return f"{type(plugin).__module__}.{type(plugin).__name__}"
        return name


class Plugins:
    """Typed access to the loaded plugins: what they register by name, and their listing.

    The hooks that decide at a checkpoint (signals, gate, format) are called by
    `auditor.audit.checkpoint_plan.CheckpointPlanner`, through this manager's hook relay.
    """

    def __init__(
        self,
        pm: pluggy.PluginManager,
        failures: list[PluginFailure],
        dists: dict[str, tuple[str, str]] | None = None,
    ):
        self.pm = pm
        self.failures = failures
        self.dists = dists or {}
        self._formats = Registry[TranscriptFormat](
            pm, "register_formats", "transcript format", TranscriptFormat
        )
        self._observers = Registry[Observer](pm, "register_observers", "observer", Observer)
        self._injectors = Registry[Injector](pm, "register_injectors", "injector", Injector)

    # -- what plugins register by name ------------------------------------------------------
    def formats(self) -> dict[str, TranscriptFormat]:
        """Return the registered transcript formats by name, in registration order."""
        return self._formats.all()

    def format(self, name: str) -> TranscriptFormat:
        """Return the format called `name`, or raise `UnknownName` listing the valid ones."""
        return self._formats.get(name)

    def observers(self) -> dict[str, Observer]:
        """Return the registered observer backends by name."""
        return self._observers.all()

    def observer(self, name: str) -> Observer:
        """Return the observer called `name`, or raise `UnknownName` listing the valid ones."""
        return self._observers.get(name)

    def injectors(self) -> dict[str, Injector]:
        """Return the registered injectors by name."""
        return self._injectors.all()

    def injector(self, name: str) -> Injector:
        """Return the injector called `name`, or raise `UnknownName` listing the valid ones."""
        return self._injectors.get(name)

    def live_agents(self) -> dict[str, tuple[str, LiveHooks]]:
        """The agents auditor's live hooks serve: agent -> (the format its transcripts are
        read in, its `LiveHooks`), as the formats declare them (`live_hooks`)."""
        out: dict[str, tuple[str, LiveHooks]] = {}
        for name, fmt in self.formats().items():
            hooks = getattr(fmt, "live_hooks", None)
            if isinstance(hooks, LiveHooks):
                out.setdefault(fmt.agent, (name, hooks))
        return out

    def live_agent(self, agent: str) -> tuple[str, LiveHooks]:
        """(format name, `LiveHooks`) of `agent`, or raise `UnknownName` listing the agents."""
        known = self.live_agents()
        if agent not in known:
            raise UnknownName("agent with live hooks", agent, list(known))
        return known[agent]

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
    named: dict[int, tuple[str, str]] = {}
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in disabled or pm.get_plugin(ep.name) is not None:
            continue
        try:
            plugin = ep.load()
            pm.register(plugin, name=ep.name)
        except Exception as exc:  # noqa: BLE001 - a broken plugin must not take the CLI down
            error = f"{type(exc).__name__}: {exc}"
            failures.append(PluginFailure(ep.name, error))
            warnings.warn(
                f"auditor: plugin {ep.name!r} ({ep.value}) failed to load and was skipped: "
                f"{error}. Set AUDITOR_DISABLE_PLUGINS={ep.name} to silence this.",
                stacklevel=2,
            )
            continue
        if ep.dist is not None:
            # Each entry point of a package names the same one; its metadata file is read and
            # parsed at each `metadata` or `version`, twice per plugin otherwise.
            known = named.get(id(ep.dist))
            if known is None:
                meta = ep.dist.metadata
                known = named[id(ep.dist)] = (meta["name"], meta["version"])
            dists[ep.name] = known
    for plugin in extra or []:
        pm.register(plugin)
    pm.check_pending()
    if os.environ.get("AUDITOR_TRACE_HOOKS"):
        pm.trace.root.setwriter(lambda msg: sys.stderr.write(msg))
        pm.enable_tracing()
    return Plugins(pm, failures, dists)
