"""The planner: logical DAG model, RSC matching, the memo of physical alternatives, cost,
and explain. Pure: it sees backends only as RSC data and statistics."""

import logging

from planner.cost import Estimate, Statistics, estimate_scan, selectivity
from planner.explain import render_json, render_text
from planner.logical import (
    PLAN_SCHEMA_VERSION,
    Budget,
    Generations,
    LogicalPlan,
    PlanInput,
    logical_fingerprint,
    normalize,
    parse_plan,
    plan_digest,
    plan_from_dict,
    plan_from_input,
    plan_json_schema,
)
from planner.matching import FilterLoss, Match, check_filter_fields, match, pinned_contracts
from planner.memo import Alternative, Group, Revision
from planner.operators import (
    CascadeOp,
    CorroborateOp,
    FallbackOp,
    FreshenOp,
    Freshness,
    IntersectOp,
    JoinOp,
    Obligation,
    OpposeOp,
    RefineOp,
    RelevanceFloor,
    UnionOp,
)
from planner.optimizer import EXPLAIN_SCHEMA_VERSION, Explain, combined_plan_fingerprint, compile_plan, plan_fingerprint
from planner.physical import (
    RRF,
    EarlyStopVerdict,
    FusionSpec,
    HybridNode,
    OperatorNode,
    PhysicalNode,
    ScanNode,
    UnsatisfiableNode,
    scans,
    walk,
)
from planner.validate import check_graph

# Nothing is printed unless the application configures logging.
logging.getLogger(__name__).addHandler(logging.NullHandler())

__all__ = [
    "EXPLAIN_SCHEMA_VERSION",
    "PLAN_SCHEMA_VERSION",
    "RRF",
    "Alternative",
    "Budget",
    "CascadeOp",
    "CorroborateOp",
    "EarlyStopVerdict",
    "Estimate",
    "Explain",
    "FallbackOp",
    "FilterLoss",
    "FreshenOp",
    "Freshness",
    "FusionSpec",
    "Generations",
    "Group",
    "HybridNode",
    "IntersectOp",
    "JoinOp",
    "LogicalPlan",
    "Match",
    "Obligation",
    "OperatorNode",
    "OpposeOp",
    "PhysicalNode",
    "PlanInput",
    "RefineOp",
    "RelevanceFloor",
    "Revision",
    "ScanNode",
    "Statistics",
    "UnionOp",
    "UnsatisfiableNode",
    "check_filter_fields",
    "check_graph",
    "combined_plan_fingerprint",
    "compile_plan",
    "estimate_scan",
    "logical_fingerprint",
    "match",
    "normalize",
    "parse_plan",
    "pinned_contracts",
    "plan_digest",
    "plan_fingerprint",
    "plan_from_dict",
    "plan_from_input",
    "plan_json_schema",
    "render_json",
    "render_text",
    "scans",
    "selectivity",
    "walk",
]
