"""Rules that make physical alternatives, one module and one function per rule.

The CamelCase rule name each module defines as ``RULE`` is what explain prints next to
every alternative the rule made.
"""

from planner.rules.hybrid_rrf import hybrid_rrf
from planner.rules.implement_operator import implement_operator
from planner.rules.push_refine_into_scan import push_refine_into_scan
from planner.rules.scan_contract import scan_contract

LEAF_RULES = (scan_contract, hybrid_rrf)
OPERATOR_RULES = (implement_operator, push_refine_into_scan)

__all__ = ["LEAF_RULES", "OPERATOR_RULES", "hybrid_rrf", "implement_operator", "push_refine_into_scan", "scan_contract"]
