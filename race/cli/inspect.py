"""``race inspect DIR``: what an index holds, as text or canonical JSON — its corpus (root,
revision, documents, chunks, edges), every file of a folder corpus accounted for (indexed, or
skipped and why), the schema's fields, relations and roles, each backend's generation, the
calibrations, the embedding models, and the size on disk of each part."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from race.cli.arguments import canonical_pretty


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in sorted(path.rglob("*")) if p.is_file() and not p.is_symlink())


def inspection(index: Path) -> dict[str, Any]:
    """Everything ``race inspect`` shows, as one JSON-ready mapping."""
    from race.engine import Engine
    from race.indexing.indexing import read_index_schema, read_ingest, read_manifest

    manifest = read_manifest(index)  # a missing or foreign directory is bad input, named
    schema = read_index_schema(index)
    ingest = read_ingest(index)
    engine = Engine.open(index)
    try:
        generations = engine.generations()
        models = [dict(m) for m in engine.models()]
    finally:
        engine.close()
    calibrations: list[dict[str, Any]] = []
    calibration = index / "lancedb" / "calibration.json"
    if calibration.is_file():
        found = json.loads(calibration.read_text(encoding="utf-8"))
        for cal in found if isinstance(found, list) else found.get("calibrations", [found]):
            if isinstance(cal, dict):
                calibrations.append({"rsc_id": cal.get("rsc_id"), "buckets": len(cal.get("buckets", []))})
    parts = sorted(p for p in index.iterdir() if not p.name.startswith("."))
    fields = schema.fields.items() if schema is not None else ()
    return {
        "index": str(index),
        "corpus_root": manifest.get("corpus_root"),
        "corpus_revision": manifest.get("corpus_revision"),
        "documents": manifest.get("documents"),
        "chunks": manifest.get("chunks"),
        "edges": manifest.get("edges"),
        "files": None if ingest is None else ingest.model_dump(mode="json") | {"counts": ingest.counts()},
        "schema": None
        if schema is None
        else {
            "fields": {n: {"type": f.type.value, "roles": [r.value for r in f.roles]} for n, f in fields},
            "relations": {n: r.role.value for n, r in schema.relations.items()},
        },
        "generations": dict(sorted(generations.items())),
        "vectors_skipped": manifest.get("vectors_skipped"),
        "calibrations": calibrations,
        "models": models,
        "sizes": {p.name: _size(p) for p in parts} | {"total": sum(_size(p) for p in parts)},
    }


def inspection_text(data: dict[str, Any], *, skipped_limit: int = 20) -> str:
    from backends.ingest.files import reason_words

    out = [
        f"index      {data['index']}",
        f"corpus     {data['corpus_root'] or '(not recorded)'} revision {data['corpus_revision']}",
        f"contents   {data['documents']} documents, {data['chunks']} chunks, {data['edges']} edges",
    ]
    files = data["files"]
    if files is not None:
        reasons = ", ".join(f"{n} {reason_words(r)}" for r, n in files["counts"].items()) or "none"
        out.append(f"files      {files['indexed']} indexed, {len(files['skipped'])} skipped ({reasons})")
        for glob in files["include"]:
            out.append(f"           --include {glob}")
        for glob in files["exclude"]:
            out.append(f"           --exclude {glob}")
        for s in files["skipped"][:skipped_limit]:
            detail = f" ({s['detail']})" if s["detail"] else ""
            out.append(f"  skipped  {s['path']}: {reason_words(s['reason'])}{detail}")
        if len(files["skipped"]) > skipped_limit:
            out.append(f"  … {len(files['skipped']) - skipped_limit} more skipped (--json lists all)")
    schema = data["schema"]
    if schema is not None:
        for name, spec in schema["fields"].items():
            roles = f" role {','.join(spec['roles'])}" if spec["roles"] else ""
            out.append(f"field      {name}: {spec['type']}{roles}")
        for name, role in schema["relations"].items():
            out.append(f"relation   {name}: {role}")
    for backend, generation in data["generations"].items():
        out.append(f"generation {backend} {generation}")
    if data["vectors_skipped"]:
        out.append(f"vectors    none: {data['vectors_skipped']}")
    for cal in data["calibrations"]:
        out.append(f"calibrated {cal['rsc_id']} ({cal['buckets']} buckets)")
    for model in data["models"]:
        out.append(f"model      {model.get('name')} dims={model.get('dims')} {model.get('weights_sha256', '')}")
    sizes = ", ".join(f"{name} {n:,}" for name, n in data["sizes"].items())
    out.append(f"bytes      {sizes}")
    return "\n".join(out) + "\n"


def cmd_inspect(args: argparse.Namespace) -> int:
    data = inspection(Path(args.index))
    sys.stdout.write(canonical_pretty(data) + "\n" if args.json else inspection_text(data))
    return 0


def add_inspect_command(sub: Any) -> None:
    p = sub.add_parser("inspect", help="what an index holds: documents, files skipped, schema, generations, sizes")
    p.add_argument("index", help="an index directory built by `race index`")
    p.add_argument("--json", action="store_true", help="canonical JSON")
    p.set_defaults(func=cmd_inspect)
