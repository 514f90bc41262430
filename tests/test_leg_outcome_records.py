"""A leg's items carry the fusion ``Fusion(method="single", node=..., ranks=...)`` makes, byte for
byte, though it is built without validating it again (race.run.obligations.result_outcome)."""

from __future__ import annotations

from planner import ScanNode, scans
from race.engine import Engine
from race.receipt import Fusion
from race.run.obligations import result_outcome


def test_each_item_carries_the_fusion_validation_makes(engine: Engine) -> None:
    with engine:
        plan = {
            "schema_version": "race.plan/1",
            "root": "o",
            "obligations": [
                {
                    "id": "o",
                    "kind": "seek_support",
                    "query": {"text": "broker memory"},
                    "query_class": "lexical",
                    "k": 5,
                }
            ],
        }
        logical = engine.parse(plan)
        explain = engine.plan_sync(plan)
        (node,) = [n for n in scans(explain.physical) if isinstance(n, ScanNode)]
        adapter = engine.adapters[node.request.backend]
        result = engine._portal.call(lambda: adapter.pinned(adapter.generation()).scan(node.request))
    assert result.hits
    outcome = result_outcome(node, logical.obligations[0], result, ())
    label = f"o/{node.rsc}"
    for item, hit in zip(outcome.items, result.hits, strict=True):
        validated = Fusion(method="single", node="o", ranks={label: hit.custody.rank})
        assert item.fusion is not None
        assert item.fusion == validated
        assert item.fusion.model_dump_json() == validated.model_dump_json()
        assert item.fusion.model_fields_set == validated.model_fields_set
        assert list(item.fusion.__dict__) == list(validated.__dict__)
