"""Write the labelled Kestrel query set from ``benchmarks/kestrel_judgments.py``.

Each judgment's phrase is looked up in its document and becomes a citation (path and
1-based line span); a phrase that is not in its document stops the build. Outputs, under
``fixtures/eval/kestrel/``: ``queries.jsonl``, ``qrels.jsonl`` (graded, with the passages)
and ``qrels.trec`` (the same grades in TREC qrels form).

    .venv/bin/python -m benchmarks.build_eval_set
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from benchmarks.kestrel_judgments import QUERIES

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "fixtures" / "corpus"
OUT = ROOT / "fixtures" / "eval" / "kestrel"


def _documents() -> dict[str, tuple[str, str]]:
    docs = {}
    for path in sorted((CORPUS / "docs").rglob("*.md")):
        text = path.read_text(encoding="utf-8")
        match = re.search(r"^id: (\S+)$", text, re.M)
        assert match, path
        docs[match.group(1)] = (path.relative_to(CORPUS).as_posix(), text)
    return docs


def _span(text: str, phrase: str) -> tuple[int, int] | None:
    at = text.find(phrase)
    if at < 0:
        return None
    first = text.count("\n", 0, at) + 1
    return first, first + phrase.count("\n")


def main() -> int:
    docs = _documents()
    OUT.mkdir(parents=True, exist_ok=True)
    queries, qrels, trec, errors = [], [], [], []
    for qid, category, text, handle, judgments in QUERIES:
        queries.append({"id": qid, "category": category, "text": text, **({"handle": handle} if handle else {})})
        merged: dict[str, dict[str, object]] = {}
        for doc, grade, phrase in judgments:
            if doc not in docs:
                errors.append(f"{qid}: no document {doc}")
                continue
            path, body = docs[doc]
            span = _span(body, phrase)
            if span is None:
                errors.append(f"{qid}: {doc} does not contain {phrase!r}")
                continue
            entry = merged.setdefault(doc, {"query": qid, "doc": doc, "grade": grade, "passages": []})
            entry["grade"] = max(int(str(entry["grade"])), grade)
            passages = entry["passages"]
            assert isinstance(passages, list)
            passages.append({"path": path, "lines": list(span), "quote": phrase})
        for doc in sorted(merged):
            qrels.append(merged[doc])
            trec.append(f"{qid} 0 {doc} {merged[doc]['grade']}")
    if errors:
        print("\n".join(errors), file=sys.stderr)
        return 1
    (OUT / "queries.jsonl").write_text("".join(json.dumps(q, ensure_ascii=False) + "\n" for q in queries))
    (OUT / "qrels.jsonl").write_text("".join(json.dumps(q, ensure_ascii=False) + "\n" for q in qrels))
    (OUT / "qrels.trec").write_text("\n".join(trec) + "\n")
    print(f"{len(queries)} queries, {len(qrels)} judgments -> {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
