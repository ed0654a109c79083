"""Reports over the store: costs, verdicts, agreement between observers, what became of
corrections and what followed them.

Every report is one or two SQL aggregations (GROUP BY in SQLite), so it stays fast on a store of
100k threads; Python only prices the grouped token sums and shapes rows. Times are UTC, as
stored. Each function returns a `Report`: ordered columns, rows as dicts, a total row and notes,
which the CLI renders as a table, JSON or CSV. One module per report, `shared` for what they
share; pricing is in `auditor.pricing.model_prices`, the cost rollup in `auditor.store.rollup`, and evaluation on
labels (which calls observers) in `auditor.audit.evaluate`.
"""

from .agreement import agreement_report, cohen_kappa, parse_observer
from .costs import AGENT_COLS, AUDIT_COLS, COST_DIMS, cost_report, week_of
from .deliveries import DELIVERY_DIMS, delivery_report
from .followup import followup_report
from .shared import TIME_DIMS, Report, check_dims, parse_until
from .verdicts import VERDICT_DIMS, verdict_report

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
