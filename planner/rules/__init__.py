"""Rules that make physical alternatives, one module and one function per rule.

The CamelCase rule name each module defines as ``RULE`` is what explain prints next to
every alternative the rule made.
"""

from planner.rules.hybrid_rrf import hybrid_rrf
from planner.rules.implement_operator import implement_operator
from planner.rules.order_cascade_by_cost import order_cascade_by_cost
from planner.rules.push_refine_into_scan import push_refine_into_scan
from planner.rules.scan_contract import scan_contract

LEAF_RULES = (scan_contract, hybrid_rrf)
OPERATOR_RULES = (implement_operator, push_refine_into_scan, order_cascade_by_cost)

__all__ = [
    "LEAF_RULES",
    "OPERATOR_RULES",
    "hybrid_rrf",
    "implement_operator",
    "order_cascade_by_cost",
    "push_refine_into_scan",
    "scan_contract",
]
