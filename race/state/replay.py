"""Exact replay (I8): the recorded physical plan re-executed from retained artifacts only.

``ReplaySession.open`` reads and verifies every artifact a receipt lists before anything
runs: a missing file is ``ArtifactMissing``, a file whose sha256 is not its name (one
altered byte) is ``ArtifactTampered``. The executor then runs the recorded explain with
``ReplayingAdapter``s in place of the backends (no network, no index, no result cache);
remote bodies go through the same ``decode_exchange`` the live run used. The replayed
receipt must have the same normalized bytes as the recorded one, or replay fails closed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from backends.remote import decode_exchange
from planner import Explain, LogicalPlan, combined_plan_fingerprint, logical_fingerprint
from race.receipt import RECEIPT_SCHEMA_VERSION, Receipt
from race.receipt import Lineage as ReceiptLineage
from race.state.artifacts import (
    ARTIFACT_SCHEMA_VERSION,
    artifact_path,
    decode_body,
    lookup_key,
    response_exchange,
    sha256_digest,
)
from race.state.retain import Delegate
from rsc import (
    ArtifactMissing,
    ArtifactTampered,
    BackendError,
    BackendTimeout,
    BackendUnavailable,
    InputError,
    RaceError,
    ReplayError,
    ScanRequest,
    ScanResult,
    SnapshotMoved,
    canonical_json,
    fingerprint,
    first_validation_error,
)

_ERRORS: dict[str, type[RaceError]] = {
    "BackendError": BackendError,
    "BackendTimeout": BackendTimeout,
    "BackendUnavailable": BackendUnavailable,
    "SnapshotMoved": SnapshotMoved,
}


class ReplayedDeadline(TimeoutError):
    """A leg the live run lost to a deadline. It carries the live verdict (leg deadline or
    plan deadline) so that replay does not re-measure time."""

    def __init__(self, *, plan_bound: bool) -> None:
        super().__init__("replayed deadline")
        self.plan_bound = plan_bound


def load_receipt(path: Path) -> Receipt:
    try:
        data = path.read_bytes()
        return Receipt.model_validate_json(data)
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", where=str(path)) from exc
    except ValidationError as exc:
        other = _other_document(data)
        if other is not None:
            raise InputError(f"{other}: give the receipt JSON of `race run --json`", where=str(path)) from None
        raise InputError(f"not a receipt: {first_validation_error(exc, Receipt)}", where=str(path)) from exc


def _other_document(data: bytes) -> str | None:
    """Why the bytes are another document of RACE than a receipt (a plan, say), or ``None``."""
    from rsc.suggest import DOCUMENTS, schema_version_error

    try:
        raw = json.loads(data)
    except ValueError:
        return None
    if not isinstance(raw, dict) or raw.get("schema_version") not in set(DOCUMENTS) - {RECEIPT_SCHEMA_VERSION}:
        return None
    return schema_version_error(raw, RECEIPT_SCHEMA_VERSION)


def load_artifact(root: Path, digest: str) -> dict[str, Any]:
    """One verified artifact: present, its bytes hashing to its name, parseable."""
    path = artifact_path(root, digest)
    try:
        data = path.read_bytes()
    except FileNotFoundError as exc:
        raise ArtifactMissing(f"retained artifact {digest} is missing", where=str(path)) from exc
    except OSError as exc:
        raise ArtifactMissing(f"retained artifact {digest} cannot be read: {exc.strerror}", where=str(path)) from exc
    actual = sha256_digest(data)
    if actual != digest:
        raise ArtifactTampered(f"content hashes to {actual}, not {digest}: the artifact was altered", where=str(path))
    try:
        content = json.loads(data)
    except ValueError as exc:
        raise ArtifactTampered(f"artifact {digest} is not JSON", where=str(path)) from exc
    if not isinstance(content, dict) or content.get("schema_version") != ARTIFACT_SCHEMA_VERSION:
        raise ArtifactTampered(f"artifact {digest} is not a {ARTIFACT_SCHEMA_VERSION} document", where=str(path))
    return content


class ReplayingAdapter(Delegate):
    """Answers each leg from its retained artifact, through the live decoding path."""

    def __init__(self, backend: str, session: ReplaySession) -> None:
        super().__init__(backend)
        self.session = session

    async def scan(self, request: ScanRequest) -> ScanResult:
        try:
            return self._answer(request)
        except ReplayError as exc:
            # The executor turns any RaceError into a gap; replay must fail instead.
            self.session.failure = self.session.failure or exc
            raise

    def _answer(self, request: ScanRequest) -> ScanResult:
        key = fingerprint(request)
        ref = f"{request.rsc_id}@{request.rsc_version}"
        found = self.session.scans.get(key)
        if found is None:
            raise ArtifactMissing(
                f"no retained response for leg {request.obligation}/{ref} (request {key})", where=str(self.session.root)
            )
        digest, art = found
        self.session.used.add(digest)
        where = str(artifact_path(self.session.root, digest))
        outcome = art.get("outcome")
        if outcome == "response":
            try:
                if art["transport"] == "http":
                    exchange = response_exchange(art["response"])
                    generation = self.session.generations.get(self.backend)
                    return decode_exchange(request, exchange, expected_generation=generation)
                return ScanResult.model_validate_json(decode_body(art["response"]))
            except (KeyError, TypeError, ValueError) as exc:
                raise ReplayError(f"artifact {digest} holds no decodable response ({exc})", where=where) from exc
        if outcome == "error":
            error = art.get("error")
            if not isinstance(error, dict) or not {"class", "message"} <= error.keys():
                raise ReplayError(f"artifact {digest} records an error without its class and message", where=where)
            failure = _ERRORS.get(str(error["class"]), RaceError)(str(error["message"]))
            # The gap names the live exception's type, so the replayed one must carry it.
            failure.original_type = str(error["class"])  # type: ignore[attr-defined]
            raise failure
        if outcome == "deadline":
            raise ReplayedDeadline(plan_bound=art.get("verdict") == "cancelled")
        if outcome == "not_started":
            raise ReplayError(
                f"leg {request.obligation}/{ref} was cut by the plan deadline before it started; "
                "that live timing cannot be replayed exactly",
                where=where,
            )
        raise ReplayError(f"artifact {digest} has an unknown outcome {outcome!r}", where=where)


class ReplayingRelations:
    """The graph's recorded source-dependence answers."""

    def __init__(self, session: ReplaySession) -> None:
        self.session = session

    def _answer(self, method: str, args: dict[str, Any]) -> dict[str, Any]:
        found = self.session.lookups.get(lookup_key(method, args))
        if found is None:
            exc = ArtifactMissing(f"no retained answer for graph lookup {method}({args})", where=str(self.session.root))
            self.session.failure = self.session.failure or exc
            raise exc
        self.session.used.add(found[0])
        answer = found[1].get("answer")
        if not isinstance(answer, dict) or not all(_answers(method, v) for v in answer.values()):
            broken = ReplayError(
                f"artifact {found[0]} holds no {method} answer (a JSON object of "
                f"{'strings' if method == 'origins' else 'lists of strings'})",
                where=str(artifact_path(self.session.root, found[0])),
            )
            self.session.failure = self.session.failure or broken
            raise broken
        return answer

    def origins(self, node_ids: Sequence[str]) -> dict[str, str]:
        return {k: str(v) for k, v in self._answer("origins", {"node_ids": list(node_ids)}).items()}

    def related(self, ids: Sequence[str], relation: str, direction: str) -> dict[str, tuple[str, ...]]:
        args = {"ids": list(ids), "relation": relation, "direction": direction}
        return {k: tuple(v) for k, v in self._answer("related", args).items()}


