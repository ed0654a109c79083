"""Reports over the store: costs, verdicts, agreement between observers, follow-up of corrections.

Every report is one or two SQL aggregations (GROUP BY in SQLite), so it stays fast on a store of
100k threads; Python only prices the grouped token sums and shapes rows. Times are UTC, as
stored. Each function returns a `Report`: ordered columns, rows as dicts, a total row and notes,
which the CLI renders as a table, JSON or CSV. One module per report, `shared` for what they
share; pricing is in `auditor.pricing.model_prices`, the cost rollup in `auditor.store.rollup`, and evaluation on
labels (which calls observers) in `auditor.audit.evaluate`.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .agreement import agreement_report, cohen_kappa, parse_observer
    from .costs import AGENT_COLS, AUDIT_COLS, COST_DIMS, cost_report, week_of
    from .deliveries import DELIVERY_DIMS, delivery_report
    from .followup import followup_report
    from .shared import TIME_DIMS, Report, check_dims, parse_until
    from .verdicts import VERDICT_DIMS, verdict_report

# Each name is imported from its module when first asked for: a cost report on a SQLite store
# must not pay for the reports that import SQLAlchemy (see auditor.store.sql_text).
_HOME = {
    "agreement_report": "agreement",
    "cohen_kappa": "agreement",
    "parse_observer": "agreement",
    "AGENT_COLS": "costs",
    "AUDIT_COLS": "costs",
    "COST_DIMS": "costs",
    "cost_report": "costs",
    "week_of": "costs",
    "DELIVERY_DIMS": "deliveries",
    "delivery_report": "deliveries",
    "followup_report": "followup",
    "TIME_DIMS": "shared",
    "Report": "shared",
    "check_dims": "shared",
    "parse_until": "shared",
    "VERDICT_DIMS": "verdicts",
    "verdict_report": "verdicts",
}


def __getattr__(name: str) -> Any:
    if name in _HOME:
        return getattr(import_module(f".{_HOME[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "AGENT_COLS",
    "AUDIT_COLS",
    "COST_DIMS",
    "DELIVERY_DIMS",
    "TIME_DIMS",
    "VERDICT_DIMS",
    "Report",
    "agreement_report",
    "check_dims",
    "cohen_kappa",
    "cost_report",
    "delivery_report",
    "followup_report",
    "parse_observer",
    "parse_until",
    "verdict_report",
    "week_of",
]
