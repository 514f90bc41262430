"""Determinism and fusion edge cases of the executor (I5, I10, I11), and one error at the edge."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

import race.run.executor
from race.cli.main import main
from race.engine import Engine
from race.receipt import Fusion
from race.run.fusion import rrf
from race.run.operators import OPERATORS
from rsc import InputError, OperatorKind
from tests.conftest import FIXTURES

SHOWCASE = FIXTURES / "plans" / "showcase.json"


def _rankings(ranks_a: list[int], ranks_b: list[int]) -> list[tuple[str, list[str]]]:
    """Legs where key ``a`` has rank ``ranks_a[i]`` and key ``b`` rank ``ranks_b[i]`` in leg i."""
    legs = []
    for i, (ra, rb) in enumerate(zip(ranks_a, ranks_b, strict=True)):
        keys = [f"filler-{i}-{j}" for j in range(max(ra, rb))]
        keys[ra - 1], keys[rb - 1] = "a", "b"
        legs.append((f"leg{i}", keys))
    return legs


def test_equal_rank_multisets_tie_exactly_and_the_key_decides() -> None:
    rng = random.Random(11)
    tried = 0
    while tried < 300:
        ranks = [rng.randint(1, 80) for _ in range(rng.randint(4, 9))]
        shuffled = ranks[:]
        rng.shuffle(shuffled)
        if any(x == y for x, y in zip(ranks, shuffled, strict=True)):
            continue
        tried += 1
        order, scores, _ = rrf(_rankings(shuffled, ranks))
        assert scores["a"] == scores["b"], (ranks, shuffled)
        assert order.index("a") < order.index("b")


def test_an_obligation_k_bounds_a_hybrid_answer(index_dir: Path) -> None:
    receipt = Engine.open(index_dir).run_sync(SHOWCASE)
    plan = Engine.parse(SHOWCASE)
    for ob in receipt.obligations:
        assert ob.evidence_count <= next(o.k for o in plan.obligations if o.id == ob.id), ob.id
    hybrid = next(o for o in receipt.obligations if o.id == "tls-defeater")
    assert len(hybrid.served_by) == 2 and hybrid.evidence_count == 5


def test_every_model_call_is_counted_once(index_dir: Path) -> None:
    """A score-sum union's deeper and random reads re-use each obligation's query embedding."""
    receipt = Engine.open(index_dir).run_sync(FIXTURES / "plans" / "early_stop_union.json")
    planned = sum(o.model_calls for o in receipt.obligations)
    assert planned == 3
    assert receipt.operational.model_calls_made == planned
    assert any("#random" in label for label in receipt.operational.legs)


def _levels(fusion: Fusion) -> list[str]:
    return [fusion.node, *(n for inner in fusion.inputs for n in _levels(inner))]


def test_every_fusion_level_is_kept(index_dir: Path) -> None:
    receipt = Engine.open(index_dir).run_sync(SHOWCASE)
    deep = [item for item in receipt.evidence if "tls-defeater" in _levels(item.fusion)]
    assert deep
    for item in deep:
        assert item.fusion.node == Engine.parse(SHOWCASE).root
        hybrid = next(f for f in _walk(item.fusion) if f.node == "tls-defeater")
        assert hybrid.method == "rrf" and hybrid.ranks
        assert all(label.startswith("tls-defeater/") for label in hybrid.ranks)


def _walk(fusion: Fusion) -> list[Fusion]:
    return [fusion, *(f for inner in fusion.inputs for f in _walk(inner))]


def _raising(kind: OperatorKind, exc: Exception) -> dict[Any, Any]:
    async def boom(node: Any, op: Any, ctx: Any) -> Any:
        raise exc

    return {**OPERATORS, kind: boom}


@pytest.mark.anyio
async def test_a_failure_in_a_task_group_reaches_the_caller_as_itself(
    index_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    raising = _raising(OperatorKind.CORROBORATE, InputError("bad", where="x"))
    monkeypatch.setattr(race.run.executor, "OPERATORS", raising)
    with pytest.raises(InputError, match="x: bad"):
        await Engine.open(index_dir).run(SHOWCASE)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_cli_reports_one_line_for_a_grouped_error(
    index_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    raising = _raising(OperatorKind.OPPOSE, InputError("bad", where="node y"))
    monkeypatch.setattr(race.run.executor, "OPERATORS", raising)
    assert main(["run", str(SHOWCASE), "--index", str(index_dir)]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err == "race: error: node y: bad\n"


def test_cli_reports_an_internal_error_in_one_line(
    index_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(race.run.executor, "OPERATORS", _raising(OperatorKind.OPPOSE, ZeroDivisionError("oops")))
    assert main(["run", str(SHOWCASE), "--index", str(index_dir)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("race: internal error: ZeroDivisionError: oops")
    with pytest.raises(ZeroDivisionError):
        main(["--debug", "run", str(SHOWCASE), "--index", str(index_dir)])
