"""An obligation's ``collapse: content | origin`` over real Debian changelog entries
(fixtures/changelogs), where 13 sibling libxcb packages ship one changelog: the BM25 top 10
of a query are copies of one entry. Collapsed, each kept item is a distinct text (or
origin), every copy is listed in the item kept for it, and nothing found is lost; the
reference is the uncollapsed ranking read to the end and the fixture files themselves."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from planner import render_text
from race.cli.main import main
from race.engine import Engine
from rsc import GapKind, GapSeverity
from tests.changelogs import CHANGELOGS, build, documents, edges
from tests.conftest import load_plan

QUERY = "New upstream release symbols Updated"


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(tmp_path_factory.mktemp("collapse") / "index")


@pytest.fixture(scope="module")
def collapse_engine(index: Path) -> Engine:
    return Engine.open(index)


def _plan(collapse: str | None = None, k: int = 10, query: str = QUERY) -> dict[str, Any]:
    ob: dict[str, Any] = {"id": "entries", "kind": "seek_support", "query": {"text": query}}
    ob |= {"query_class": "lexical", "k": k}
    if collapse is not None:
        ob["collapse"] = collapse
    return {"schema_version": "race.plan/1", "root": "entries", "obligations": [ob]}


def _sha(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def test_top_ten_of_copies_collapse_to_distinct_texts(collapse_engine: Engine) -> None:
    plain = collapse_engine.run_sync(_plan())
    texts = [e.hits[0].text for e in plain.evidence]
    assert len(texts) == 10 and len(set(texts)) == 1, "the fixture's point: the top 10 are one entry's copies"
    every = collapse_engine.run_sync(_plan(k=1000)).evidence  # the whole ranking, uncollapsed
    groups: dict[str, list[tuple[int, str]]] = {}
    for rank, e in enumerate(every, start=1):
        groups.setdefault(_sha(e.hits[0].text), []).append((rank, e.key))
    receipt = collapse_engine.run_sync(_plan("content"))
    kept = receipt.evidence
    assert len(kept) == min(10, len(groups))
    assert len({_sha(e.hits[0].text) for e in kept}) == len(kept)
    # The groups are the first ones of the full ranking, each kept by its best-ranked member.
    first = sorted(groups.values())[: len(kept)]
    assert [e.key for e in kept] == [members[0][1] for members in first]
    for e, members in zip(kept, first, strict=True):
        copies = [(c.rank, c.key) for c in e.collapsed.copies] if e.collapsed else []
        assert [key for _, key in copies] == [key for _, key in members[1:]]
        if e.collapsed:
            assert e.collapsed.by == "content" and e.collapsed.group == _sha(e.hits[0].text)
    found = {e.key for e in kept} | {c.key for e in kept for c in (e.collapsed.copies if e.collapsed else ())}
    assert found == {key for members in first for _, key in members}


def test_copies_carry_their_custody(collapse_engine: Engine) -> None:
    (top, *_) = collapse_engine.run_sync(_plan("content")).evidence
    assert top.collapsed is not None
    docs = documents()
    for copy in top.collapsed.copies:
        front = docs[copy.doc_id]
        path = Path(str(copy.source_path))
        assert (CHANGELOGS / path if not path.is_absolute() else path).resolve() == front["path"].resolve()
        lines = front["path"].read_text(encoding="utf-8").splitlines()
        assert copy.line_start is not None and copy.line_end is not None
        quoted = "\n".join(lines[copy.line_start - 1 : copy.line_end])
        assert quoted.strip() == top.hits[0].text.strip()
        assert copy.source_hash == "sha256:" + hashlib.sha256(front["path"].read_bytes()).hexdigest()


def test_origin_collapses_by_lineage_not_by_text(collapse_engine: Engine) -> None:
    receipt = collapse_engine.run_sync(_plan("origin"))
    copied = dict(edges("copied_from"))
    origins = [copied.get(e.hits[0].doc_id, e.hits[0].doc_id) for e in receipt.evidence]
    assert len(set(origins)) == len(origins)
    for e in receipt.evidence:
        members = [e.hits[0].doc_id, *(c.doc_id for c in (e.collapsed.copies if e.collapsed else ()))]
        assert {copied.get(d, d) for d in members} == {e.origin}
    # bzip2's four packages share a text but no lineage edge: one item by content, four by origin.
    bzip = [e for e in receipt.evidence if e.hits[0].doc_id.endswith("_1.0.8-5") and "bz" in e.hits[0].doc_id]
    assert len(bzip) == 4
    by_text = collapse_engine.run_sync(_plan("content")).evidence
    assert len([e for e in by_text if e.hits[0].doc_id.endswith("_1.0.8-5") and "bz" in e.hits[0].doc_id]) == 1


def test_collapse_is_the_same_bytes_whatever_the_order(collapse_engine: Engine, tmp_path: Path) -> None:
    plan = _plan("content")
    reordered = json.loads(json.dumps(plan, sort_keys=True))
    reordered["obligations"][0] = dict(reversed(list(reordered["obligations"][0].items())))
    first = collapse_engine.run_sync(plan).normalized_bytes()
    assert Engine(collapse_engine.adapters).run_sync(reordered).normalized_bytes() == first
    # The corpus's files in another order (copied under reversed names) give the same evidence.
    corpus = tmp_path / "corpus"
    shutil.copytree(CHANGELOGS, corpus)
    for i, path in enumerate(sorted((corpus / "entries").rglob("*.md"), reverse=True)):
        path.rename(path.with_name(f"{i:03d}-{path.name}"))
    other = Engine.open(build(tmp_path / "index", corpus)).run_sync(plan)
    evidence = [(e.key, e.collapsed.model_dump() if e.collapsed else None) for e in other.evidence]
    expected = [
        (e.key, e.collapsed.model_dump() if e.collapsed else None) for e in collapse_engine.run_sync(plan).evidence
    ]
    assert [(k, _paths_out(c)) for k, c in evidence] == [(k, _paths_out(c)) for k, c in expected]


def _paths_out(collapsed: dict[str, Any] | None) -> Any:
    if collapsed is None:
        return None
    return {**collapsed, "copies": [{k: v for k, v in c.items() if k != "source_path"} for c in collapsed["copies"]]}


def test_origin_without_the_graph_is_a_named_caveat(collapse_engine: Engine) -> None:
    without = Engine({n: a for n, a in collapse_engine.adapters.items() if n != "graph"})
    receipt = without.run_sync(_plan("origin"))
    plain = without.run_sync(_plan())
    assert [e.key for e in receipt.evidence] == [e.key for e in plain.evidence]
    assert all(e.collapsed is None for e in receipt.evidence)
    (ob,) = receipt.obligations
    caveats = [g for g in ob.gaps if g.kind is GapKind.WEAK_SOURCE]
    assert len(caveats) == 1 and caveats[0].severity is GapSeverity.CAVEAT
    assert "collapse: origin" in caveats[0].detail and "graph backend is not open" in caveats[0].detail


def test_explain_shows_the_collapse(collapse_engine: Engine) -> None:
    text = render_text(collapse_engine.plan_sync(_plan("content")))
    assert "G1 entries: obligation seek_support lexical collapse=content" in text
    assert "collapse" not in render_text(collapse_engine.plan_sync(_plan()))


def test_an_unknown_collapse_is_bad_input(index: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = _plan()
    bad["obligations"][0]["collapse"] = "dedupe"
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(bad))
    assert main(["run", str(path), "--index", str(index)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "node 'entries'" in err[0] and "collapse" in err[0], err


def test_a_score_sum_union_collapses_its_ranking_as_its_inputs_do(session_engine: Engine) -> None:
    """A score-sum union ranks its inputs' scans again from their hits: where the inputs
    collapse by origin, so does the union's fused top k (bundled corpus, early_stop_union)."""
    plain = session_engine.run_sync(load_plan("early_stop_union.json"))
    plan = load_plan("early_stop_union.json")
    for ob in plan["obligations"]:
        ob["collapse"] = "origin"
    got = session_engine.run_sync(plan)
    graph = session_engine.adapters["graph"]
    origins = graph.origins(sorted({e.hits[0].doc_id for e in plain.evidence}))  # type: ignore[attr-defined]
    first: dict[str, list[str]] = {}
    for e in plain.evidence:
        first.setdefault(origins[e.hits[0].doc_id], []).append(e.key)
    assert [e.key for e in got.evidence] == [members[0] for members in first.values()]
    assert len(got.evidence) < len(plain.evidence), "the fixture's point: the top k shares origins"
    for e in got.evidence:
        listed = [c.key for c in e.collapsed.copies] if e.collapsed else []
        assert listed == first[str(e.origin)][1:]
