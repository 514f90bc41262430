"""The contract of an attached Milvus collection, generated from the collection as it is: exact
over a FLAT index, or approximate over an HNSW index with the recall measured on the collection
at attach (``backends.milvus.search.measure_recall_rows``), never assumed."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from backends.ingest.schema import FieldType
from backends.milvus.client import ANN_CONTRACT, FLAT_CONTRACT, HNSW_MIN_EF, RECALL_K
from backends.milvus.consistency import STRONG, Consistency, with_consistency
from rsc import BackendUnavailable, Contract

IDENTITY = ("chunk_id", "doc_id")
ORDERED = frozenset({FieldType.INTEGER, FieldType.FLOAT})


def attached_contract(
    *,
    name: str,
    collection: str,
    uri: str,
    vector: str,
    index: Mapping[str, Any],
    meta: Mapping[str, FieldType],
    partition_keys: Sequence[str],
    absent: Mapping[str, str],
    consistency: Consistency,
    measured: tuple[float, str] | None,
) -> Contract:
    """The one contract of the collection: FLAT's exact, or HNSW's with ``measured`` (the lowest
    Wilson bound of a bucket's recall@10 and the note of every bucket)."""
    from backends.milvus.adapter import MilvusAdapter

    index_type = str(index.get("index_type"))
    flat = index_type == "FLAT"
    template = next(c for c in MilvusAdapter.contracts() if c.rsc_id == (FLAT_CONTRACT if flat else ANN_CONTRACT))
    support: dict[str, Any] = {"support": "native_prefilter_exact"}
    recall_said = ""
    coverage: dict[str, Any] = {"claim": "exhaustive_topk"}
    if not flat:
        if measured is None:
            raise BackendUnavailable(f"{index_type} recall was not measured", where=name)
        stated = math.floor(measured[0] * 100) / 100
        if stated <= 0.0:
            raise BackendUnavailable(f"the {index_type} index measured recall {measured[0]:.3f}: too low", where=name)
        params = ", ".join(f"{k}={v}" for k, v in sorted(dict(index.get("params") or {}).items()))
        profile = (
            f"milvus {index_type} cosine ({params or 'server defaults'}), search ef=max({HNSW_MIN_EF}, k), filter "
            f"expression evaluated inside the index search; recall@{RECALL_K} measured at attach against the exact "
            "float64 answer over the collection's rows"
        )
        support = {"support": "native_filtered_ann", "profile": profile, "recall": stated}
        coverage = {"claim": "approximate", "recall": stated}
        recall_said = (
            f" Recall {stated} is the lowest one-sided 95 % lower bound of a bucket's mean recall@{RECALL_K}, measured "
            f"on this collection when it was attached, by bucket: {measured[1]}; rounded down."
        )
    filters: dict[str, Any] = {f: {**support, "ops": ["eq", "in"]} for f in IDENTITY}
    for column, kind in meta.items():
        filters[column] = {**support, "ops": ["eq", "in", "range"] if kind in ORDERED else ["eq", "in"]}
    keys = [k for k in partition_keys if k in meta]
    keyed = (
        f" Partition key {keys}: an eq/in filter on it is pushed into the expression, which searches only "
        "the partitions its values hash to."
        if keys
        else ""
    )
    how = (
        "the boolean filter expression is evaluated before the top-k, so every row that passes it is compared"
        if flat
        else "approximate: the boolean filter expression is evaluated inside the index search"
    )
    data = template.model_dump(mode="json")
    data.update(
        rsc_id=f"{name}.milvus.{'flat_prefilter' if flat else 'ann_filtered'}",
        version="1.0.0",
        backend=name,
        description=(
            f"Cosine top-k over Milvus collection {collection!r} (field {vector!r}, {index_type} index): {how}. "
            "The score is 1 - cosine similarity; ties at the k-th distance are resolved by id after reading past "
            f"them.{recall_said}{keyed} Read at consistency level {STRONG}."
        ),
        coverage=coverage,
        filters=dict(sorted(filters.items())),
        score_calibration=None,
        provenance_fields=[
            f for f in template.provenance_fields if f not in absent and f not in ("char_start", "char_end")
        ],
        source_domain=f"Milvus collection {collection!r} at {uri}, attached (not loaded by RACE)",
        snapshot={**data["snapshot"], "generation_fields": ["collection", "schema", "index", "row_fingerprint"]},
    )
    return with_consistency(Contract.model_validate(data), consistency)