def _models(value: Any) -> tuple[dict[str, str | int], ...]:
    """The plan artifact's embedding models, each names to strings or integers as in a receipt."""
    models = tuple(dict(m) for m in value)
    for model in models:
        if not all(isinstance(k, str) and isinstance(v, str | int) for k, v in model.items()):
            raise TypeError(f"models holds {model!r}, not names to strings or integers")
    return models


def _answers(method: str, value: object) -> bool:
    """Whether ``value`` is one id's answer to ``method``: an origin id, or a list of ids."""
    if method == "origins":
        return isinstance(value, str)
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _check_lineage(
    loaded: Sequence[tuple[str, dict[str, Any]]],
    plan: dict[str, Any],
    receipt: Receipt,
    lineage: str | None,
    root: Path,
) -> None:
    """A live lineage's id is the fingerprint of the responses it fetched (``RunRecorder.finish``):
    recomputed from the artifacts, it refuses artifacts altered, re-addressed and listed in an
    edited receipt (each artifact's own hash holds then; the lineage's does not)."""
    fetched = sorted(
        sha256_digest(canonical_json({k: v for k, v in art.items() if k not in ("lineage", "plan")}))
        for _, art in loaded
        if art.get("kind") == "scan"
    )
    basis: dict[str, Any] = {"plan": receipt.fingerprints.plan, "mode": "live", "fetched": fetched}
    basis["retained_at"] = plan.get("created_at")
    if fingerprint(basis) != lineage:
        raise ArtifactTampered(
            f"the retained responses are not those lineage {lineage} fetched (their fingerprint is "
            f"{fingerprint(basis)}); an artifact was replaced and the receipt edited to match",
            where=str(root),
        )


