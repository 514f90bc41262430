"""Backends an engine serves beside an index directory's own: a Milvus collection.

pymilvus is imported only here, and only when a Milvus backend is asked for (the
``race[milvus]`` extra), so ``race`` and ``race --help`` never load it.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rsc import InputError

if TYPE_CHECKING:
    from backends import Adapter


def open_milvus(folders: Sequence[Path]) -> dict[str, Adapter]:
    """The Milvus adapter of at most one instance folder (``MilvusAdapter.build`` wrote it), by
    backend name. Every Milvus contract names the one backend ``milvus``, so an engine serves
    one collection."""
    if not folders:
        return {}
    if len(folders) > 1:
        raise InputError(
            f"{len(folders)} Milvus instances given; the Milvus contracts name one backend 'milvus', so an engine "
            "serves one collection",
            where="--milvus",
        )
    try:
        from backends.milvus import MilvusAdapter
    except ImportError as exc:
        raise InputError(f"a Milvus backend needs the race[milvus] extra ({exc})", where="--milvus") from exc
    return {MilvusAdapter.backend: MilvusAdapter.open(folders[0])}


def build_milvus(
    corpus_path: Path,
    out: Path,
    *,
    uri: str | None = None,
    collection: str = "race_chunks",
    index_type: str = "FLAT",
    vectors_from: Path | None = None,
    consistency: str = "Strong",
    partition_key: str | None = None,
) -> str:
    """``race milvus``: load a corpus into a Milvus collection and write its instance folder
    ``out`` (``out/milvus/``); with ``vectors_from``, the chunk vectors are those of that RACE
    index's LanceDB table (same corpus revision) instead of being embedded again."""
    from backends import load_corpus

    try:
        from backends.milvus.adapter import MilvusAdapter, lance_vectors
    except ImportError as exc:
        raise InputError(f"a Milvus backend needs the race[milvus] extra ({exc})", where="race milvus") from exc
    corpus = load_corpus(corpus_path)
    vectors = lance_vectors(vectors_from, corpus) if vectors_from is not None else None
    return MilvusAdapter.build(
        corpus,
        out,
        uri=uri,
        collection=collection,
        index_type=index_type,
        vectors=vectors,
        consistency=consistency,
        partition_key=partition_key,
    )


def add_milvus_command(sub: argparse._SubParsersAction[Any]) -> None:
    """``race milvus CORPUS --out DIR``, the instance folder that ``race plan`` and ``race run``
    serve beside the index with ``--milvus DIR``."""
    for name in ("plan", "run"):
        sub.choices[name].add_argument(
            "--milvus", action="append", metavar="DIR", help="a Milvus collection's folder (`race milvus`)"
        )
    p = sub.add_parser("milvus", help="load a corpus into a Milvus collection (needs the race[milvus] extra)")
    p.add_argument("corpus", help="JSONL documents or a folder of .md/.txt files")
    p.add_argument("--out", required=True, help="the instance folder to write (served with --milvus DIR)")
    p.add_argument("--uri", help="Milvus URI (default: a milvus-lite file inside --out)")
    p.add_argument("--collection", default="race_chunks", help="collection name, replaced if it exists")
    p.add_argument("--index-type", choices=("FLAT", "HNSW"), default="FLAT", help="vector index")
    p.add_argument("--vectors-from", metavar="INDEX", help="reuse the chunk vectors of this `race index` directory")
    p.add_argument(
        "--consistency",
        choices=("Strong", "Bounded", "Session", "Eventually"),
        default="Strong",
        help="the consistency level reads use (below Strong a scan may miss recent writes)",
    )
    p.add_argument("--partition-key", metavar="FIELD", help="a keyword or integer field made the partition key")
    p.set_defaults(func=cmd_milvus)


def cmd_milvus(args: argparse.Namespace) -> int:
    generation = build_milvus(
        Path(args.corpus),
        Path(args.out),
        uri=args.uri,
        collection=args.collection,
        index_type=args.index_type,
        vectors_from=Path(args.vectors_from) if args.vectors_from else None,
        consistency=args.consistency,
        partition_key=args.partition_key,
    )
    print(f"milvus\t{generation}")
    return 0
