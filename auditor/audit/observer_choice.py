"""Which observer audits a thread when none is named: one whose model comes from another vendor
than the agent's, so that the observer does not share the agent's blind spots.

The agent's vendor is the `vendor` its transcript formats declare (Claude Code: anthropic,
Codex: openai, Gemini CLI: google; an agent without one, such as Amp, takes any observer).
The observer's is the `vendor` of its `needs` (an `ObserverNeeds`). Among the observers ready
now, the first in this order whose vendor is not the agent's is chosen:

1. its API key is set (one of `key_env`) and `check()` finds nothing missing: gemini, claude;
2. it is an agent CLI (`login`) that `check()` finds installed and logged in: gemini-cli,
   claude-cli, codex-cli;
3. it runs on this machine (`offline`): the embedded model (Gemma, so Google's vendor);

within each step by `rank` (Google's first: its CLI's Google login has a free tier). Observers
that declare no `needs` (a plugin's) are used only when named, or as the only one installed;
the `local` server observer declares no way to be ready and is used only when named. When the
only ready observers are of the agent's own vendor, its threads are refused with a one-line
reason, unless the user allows it (`--allow-same-vendor`, or `allow_same_vendor = true` under
`[observer]` in the config file): the verdicts then say so (`verdicts.same_vendor`).
`--observer NAME` (or $AUDITOR_OBSERVER) always wins and is not checked against the agent.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

from ..errors import AuditorError
from ..plugins import Plugins
from .observe import ObserverNeeds

VENDOR_NAMES = {"google": "Google", "anthropic": "Anthropic", "openai": "OpenAI"}
ALLOW_HINT = "--allow-same-vendor (or allow_same_vendor = true under [observer] in the config)"


class SameVendorOnly(AuditorError):
    """Only observers of the agent's own vendor are ready, and that is not allowed."""


@dataclass(frozen=True)
class Choice:
    observer: str
    why: str
    same_vendor: bool = False


def vendor_name(vendor: str | None) -> str:
    return VENDOR_NAMES.get(vendor or "", vendor or "an unknown vendor")


def agent_vendor(plugins: Plugins, agent: str | None) -> str | None:
    """The vendor of `agent`'s model, as its transcript formats declare it (None: unknown)."""
    if not agent:
        return None
    for fmt in plugins.formats().values():
        vendor = getattr(fmt, "vendor", None)
        if fmt.agent == agent and vendor:
            return str(vendor)
    return None


def _needs(plugins: Plugins) -> dict[str, ObserverNeeds]:
    return {
        n: need
        for n, o in plugins.observers().items()
        if isinstance(need := getattr(o, "needs", None), ObserverNeeds)
    }


def _key_set(need: ObserverNeeds) -> str | None:
    """The first of the observer's key variables that is set, if any."""
    return next((k for k in need.key_env if os.environ.get(k)), None)


def candidates(plugins: Plugins) -> list[str]:
    """The observers that may be chosen without being named, in the documented order; one
    whose key is not set is left out (it cannot be ready)."""
    found = []
    for name, need in _needs(plugins).items():
        if need.key_env:
            if _key_set(need):
                found.append((0, need.rank, name))
        elif need.login:
            found.append((1, need.rank, name))
        elif need.offline:
            found.append((2, need.rank, name))
    return [name for *_, name in sorted(found)]


class Readiness:
    """`check()` of each observer, asked once (a CLI's login check starts a process)."""

    def __init__(self, plugins: Plugins, options: dict | None = None):
        self.plugins, self.options = plugins, options or {}
        self._known: dict[str, str | None] = {}

    def problem(self, name: str) -> str | None:
        if name not in self._known:
            try:
                self._known[name] = self.plugins.observer(name).check(dict(self.options))
            except Exception as exc:  # noqa: BLE001 - a backend's check must not take the choice down
                self._known[name] = f"{type(exc).__name__}: {exc}"
        return self._known[name]