@dataclass
class ReplaySession:
    """Everything replay needs, loaded from the retention directory and verified."""

    root: Path
    receipt: Receipt
    plan: LogicalPlan
    explain: Explain
    generations: dict[str, str]
    models: tuple[dict[str, str | int], ...]
    backends_open: tuple[str, ...]
    with_relations: bool
    early_stop: bool = True
    scans: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)
    lookups: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)
    used: set[str] = field(default_factory=set)
    failure: ReplayError | None = None

    @classmethod
    def open(cls, receipt: Receipt, root: Path) -> ReplaySession:
        if not receipt.retained:
            raise ReplayError("the receipt lists no retained artifacts (run with --retain DIR)", where="receipt")
        if not root.is_dir():
            raise ArtifactMissing("retention directory does not exist", where=str(root))
        lineage = receipt.lineage.parent if receipt.lineage.mode == "replay" else receipt.lineage.id
        loaded = [(digest, load_artifact(root, digest)) for digest in receipt.retained]
        for digest, art in loaded:
            if art.get("lineage") != lineage or art.get("plan") != receipt.fingerprints.plan:
                raise ReplayError(
                    f"artifact {digest} belongs to lineage {art.get('lineage')}, not {lineage}",
                    where=str(artifact_path(root, digest)),
                )
        plans = [(d, a) for d, a in loaded if a.get("kind") == "plan"]
        if len(plans) != 1:
            raise ArtifactMissing(
                f"the receipt lists {len(plans)} plan artifacts; exactly one is needed", where=str(root)
            )
        digest, art = plans[0]
        where = str(artifact_path(root, digest))
        _check_lineage(loaded, art, receipt, lineage, root)
        try:
            plan = LogicalPlan.model_validate(art["logical"])
            explain = Explain.model_validate(art["explain"])
            session = cls(
                root=root,
                receipt=receipt,
                plan=plan,
                explain=explain,
                generations={str(k): str(v) for k, v in art["generations"].items()},
                models=_models(art["models"]),
                backends_open=tuple(str(b) for b in art["backends_open"]),
                with_relations=bool(art["relations"]),
                early_stop=bool(art.get("early_stop", True)),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            # ValidationError is a ValueError; the message is pydantic's, made one line.
            detail = first_validation_error(exc) if isinstance(exc, ValidationError) else f"{type(exc).__name__}: {exc}"
            raise ReplayError(f"plan artifact does not parse ({detail})", where=where) from exc
        # Learned statistics' digest is part of a physical fingerprint they chose (the statistics fingerprint).
        learned = fingerprint({"physical": explain.physical, "statistics": explain.fingerprints.statistics})
        if explain.fingerprints.plan != receipt.fingerprints.plan or receipt.fingerprints.physical not in (
            fingerprint(explain.physical),
            learned,
        ):
            raise ReplayError("plan artifact does not match the receipt's plan and physical fingerprints", where=where)
        parts = explain.fingerprints
        if combined_plan_fingerprint(plan, logical_fingerprint(plan), parts.contracts, parts.backends) != (
            receipt.fingerprints.plan
        ):
            # The explain's fingerprints match, but the logical plan beside it is not the one
            # they were made from (an obligation renamed, a filter changed): the executor would
            # run a plan the physical plan does not serve.
            raise ArtifactTampered(
                f"artifact {digest}: its logical plan is not the plan of the receipt's plan fingerprint "
                f"{receipt.fingerprints.plan}; the artifact was altered",
                where=where,
            )
        session.used.add(digest)
        for digest, art in loaded:
            if art.get("kind") == "scan":
                session.scans[str(art.get("request"))] = (digest, art)
            elif art.get("kind") == "relations":
                session.lookups[str(art.get("key"))] = (digest, art)
        return session

    def adapters(self) -> dict[str, ReplayingAdapter]:
        return {name: ReplayingAdapter(name, self) for name in self.backends_open}

    def relations(self) -> ReplayingRelations | None:
        return ReplayingRelations(self) if self.with_relations else None

    def finish(self, replayed: Receipt) -> Receipt:
        """The replayed receipt in replay lineage, or ``ReplayError`` if anything diverged."""
        if self.failure is not None:
            raise self.failure
        parent = self.receipt.lineage.parent if self.receipt.lineage.mode == "replay" else self.receipt.lineage.id
        assert parent is not None
        out = replayed.model_copy(
            update={
                "lineage": ReceiptLineage(
                    id=fingerprint({"mode": "replay", "parent": parent, "retained": list(self.receipt.retained)}),
                    mode="replay",
                    parent=parent,
                ),
                "retained": self.receipt.retained,
            }
        )
        if out.normalized_bytes() != self.receipt.normalized_bytes():
            raise ReplayError(
                "the replayed receipt differs from the recorded one (evidence "
                f"{out.fingerprints.evidence} vs {self.receipt.fingerprints.evidence}); "
                "the receipt or the code changed since the live run",
                where=str(self.root),
            )
        return out
