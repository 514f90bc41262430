"""Staleness, freshness, date order and origins read the roles the index's schema declares,
never field or relation names: over real Debian changelog entries (fixtures/changelogs) whose
status role is ``state``, date role ``updated_at`` (RFC 2822 datetimes), superseding relation
``replaced_by`` (old to new) and lineage ``copied_from``, and where a ``status`` field and a
``supersedes`` relation exist and play no role. Every expectation is computed from the
fixture files directly."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

from backends.ingest.schema import RelationRole, RelationSpec, default_schema, load_schema
from race.engine import Engine
from race.receipt import Roles
from race.run.freshness import stale_reasons
from race.run.outcome import Item
from race.run.roles import DEFAULT_ROLES, roles_of
from rsc import EvidenceStatus, GapKind
from tests.changelogs import CHANGELOGS, build, documents, edges, utc_day

AS_OF = "2022-12-31"


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(tmp_path_factory.mktemp("changelogs") / "index")


@pytest.fixture(scope="module")
def changelog_engine(index: Path) -> Engine:
    return Engine.open(index)


def _zlib_plan(freshness: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    ob: dict[str, Any] = {
        "id": "zlib",
        "kind": "seek_support",
        "query": {"text": "zlib"},
        "query_class": "lexical",
        "hard_filters": [{"field": "package", "value": "zlib1g"}],
        "k": 20,
        **extra,
    }
    if freshness is not None:
        ob["freshness"] = freshness
    return {"schema_version": "race.plan/1", "root": "zlib", "obligations": [ob]}


def _expected_stale(doc_ids: list[str], max_age_days: int | None) -> set[str]:
    docs = documents()
    replaced = {src for src, _ in edges("replaced_by")}
    limit = (dt.date.fromisoformat(AS_OF) - dt.timedelta(days=max_age_days)).isoformat() if max_age_days else None
    stale = set()
    for doc in doc_ids:
        front = docs[doc]
        marked = front["state"] in ("superseded", "retracted") or doc in replaced
        if marked or (limit is not None and utc_day(front["updated_at"]) < limit):
            stale.add(doc)
    return stale


def test_the_schema_gives_the_roles_to_other_names() -> None:
    roles = roles_of(load_schema(CHANGELOGS))
    assert roles == Roles(
        status="state",
        date="updated_at",
        authority=None,
        supersedes=(),
        superseded_by=("replaced_by",),
        derived_from=("copied_from",),
    )
    assert roles_of(default_schema()) == DEFAULT_ROLES
    assert DEFAULT_ROLES.supersession() == (("supersedes", "in"),)


@pytest.mark.parametrize("max_age_days", [None, 365])
def test_staleness_reads_the_status_date_and_superseding_roles(
    changelog_engine: Engine, max_age_days: int | None
) -> None:
    freshness: dict[str, Any] = {"as_of": AS_OF}
    if max_age_days is not None:
        freshness["max_age_days"] = max_age_days
    receipt = changelog_engine.run_sync(_zlib_plan(freshness))
    zlib = sorted(d for d, front in documents().items() if front["package"] == "zlib1g")
    found = [e.hits[0].doc_id for e in receipt.evidence]
    assert sorted(found) == zlib
    stale = {e.hits[0].doc_id for e in receipt.evidence if e.status is EvidenceStatus.STALE_EVIDENCE}
    assert stale == _expected_stale(zlib, max_age_days)
    # Stale evidence ranks after every current item.
    statuses = [e.status is EvidenceStatus.STALE_EVIDENCE for e in receipt.evidence]
    assert statuses == sorted(statuses)
    assert receipt.roles is not None and receipt.roles.status == "state"


def test_a_supersedes_relation_and_a_status_field_without_roles_make_nothing_stale(changelog_engine: Engine) -> None:
    receipt = changelog_engine.run_sync(_zlib_plan({"as_of": AS_OF}))
    by_doc = {e.hits[0].doc_id: e for e in receipt.evidence}
    (fixer, fixed) = edges("supersedes")[0]
    archive = [d for d, front in documents().items() if front.get("status") == "superseded"]
    assert archive == ["zlib1g_1:1.2.11.dfsg-2"]
    for doc in (fixer, fixed, *archive):
        assert by_doc[doc].status is not EvidenceStatus.STALE_EVIDENCE, doc
    (stale_gap,) = [g for g in receipt.gaps if g.kind is GapKind.STALE_EVIDENCE]
    assert fixed not in stale_gap.detail and archive[0] not in stale_gap.detail
    assert "zlib1g_1:1.2.11.dfsg-4 is superseded by zlib1g_1:1.2.11.dfsg-4.1" in stale_gap.detail
    assert "zlib1g_1:1.2.11.dfsg-3 is superseded" in stale_gap.detail


def test_a_date_order_reads_the_date_role(changelog_engine: Engine) -> None:
    plan = _zlib_plan()
    plan["operators"] = [{"id": "newest", "op": "refine", "input": "zlib", "order_by": "date_desc"}]
    plan["root"] = "newest"
    receipt = changelog_engine.run_sync(plan)
    docs = documents()
    got = [e.hits[0].doc_id for e in receipt.evidence]
    expected = sorted(got, key=lambda d: email_instant(docs[d]["updated_at"]), reverse=True)
    assert got == expected
    assert receipt.evidence[0].hits[0].metadata["updated_at"] == "2022-11-05T12:24:46Z"


def email_instant(rfc2822: str) -> dt.datetime:
    import email.utils

    return email.utils.parsedate_to_datetime(rfc2822).astimezone(dt.UTC)


def test_origins_follow_the_derived_from_role(changelog_engine: Engine) -> None:
    graph = changelog_engine.adapters["graph"]
    docs = sorted(documents())
    origins = graph.origins(docs)  # type: ignore[attr-defined]
    copied = dict(edges("copied_from"))
    assert origins == {d: copied.get(d, d) for d in docs}
    assert len(set(origins.values())) == len(docs) - len(copied)


def test_a_run_names_non_default_roles_and_replays_them(changelog_engine: Engine, tmp_path: Path) -> None:
    receipt = changelog_engine.run_sync(_zlib_plan({"as_of": AS_OF, "max_age_days": 365}), retain=tmp_path / "kept")
    assert json.loads(receipt.normalized_bytes())["roles"]["superseded_by"] == ["replaced_by"]
    replayed = changelog_engine.replay_sync(receipt, tmp_path / "kept")
    assert replayed.normalized_bytes() == receipt.normalized_bytes()


def test_the_bundled_corpus_receipt_names_no_roles(session_engine: Engine) -> None:
    receipt = session_engine.run_sync(_bundled_plan())
    assert receipt.roles is None
    assert "roles" not in json.loads(receipt.normalized_bytes())


def _bundled_plan() -> dict[str, Any]:
    ob = {"id": "o", "kind": "seek_support", "query": {"text": "SCRAM"}, "query_class": "lexical", "k": 3}
    return {"schema_version": "race.plan/1", "root": "o", "obligations": [ob]}


def test_without_a_superseding_relation_there_is_nothing_to_check() -> None:
    schema = default_schema().model_copy(update={"relations": {"supersedes": RelationSpec(role=RelationRole.NONE)}})
    roles = roles_of(schema)
    assert roles.supersession() == ()
    item = Item("chunk:a#0")
    reasons, gaps = stale_reasons([item], as_of=AS_OF, max_age_days=None, lineage=None, node="o", roles=roles)
    assert reasons == {} and gaps == ()
    _, unchecked = stale_reasons([item], as_of=AS_OF, max_age_days=None, lineage=None, node="o")
    assert [g.kind for g in unchecked] == [GapKind.UNCHECKED_SUPERSESSION]


def test_the_packet_groups_origins_by_the_derived_from_role() -> None:
    from race.evidence.packet import origin_components

    components: dict[str, set[str]] = {}
    for src, dst in edges("copied_from"):
        components.setdefault(dst, {dst}).add(src)
    expected = {doc: min(members) for members in components.values() for doc in members}
    assert origin_components(CHANGELOGS) == expected
    # A relation named like a role but declared without one joins nothing.
    assert not {d for pair in edges("supersedes") for d in pair} & set(origin_components(CHANGELOGS))