def _why(need: ObserverNeeds, name: str) -> str:
    if key := _key_set(need):
        return f"{key} is set"
    if need.login:
        return f"{name} is installed and logged in"
    return f"no API key is set; {need.caveat or f'{name} runs offline'}"


def choose(
    plugins: Plugins,
    agents: Iterable[str | None],
    allow_same_vendor: bool = False,
    ready: Readiness | None = None,
) -> Choice:
    """Choose the observer for threads of `agents`: the first ready one whose vendor is none of
    theirs. Raise SameVendorOnly when only their own vendors' are ready and that is not allowed;
    when none is ready at all, return an offline one, else the first of the order (its check
    then says what to do).
    """
    ready = ready or Readiness(plugins)
    who = sorted({a for a in agents if a})
    vendors = {v for v in (agent_vendor(plugins, a) for a in who) if v}
    needs = _needs(plugins)
    order = candidates(plugins)
    for name in order:  # another vendor's first: the agent's own are asked only if needed
        if needs[name].vendor not in vendors and ready.problem(name) is None:
            why = _why(needs[name], name)
            return Choice(name, f"{why}; another vendor than the agent's" if vendors else why)
    own = [n for n in order if needs[n].vendor in vendors]
    same = next((n for n in own if ready.problem(n) is None), None)
    if same is not None:
        vendor = vendor_name(needs[same].vendor)
        if allow_same_vendor:
            why = f"{_why(needs[same], same)}; {vendor}'s like the agent, allowed"
            return Choice(same, why, True)
        raise SameVendorOnly(
            f"{', '.join(who)} threads not audited: the only observer ready, {same}, runs "
            f"{vendor}'s model like the agent; make another vendor's ready (`auditor "
            f"observers`) or pass {ALLOW_HINT}."
        )
    available = plugins.observers()
    if not available:
        raise AuditorError(
            "No observer backend is installed. Install one: pip install 'auditor[gemini]'"
        )
    others = sorted(
        (need.rank, n) for n, need in needs.items() if need.offline and need.vendor not in vendors
    )
    if others:  # none is ready: the offline one, whose check says what to install
        name = others[0][1]
        return Choice(name, _why(needs[name], name))
    first = sorted(available)[0]
    return Choice(first, "the only installed observer")


def named(plugins: Plugins, name: str | None) -> Choice | None:
    """The observer the user named (--observer, else $AUDITOR_OBSERVER), or None."""
    if name:
        plugins.observer(name)
        return Choice(name, "chosen with --observer")
    configured = os.environ.get("AUDITOR_OBSERVER")
    if configured:
        plugins.observer(configured)
        return Choice(configured, "from AUDITOR_OBSERVER")
    return None


def choose_for(
    plugins: Plugins,
    name: str | None,
    agents: list[str] | None = None,
    allow_same_vendor: bool = False,
) -> Choice:
    """The observer for threads of `agents` and why: the one named, else the first ready one of
    another vendor than theirs."""
    return named(plugins, name) or choose(plugins, agents or [], allow_same_vendor)


def plan_agents(
    plugins: Plugins,
    agents: Iterable[str],
    allow_same_vendor: bool,
    ready: Readiness | None = None,
) -> tuple[dict[Choice, list[str]], dict[str, str]]:
    """Choose per agent: the agents each chosen observer audits, and the refused agents with
    the reason."""
    ready = ready or Readiness(plugins)
    # One audit per observer: agents that get the same observer share it, even where the why
    # differs (an agent of no known vendor is not told "another vendor than the agent's").
    by_observer: dict[tuple[str, bool], tuple[Choice, list[str]]] = {}
    refused: dict[str, str] = {}
    for agent in sorted(set(agents)):
        try:
            choice = choose(plugins, [agent], allow_same_vendor, ready)
        except SameVendorOnly as exc:
            refused[agent] = str(exc)
            continue
        key = (choice.observer, choice.same_vendor)
        kept, who = by_observer.setdefault(key, (choice, []))
        if len(choice.why) > len(kept.why):
            by_observer[key] = (choice, who)
        who.append(agent)
    return {choice: who for choice, who in by_observer.values()}, refused
