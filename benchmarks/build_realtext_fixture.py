"""Build the real-text fixture (``fixtures/realtext/``): Debian packaging text nobody on the
project wrote, its chunks and their committed float32 vectors.

Two steps, each rerunnable on its own:

* ``corpus`` copies text from the Debian packages installed on this machine into
  ``fixtures/realtext/corpus/``: for every second package (in name order) that ships both a
  ``changelog.Debian.gz`` and a ``copyright`` file, the newest changelog entries (up to about
  5 000 characters, cut at an entry boundary) and the start of the copyright file (up to about
  3 000 characters, cut at a paragraph boundary), verbatim, under a front matter naming the
  package, the kind of text, the package's archive section and priority (from dpkg's status
  file) and, for a changelog, the year of its newest entry.
* ``queries`` takes text the corpus does not hold (the newest changelog entry of a third of
  the packages it skipped) as benchmark queries: ``queries.jsonl`` and ``queries.npy``.
* ``vectors`` chunks that corpus exactly as ``race index`` does (the model's tokenizer) and
  embeds every chunk's text with the model, writing ``chunks.jsonl`` (chunk id and embedded
  text, in corpus order) and ``vectors.npy`` (float32, one row per chunk). Tests build the
  LanceDB table from these instead of embedding (about 15 chunks a second here).

    python -m benchmarks.build_realtext_fixture corpus|vectors|queries|all
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent / "fixtures" / "realtext"
CORPUS = ROOT / "corpus"
CHUNKS = ROOT / "chunks.jsonl"
VECTORS = ROOT / "vectors.npy"
QUERIES = ROOT / "queries.jsonl"
QUERY_VECTORS = ROOT / "queries.npy"
QUERY_CHARS = 400
DOC = Path("/usr/share/doc")
STATUS = Path("/var/lib/dpkg/status")
CHANGELOG_CHARS = 5000
COPYRIGHT_CHARS = 3000
_ENTRY = re.compile(r"^\S+ \([^)]*\) [^;]*;", re.MULTILINE)
_TRAILER = re.compile(r"^ -- .*?(\d{4}) \d\d:\d\d:\d\d", re.MULTILINE)
_SCHEMA = """# The schema of the real-text fixture corpus (Debian packaging text; see ../README.md).
schema_version = "race.schema/1"
extra = "error"

[fields.package]
type = "keyword"

[fields.kind]
type = "keyword"

[fields.area]
type = "keyword"

[fields.priority]
type = "keyword"

