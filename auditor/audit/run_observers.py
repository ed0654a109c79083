"""Which observer audits which threads of a run: per agent, one from another vendor
(`auditor.audit.observer_choice`), and the summary of a run made of one audit per observer."""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any

from sqlalchemy import Engine, select

from ..plugins import Plugins
from ..store import schema as s
from .observer_choice import Choice, Readiness, named, plan_agents
from .run_types import RunConfig, RunSummary


@dataclass
class ObserverPlan:
    """The audits of a run: each observer with the config of its threads; the agents refused."""

    audits: list[tuple[Choice, RunConfig]] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)


def agents_of(engine: Engine, config: RunConfig) -> list[str]:
    """The agents of the threads a run looks at."""
    from ..store.threads import find_thread

    if config.threads:
        return sorted({find_thread(engine, t).agent for t in config.threads})
    t = s.Thread.__table__
    q = select(t.c.agent).distinct()
    if config.since:
        from datetime import UTC

        q = q.where(t.c.ended_at >= config.since.astimezone(UTC).replace(tzinfo=None))
    with engine.connect() as conn:
        return sorted(conn.scalars(q))


def observer_plan(engine: Engine, plugins: Plugins, config: RunConfig) -> ObserverPlan:
    """One audit per observer: the named one for every thread, else each agent's own choice."""
    chosen = named(plugins, config.observer)
    if chosen is not None:
        return ObserverPlan([(chosen, config)])
    agents = agents_of(engine, config)
    if config.agents is not None:
        agents = [a for a in agents if a in config.agents]
    ready = Readiness(plugins, config.observer_options)
    if not agents:  # nothing to audit: the choice for any agent, to say what would audit
        from .observer_choice import choose

        return ObserverPlan([(choose(plugins, [], config.allow_same_vendor, ready), config)])
    groups, refused = plan_agents(plugins, agents, config.allow_same_vendor, ready)
    if len(groups) == 1 and not refused:
        ((choice, _),) = groups.items()
        return ObserverPlan([(choice, config)])
    audits = [(choice, replace(config, agents=list(who))) for choice, who in groups.items()]
    return ObserverPlan(audits, refused)


def merge(summaries: list[RunSummary], refused: dict[str, str]) -> RunSummary:
    """One summary of the audits of a run: counts added up, lists joined, the observers named."""
    if not summaries:  # every agent refused: nothing was audited
        out = RunSummary(None, "", "", status="refused")
    elif len(summaries) == 1:
        out = summaries[0]
    else:
        out = RunSummary(
            summaries[0].run_id if summaries else None,
            ", ".join(x.observer for x in summaries),
            ", ".join(x.model for x in summaries),
        )
        for f in fields(RunSummary):
            values = [getattr(x, f.name) for x in summaries]
            if f.name in ("run_id", "observer", "model") or not values:
                continue
            setattr(out, f.name, _combine(f.name, values))
        out.run_ids = [x.run_id for x in summaries if x.run_id is not None]
    out.refused.update(refused)  # said when the run began (`run` announces each)
    return out


def _combine(name: str, values: list[Any]) -> Any:
    first = values[0]
    if name == "status":
        return next((v for v in values if v != "done"), "done")
    if name == "planning":
        return any(values)
    if isinstance(first, bool):
        return any(values)
    known = [v for v in values if v is not None]
    if known and all(isinstance(v, (int, float)) for v in known):
        # Optional figures (a dry run's estimates) may be None for one observer and a number
        # for another. The audits run one after another, so times and costs add up; what one
        # call takes, or how many run at once, is the largest of them.
        if name in ("est_call_seconds", "est_at_once"):
            return max(known)
        return sum(known)
    if isinstance(first, list):
        return [item for v in values for item in v]
    if isinstance(first, dict):
        merged: dict[str, Any] = {}
        for v in values:
            for k, n in v.items():
                merged[k] = merged.get(k, 0) + n if isinstance(n, int) else n
        return merged
    if isinstance(first, str) or first is None:
        texts = [v for v in values if v]
        return "; ".join(texts) if texts else None
    return first