[fields.year]
type = "integer"
"""


def _status() -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for block in STATUS.read_text(encoding="utf-8", errors="replace").split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line and not line.startswith(" "))
        name = fields.get("Package")
        if name and name not in out:
            out[name] = fields
    return out


def _cut(text: str, limit: int, boundary: re.Pattern[str] | None) -> str:
    if len(text) <= limit:
        return text.rstrip() + "\n"
    if boundary is not None:
        starts = [m.start() for m in boundary.finditer(text) if 0 < m.start() <= limit]
        if starts:
            return text[: starts[-1]].rstrip() + "\n"
    para = text.rfind("\n\n", 0, limit)
    return text[: para if para > 0 else limit].rstrip() + "\n"


def _front(fields: dict[str, str]) -> str:
    return "---\n" + "".join(f"{k}: {json.dumps(v)}\n" for k, v in fields.items()) + "---\n"


def _packages() -> list[Path]:
    packages = []
    for folder in sorted(DOC.iterdir()):
        changelog, copyright_file = folder / "changelog.Debian.gz", folder / "copyright"
        if folder.is_symlink() or changelog.is_symlink() or not changelog.is_file() or not copyright_file.is_file():
            continue
        packages.append(folder)
    return packages


def build_corpus() -> int:
    status = _status()
    written = 0
    for folder in _packages()[::2]:
        name = folder.name
        meta = status.get(name, {})
        common = {
            "package": name,
            "area": meta.get("Section", "unknown").split("/")[-1],
            "priority": meta.get("Priority", "unknown"),
        }
        changelog = gzip.decompress((folder / "changelog.Debian.gz").read_bytes()).decode("utf-8", errors="replace")
        changelog = _cut(changelog.replace("\r", ""), CHANGELOG_CHARS, _ENTRY)
        year = _TRAILER.search(changelog)
        docs = {
            "changelog": (changelog, {"year": year.group(1)} if year else {}),
            "copyright": (
                _cut(
                    (folder / "copyright").read_text(encoding="utf-8", errors="replace").replace("\r", ""),
                    COPYRIGHT_CHARS,
                    None,
                ),
                {},
            ),
        }
        for kind, (body, extra) in docs.items():
            fields = {"id": f"{kind}/{name}", "title": f"{name} {kind}", "kind": kind, **common, **extra}
            target = CORPUS / kind / f"{name}.md"
            target.parent.mkdir(parents=True, exist_ok=True)
            # A line of three dashes in the text would read as front matter's end: indent it.
            safe = "\n".join(" ---" if line.strip() == "---" else line for line in body.split("\n"))
            target.write_text(_front(fields) + safe, encoding="utf-8")
            written += 1
    (CORPUS / "schema.toml").write_text(_SCHEMA, encoding="utf-8")
    return written


def build_vectors() -> int:
    from backends.ingest.corpus import Chunking, load_corpus
    from backends.lancedb.build import chunk_text
    from backends.models.embedding import MiniLMEmbedder, token_counter

    corpus = load_corpus(CORPUS, chunking=Chunking(tokens=token_counter()))
    texts = [chunk_text(c) for c in corpus.chunks]
    embedder = MiniLMEmbedder()
    vectors = np.empty((len(texts), embedder.identity.dims), dtype=np.float32)
    for start in range(0, len(texts), 64):
        vectors[start : start + 64] = embedder.embed(texts[start : start + 64])
        sys.stderr.write(f"\r{min(start + 64, len(texts))}/{len(texts)}")
    sys.stderr.write("\n")
    with CHUNKS.open("w", encoding="utf-8") as out:
        for chunk, text in zip(corpus.chunks, texts, strict=True):
            out.write(json.dumps({"chunk_id": chunk.chunk_id, "text": text}, ensure_ascii=False) + "\n")
    np.save(VECTORS, vectors)
    identity = embedder.identity.model_dump(mode="json")
    (ROOT / "embedder.json").write_text(json.dumps(identity, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return len(texts)


def build_queries() -> int:
    """Queries from text outside the corpus: the newest changelog entry of every other package
    the corpus skipped (up to ``QUERY_CHARS`` characters), embedded."""
    from backends.models.embedding import MiniLMEmbedder

    texts = []
    for folder in _packages()[1::2][::3]:
        changelog = gzip.decompress((folder / "changelog.Debian.gz").read_bytes()).decode("utf-8", errors="replace")
        entry = _cut(changelog.replace("\r", ""), 2000, _ENTRY)
        body = "\n".join(line.strip() for line in entry.splitlines()[1:] if line.strip() and not line.startswith(" --"))
        if len(body) >= 40:
            texts.append({"package": folder.name, "text": body[:QUERY_CHARS]})
    vectors = MiniLMEmbedder().embed([t["text"] for t in texts])
    with QUERIES.open("w", encoding="utf-8") as out:
        for row in texts:
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
    np.save(QUERY_VECTORS, vectors)
    return len(texts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.build_realtext_fixture")
    parser.add_argument("step", choices=("corpus", "vectors", "queries", "all"))
    args = parser.parse_args(argv)
    if args.step in ("corpus", "all"):
        sys.stdout.write(f"{build_corpus()} documents\n")
    if args.step in ("vectors", "all"):
        sys.stdout.write(f"{build_vectors()} chunks\n")
    if args.step in ("queries", "all"):
        sys.stdout.write(f"{build_queries()} queries\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
